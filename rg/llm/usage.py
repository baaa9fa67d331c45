"""Token and call accounting for LLM calls, per pipeline stage and per side (Hand or Brain).

A :class:`Usage` is an immutable sum of calls; a :class:`UsageLedger` keeps one per
``(stage, side)`` key. Ledgers from Ray actors travel as :meth:`UsageLedger.to_dict` (plain JSON)
and are folded together on the driver with :meth:`UsageLedger.merge`::

    ledger = UsageLedger()
    ledger.add("refine", "hand", Usage(prompt_tokens=120, completion_tokens=8, total_tokens=128, calls=1))
    ledger.merge(UsageLedger.from_dict(actor_result["usage"]))
    report["usage"] = ledger.to_dict()
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, get_args

Side = Literal["hand", "brain"]
"""Which tower a call belongs to (PrivGemo): the local Hand or the remote Brain."""

SIDES: tuple[str, ...] = get_args(Side)


@dataclass(frozen=True)
class Usage:
    """Summed cost of one or more LLM calls.

    Attributes:
        prompt_tokens: Prompt tokens reported by the server (0 when it reports none).
        completion_tokens: Completion tokens reported by the server.
        total_tokens: Total tokens reported by the server (prompt + completion if absent).
        calls: Logical calls (one per ``complete``, however many HTTP attempts it took).
        retries: HTTP attempts beyond the first, summed over calls.
        failures: Calls that ended in an error after their retries.
        latency_s: Wall-clock seconds of the calls, summed.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    calls: int = 0
    retries: int = 0
    failures: int = 0
    latency_s: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(Usage)})

    def to_dict(self) -> dict[str, int | float]:
        """JSON-ready mapping of every field."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Usage:
        """Inverse of :meth:`to_dict`; missing fields count as zero, unknown ones are an error.

        Raises:
            ValueError: On a key that is not a Usage field.
        """
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown Usage fields {sorted(unknown)}; expected a subset of {sorted(known)}")
        return cls(**{k: (float(v) if k == "latency_s" else int(v)) for k, v in data.items()})


class UsageLedger:
    """Mutable per-instance totals of :class:`Usage` keyed by ``(stage, side)``.

    ``stage`` is a free string naming the pipeline step (e.g. ``"refine"``, ``"read"``);
    ``side`` is ``"hand"`` or ``"brain"``. One ledger belongs to one client or one worker; it is
    not shared between threads.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Usage] = {}

    def add(self, stage: str, side: Side, usage: Usage) -> None:
        """Add ``usage`` to the ``(stage, side)`` entry.

        Raises:
            ValueError: If ``stage`` is empty or ``side`` is not ``hand``/``brain``.
        """
        if not stage:
            raise ValueError("stage must be a non-empty string, e.g. 'refine'")
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        key = (stage, side)
        self._entries[key] = self._entries.get(key, Usage()) + usage

    def get(self, stage: str, side: Side) -> Usage:
        """The entry for ``(stage, side)``; an all-zero Usage if nothing was booked there."""
        return self._entries.get((stage, side), Usage())

    def entries(self) -> dict[tuple[str, str], Usage]:
        """A copy of all ``(stage, side) → Usage`` entries."""
        return dict(self._entries)

    def total(self) -> Usage:
        """Sum over every stage and side."""
        return sum(self._entries.values(), Usage())

    def by_stage(self) -> dict[str, Usage]:
        """Per-stage sums over both sides."""
        out: dict[str, Usage] = {}
        for (stage, _side), usage in self._entries.items():
            out[stage] = out.get(stage, Usage()) + usage
        return out

    def by_side(self) -> dict[str, Usage]:
        """Per-side sums over all stages."""
        out: dict[str, Usage] = {}
        for (_stage, side), usage in self._entries.items():
            out[side] = out.get(side, Usage()) + usage
        return out

    def merge(self, other: UsageLedger) -> None:
        """Add every entry of ``other`` into this ledger (``other`` is unchanged)."""
        for (stage, side), usage in other.entries().items():
            self.add(stage, side, usage)  # type: ignore[arg-type]

    def drain(self) -> UsageLedger:
        """Move every entry into a new ledger and leave this one empty (per-batch reporting)."""
        moved = UsageLedger()
        moved._entries, self._entries = self._entries, {}
        return moved

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``{"stages": {stage: {side: usage}}, "total": usage}``.

        ``total`` is informative; :meth:`from_dict` rebuilds from ``stages`` only.
        """
        stages: dict[str, dict[str, dict[str, int | float]]] = {}
        for (stage, side), usage in sorted(self._entries.items()):
            stages.setdefault(stage, {})[side] = usage.to_dict()
        return {"stages": stages, "total": self.total().to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UsageLedger:
        """Rebuild a ledger from :meth:`to_dict` output.

        Raises:
            ValueError: If ``data`` has no ``stages`` mapping or holds an unknown side or field.
        """
        stages = data.get("stages") if isinstance(data, dict) else None
        if not isinstance(stages, dict):
            raise ValueError("a usage ledger dict needs a 'stages' mapping, as written by UsageLedger.to_dict()")
        ledger = cls()
        for stage, sides in stages.items():
            for side, usage in sides.items():
                ledger.add(stage, side, Usage.from_dict(usage))
        return ledger

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UsageLedger):
            return NotImplemented
        return self._entries == other._entries

    def __repr__(self) -> str:
        total = self.total()
        return f"UsageLedger({len(self._entries)} entries, calls={total.calls}, tokens={total.total_tokens})"
