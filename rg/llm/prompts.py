"""Prompt templates as objects: defined once, rendered to chat messages, identified by id@version.

A :class:`PromptTemplate` holds a system message, instructions, one worked example and a
``task_format`` with named fields. Its ``full_id`` (``"select_paths@v2"``) is stored with every
label and checkpoint it produced, and ``digest`` fingerprints the text so an edit made without
bumping ``version`` shows up. Each task module defines its template constant beside its parser;
a :class:`PromptRegistry` (immutable) collects templates so they can be looked up by id::

    SELECT = PromptTemplate(id="select_paths", version=1, system=..., instructions=...,
                            example=..., task_format="Question: {question}\\nPaths:\\n{paths}")
    PROMPTS = PromptRegistry((SELECT, READ))
    messages = PROMPTS.get("select_paths").render(question=q, paths=listing)

The user message is ``instructions``, then ``Example:`` and the example, then ``Task:`` and the
filled-in ``task_format``. Sections are dedented and stripped, so triple-quoted text is fine.
"""

from __future__ import annotations

import hashlib
import re
import string
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

_ID = re.compile(r"^[a-z][a-z0-9_.-]*$")
_FULL_ID = re.compile(r"^(?P<id>[^@]+)@v(?P<version>[0-9]+)$")


def _clean(text: str) -> str:
    """Dedent and strip one section of a template."""
    return textwrap.dedent(text).strip()


def _task_fields(template_id: str, version: int, task_format: str) -> tuple[str, ...]:
    """Named fields of a task format in first-use order; ValueError on any other kind of field."""
    full_id = f"{template_id}@v{version}"
    try:
        parsed = list(string.Formatter().parse(_clean(task_format)))
    except ValueError as err:
        raise ValueError(f"prompt {full_id}: task_format is not a valid format string: {err}") from None
    names: list[str] = []
    for _literal, name, _spec, _conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier():
            raise ValueError(
                f"prompt {full_id}: task_format field {{{name}}} must be a plain name such as {{question}}"
            )
        if name not in names:
            names.append(name)
    return tuple(names)


@dataclass(frozen=True)
class PromptTemplate:
    """One versioned chat prompt.

    Attributes:
        id: Stable name, lower case (``[a-z][a-z0-9_.-]*``), e.g. ``"select_paths"``.
        version: Positive integer; bump it whenever the wording changes.
        system: The system message.
        instructions: What to do and the exact output format expected.
        example: One worked example (input and the expected output); ``""`` omits the section.
        task_format: The task section, a ``str.format`` string with named fields only,
            e.g. ``"Question: {question}\\nPaths:\\n{paths}"``.

    Raises:
        ValueError: On a bad id or version, an empty system/instructions/task_format, or
            positional / dotted / indexed fields in ``task_format``.
    """

    id: str
    version: int
    system: str
    instructions: str
    example: str
    task_format: str

    def __post_init__(self) -> None:
        if not _ID.match(self.id):
            raise ValueError(f"prompt id {self.id!r} must match [a-z][a-z0-9_.-]* (no '@'), e.g. 'select_paths'")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise ValueError(f"prompt {self.id!r}: version must be an integer >= 1, got {self.version!r}")
        for name in ("system", "instructions", "task_format"):
            if not _clean(getattr(self, name)):
                raise ValueError(f"prompt {self.id!r}: `{name}` is empty; write it out")
        _task_fields(self.id, self.version, self.task_format)

    @property
    def full_id(self) -> str:
        """``"<id>@v<version>"``, the identity stored with labels and checkpoints."""
        return f"{self.id}@v{self.version}"

    @property
    def fields(self) -> tuple[str, ...]:
        """Named fields of ``task_format`` in first-use order (checked at construction)."""
        return _task_fields(self.id, self.version, self.task_format)

    @property
    def digest(self) -> str:
        """First 12 hex digits of SHA-256 over all sections (changes with any wording edit)."""
        text = "\x1f".join((self.id, str(self.version), self.system, self.instructions, self.example, self.task_format))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]

    def render(self, **fields: Any) -> list[dict[str, str]]:
        """Chat messages for one task: a system message and a user message.

        Args:
            **fields: One value per name in :attr:`fields` (formatted with ``str.format``).

        Raises:
            ValueError: Naming the missing and unexpected fields.
        """
        expected = set(self.fields)
        missing = [name for name in self.fields if name not in fields]
        unexpected = sorted(set(fields) - expected)
        if missing or unexpected:
            raise ValueError(
                f"prompt {self.full_id}: missing fields {missing}, unexpected fields {unexpected}; "
                f"render() takes exactly {list(self.fields)}"
            )
        sections = [_clean(self.instructions)]
        if _clean(self.example):
            sections.append("Example:\n" + _clean(self.example))
        sections.append("Task:\n" + _clean(self.task_format).format(**fields))
        return [
            {"role": "system", "content": _clean(self.system)},
            {"role": "user", "content": "\n\n".join(sections)},
        ]


class PromptRegistry:
    """An immutable collection of :class:`PromptTemplate` looked up by id or full id.

    Several versions of one id may be registered (to reproduce old labels); ``get("x")``
    returns the highest version and ``get("x@v1")`` an exact one. Build a new registry with
    :meth:`extended` instead of mutating one.

    Args:
        templates: The templates; two with the same ``full_id`` are an error.

    Raises:
        ValueError: On a duplicate ``full_id`` or a non-template entry.
    """

    __slots__ = ("_by_full_id",)

    def __init__(self, templates: Iterable[PromptTemplate]) -> None:
        by_full_id: dict[str, PromptTemplate] = {}
        for template in templates:
            if not isinstance(template, PromptTemplate):
                raise ValueError(f"PromptRegistry takes PromptTemplate objects, got {type(template).__name__}")
            if template.full_id in by_full_id:
                raise ValueError(f"prompt {template.full_id} is registered twice; bump the version of one of them")
            by_full_id[template.full_id] = template
        object.__setattr__(self, "_by_full_id", MappingProxyType(by_full_id))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("PromptRegistry is immutable; build a new one with .extended(...)")

    def __reduce__(self) -> tuple[type[PromptRegistry], tuple[tuple[PromptTemplate, ...]]]:
        return (PromptRegistry, (tuple(self._by_full_id.values()),))

    def get(self, key: str) -> PromptTemplate:
        """The template for ``"id"`` (highest version) or ``"id@vN"`` (exact).

        Raises:
            KeyError: Naming the key and listing the registered full ids.
        """
        template = self._by_full_id.get(key)
        if template is None and _FULL_ID.match(key) is None:
            versions = [t for t in self._by_full_id.values() if t.id == key]
            template = max(versions, key=lambda t: t.version) if versions else None
        if template is None:
            raise KeyError(f"unknown prompt {key!r}; registered: {sorted(self._by_full_id)}")
        return template

    def ids(self) -> tuple[str, ...]:
        """Distinct template ids, sorted."""
        return tuple(sorted({t.id for t in self._by_full_id.values()}))

    def extended(self, templates: Iterable[PromptTemplate]) -> PromptRegistry:
        """A new registry with this one's templates plus ``templates``."""
        return PromptRegistry((*self._by_full_id.values(), *templates))

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        try:
            self.get(key)
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[PromptTemplate]:
        return iter(self._by_full_id.values())

    def __len__(self) -> int:
        return len(self._by_full_id)

    def __repr__(self) -> str:
        return f"PromptRegistry({sorted(self._by_full_id)})"
