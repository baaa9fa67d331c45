"""The token sequences the tuned reader may write (:class:`AnswerGrammar`): names from the evidence's
candidate set, separated by :data:`SEPARATOR` and ended by EOS, kept as a token trie that the decoder and the
training targets both walk."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

SEPARATOR = "\n"
"""Between two answer names; one token of the reader's tokenizer."""


class _Node:
    __slots__ = ("children", "name")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.name: str | None = None


@dataclass
class AnswerGrammar:
    """The token sequences a constrained reader may write: names from a fixed set, separated.

    A reply is ``name (SEP name)* EOS`` with every name from ``names`` and at most
    ``max_answers`` names. :meth:`allowed` gives the next tokens allowed after a generated
    prefix (the ``prefix_allowed_tokens_fn`` of ``generate``); :meth:`parse` reads the names back.

    Attributes:
        names: Candidate names (distinct, non-empty).
        sep: Token ids of the separator.
        eos: End-of-reply token id.
    """

    names: Sequence[str]
    tokenizer: Any
    eos: int
    max_answers: int = 4
    max_name_tokens: int = 32
    root: _Node = field(init=False)
    sep: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.sep = tuple(self.tokenizer(SEPARATOR, add_special_tokens=False)["input_ids"])
        if len(self.sep) != 1:
            raise ValueError(f"the separator {SEPARATOR!r} must be one token of this tokenizer, got {self.sep}")
        self.root = _Node()
        for name in dict.fromkeys(n for n in self.names if n.strip()):
            ids = self.tokenizer(name, add_special_tokens=False)["input_ids"]
            if not ids or len(ids) > self.max_name_tokens or self.sep[0] in ids or self.eos in ids:
                continue
            node = self.root
            for token in ids:
                node = node.children.setdefault(token, _Node())
            node.name = node.name or name

    @property
    def empty(self) -> bool:
        return not self.root.children

    def encode(self, names: Sequence[str]) -> list[int]:
        """The token ids of a reply naming ``names`` (the training target), ending with EOS."""
        out: list[int] = []
        for index, name in enumerate(names):
            if index:
                out.extend(self.sep)
            out.extend(self.tokenizer(name, add_special_tokens=False)["input_ids"])
        return out + [self.eos]

    def _walk(self, generated: Sequence[int]) -> tuple[_Node, list[str], bool]:
        """(node reached, names completed, whether the reply is malformed) for a generated prefix."""
        node, names = self.root, []
        for token in generated:
            if token == self.sep[0] and node.name is not None:
                names.append(node.name)
                node = self.root
            elif token in node.children:
                node = node.children[token]
            else:
                return node, names, True
        return node, names, False

    def allowed(self, generated: Sequence[int]) -> list[int]:
        """Token ids that may follow ``generated`` (EOS alone once the reply is complete)."""
        node, names, broken = self._walk(generated)
        if broken or (generated and generated[-1] == self.eos):
            return [self.eos]
        options = list(node.children)
        if node.name is not None:
            options.append(self.eos)
            if len(names) + 1 < self.max_answers:
                options.append(self.sep[0])
        return options or [self.eos]

    def parse(self, generated: Sequence[int]) -> list[str]:
        """The distinct names of a generated reply, in order (a trailing complete name counts)."""
        tokens = [t for t in generated if t != self.eos]
        node, names, _broken = self._walk(tokens)
        if node.name is not None and node is not self.root:
            names.append(node.name)
        return list(dict.fromkeys(names))
