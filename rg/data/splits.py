"""Which questions train, validate and test: canonical split files or a seeded split.

Two kinds of split file ship with the data (``../shared/data/splits``):

- MetaQA: ``{"unit": "0-based line index", "splits": {"1hop": {"train": [...], ...}, ...}}``;
  line ``i`` of ``qa_test_{h}hop`` is the question id ``metaqa-{h}hop-test-{i}``
  (:func:`rg.data.metaqa.read_metaqa_questions`), and its *group* is ``{h}hop``.
- WebQSP (and any dataset keyed by id): ``{"unit": "id", "splits": {"train": [ids], ...}}``;
  one group, ``all``.

Without a file, :func:`seeded_split` shuffles the ids with a seed and holds out a fraction for
validation (there is then no test side). :class:`SplitConfig` is the section of the training,
refinement and evaluation configs that picks one of the two and optionally caps each side to a
seeded, group-stratified subsample, so that a CPU run can use a few thousand of MetaQA's
questions while every job still agrees on which questions are which::

    split = SplitConfig(file="@shared/splits/metaqa_split.json.gz", max_questions={"train": 2100})
    wanted = split.ids_from_file()          # {"train": {...}, "val": {...}, "test": {...}}
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from rg.config import Config
from rg.data.metaqa import read_metaqa_split
from rg.run.paths import require_input, resolve_data_path
from rg.data.records import read_json_file
from rg.data.rog import read_rog, read_rog_selected
from rg.data.sample import Sample
from rg.data.webqsp import read_webqsp_split

SplitName = Literal["train", "val", "test"]
SPLIT_NAMES: tuple[SplitName, ...] = ("train", "val", "test")


@dataclass(frozen=True)
class QuestionSplit:
    """A split read from a file: per question id, its side and its group.

    Attributes:
        side: Question id → ``train``, ``val`` or ``test``.
        group: Question id → stratum (``1hop`` … for MetaQA, ``all`` otherwise).
    """

    side: Mapping[str, str]
    group: Mapping[str, str]

    def ids(self, name: str) -> list[str]:
        """The ids on side ``name``, in file order."""
        return [question_id for question_id, side in self.side.items() if side == name]


def read_question_split(path: str | Path) -> QuestionSplit:
    """Read a MetaQA (line-index) or id-keyed split file.

    Raises:
        ValueError: if the file is of neither form, names a side other than
            train/val/test, or lists an id twice.
    """
    data = read_json_file(path)
    unit = data.get("unit") if isinstance(data, dict) else None
    side: dict[str, str] = {}
    group: dict[str, str] = {}
    if unit == "0-based line index":
        for hops, sides in read_metaqa_split(path).items():
            for name, indices in sides.items():
                for index in indices:
                    question_id = f"metaqa-{hops}hop-test-{index}"
                    side[question_id], group[question_id] = name, f"{hops}hop"
    elif unit == "id":
        for name, ids in read_webqsp_split(path).items():
            for question_id in ids:
                side[question_id], group[question_id] = name, "all"
    else:
        raise ValueError(f"{path}: split unit must be '0-based line index' or 'id', got {unit!r}")
    unknown = sorted(set(side.values()) - set(SPLIT_NAMES))
    if unknown:
        raise ValueError(f"{path}: unknown split name(s) {unknown}; expected {list(SPLIT_NAMES)}")
    return QuestionSplit(side=side, group=group)


class DuplicateIdError(ValueError):
    """Question ids repeat in an input; every question needs a unique id (the split and the scores key on it)."""

    def __init__(self, ids: Sequence[str], where: str = "the input") -> None:
        counts: dict[str, int] = defaultdict(int)
        for question_id in ids:
            counts[question_id] += 1
        repeated = sorted(i for i, n in counts.items() if n > 1)
        shown = ", ".join(repr(i) for i in repeated[:5]) + (f" and {len(repeated) - 5} more" if len(repeated) > 5 else "")
        super().__init__(f"question ids repeat in {where}: {shown}. Fix: give every question a unique id "
                         "(or deduplicate the input)")
        self.repeated = repeated


def seeded_split(ids: Sequence[str], val_fraction: float, seed: int) -> tuple[set[str], set[str]]:
    """Split question ids into (train, val) by a seeded shuffle of the sorted ids.

    Each side gets at least one id when there are two or more.

    Raises:
        DuplicateIdError: for repeated ids.
        ValueError: for fewer than two ids.
    """
    unique = sorted(set(ids))
    if len(unique) != len(ids):
        raise DuplicateIdError(ids)
    if len(unique) < 2:
        raise ValueError(f"need at least 2 questions to split into train and validation, got {len(unique)}")
    random.Random(f"rg-train-split:{seed}").shuffle(unique)
    n_val = min(max(1, round(val_fraction * len(unique))), len(unique) - 1)
    return set(unique[n_val:]), set(unique[:n_val])


def stratified_sample(ids: Iterable[str], group: Mapping[str, str], n: int, seed: int) -> set[str]:
    """``n`` ids drawn by a seeded shuffle within each group, as evenly as the groups allow.

    Groups get ``n // groups`` each (the remainder goes to the first groups in sorted order);
    a group with fewer ids gives all it has and the others do not make up the difference, so
    the sample stays balanced.
    """
    by_group: dict[str, list[str]] = defaultdict(list)
    for question_id in ids:
        by_group[group.get(question_id, "all")].append(question_id)
    names = sorted(by_group)
    chosen: set[str] = set()
    for position, name in enumerate(names):
        members = sorted(by_group[name])
        random.Random(f"rg-split-sample:{seed}:{name}").shuffle(members)
        quota = n // len(names) + (1 if position < n % len(names) else 0)
        chosen.update(members[:quota])
    return chosen


class SplitConfig(Config):
    """Train / validation / test membership of the questions, shared by every job."""

    file: str | None = Field(
        None,
        description="Canonical split file (e.g. `@shared/splits/metaqa_split.json.gz`); unset: a seeded split "
        "of the input into train and val by `val_fraction` (no test side).",
    )
    val_fraction: float = Field(0.2, gt=0, lt=1, description="Held-out share when no `file` is given.")
    seed: int = Field(0, description="Seed of the seeded split and of the subsamples.")
    max_questions: dict[SplitName, int] = Field(
        default_factory=dict,
        description="Cap per side, e.g. `{train: 2100, val: 300}`: a seeded subsample stratified by group "
        "(hop for MetaQA), so CPU runs use part of a large split.",
    )

    @model_validator(mode="after")
    def _positive_caps(self) -> "SplitConfig":
        bad = {name: n for name, n in self.max_questions.items() if n < 1}
        if bad:
            raise ValueError(f"max_questions must be ≥ 1 per side, got {bad}")
        return self

    def _capped(self, name: str, ids: Iterable[str], group: Mapping[str, str]) -> set[str]:
        ids = set(ids)
        cap = self.max_questions.get(name)  # type: ignore[call-overload]
        return ids if cap is None or cap >= len(ids) else stratified_sample(ids, group, cap, self.seed)

    def ids_from_file(self) -> dict[str, set[str]]:
        """Side → ids of the split file, each side capped by ``max_questions``.

        Raises:
            ValueError: if no ``file`` is set.
        """
        if self.file is None:
            raise ValueError("split.file is not set; use assign() to split the input's ids with a seed")
        split = read_question_split(resolve_data_path(self.file))
        return {name: self._capped(name, split.ids(name), split.group) for name in SPLIT_NAMES}

    def assign(self, ids: Sequence[str], group: Mapping[str, str] | None = None) -> dict[str, set[str]]:
        """Side → the given ids on that side (from the file, or a seeded train/val split).

        Args:
            ids: The ids present in the input (ids of the file absent here are ignored).
            group: Stratum per id for the caps of a seeded split (default: one group).
        """
        present = set(ids)
        if self.file is not None:
            return {name: members & present for name, members in self.ids_from_file().items()}
        train, val = seeded_split(list(ids), self.val_fraction, self.seed)
        group = group or {}
        return {"train": self._capped("train", train, group), "val": self._capped("val", val, group), "test": set()}


def _group_of(sample: Sample) -> str:
    return f"{sample.hops}hop" if sample.hops is not None else "all"


def load_split_samples(
    inputs: str | Sequence[str], split: SplitConfig, sides: Sequence[str], limit: int | None = None, graph: bool = True
) -> dict[str, list[Sample]]:
    """Read the questions of the wanted sides from RoG inputs, in input order.

    With a split file only those ids are decoded (:func:`read_rog_selected`); without one the
    inputs are read whole (up to ``limit``) and split with :meth:`SplitConfig.assign`,
    stratifying caps by hop count.

    Args:
        inputs: RoG files or folders (``@shared/...`` allowed).
        split: The split section of the job's config.
        sides: Any of ``train``, ``val``, ``test``, or ``all`` for every question read.
        limit: Keep at most this many questions per input (quick runs; applied before the split
            when there is no file).
        graph: False reads the questions without their subgraphs (``triples`` empty).

    Raises:
        ValueError: for an unknown side, or ``test`` without a split file.
    """
    unknown = [s for s in sides if s not in (*SPLIT_NAMES, "all")]
    if unknown:
        raise ValueError(f"unknown split side(s) {unknown}; use train, val, test or all")
    if "test" in sides and split.file is None:
        raise ValueError("split side 'test' needs `split.file` (a seeded split has only train and val)")
    paths = [inputs] if isinstance(inputs, str) else list(inputs)
    for path in paths:
        require_input(path)
    if split.file is not None and "all" not in sides:
        by_side = split.ids_from_file()
        wanted = set().union(*(by_side[s] for s in sides))
        read = [islice(read_rog_selected(resolve_data_path(p), wanted, graph), limit) for p in paths]
    else:
        read = [islice(read_rog(resolve_data_path(p), graph), limit) for p in paths]
    samples = [sample if graph else replace(sample, triples=()) for stream in read for sample in stream]
    result: dict[str, list[Sample]] = {"all": samples} if "all" in sides else {}
    assigned = split.assign([s.id for s in samples], {s.id: _group_of(s) for s in samples})
    for side in sides:
        if side != "all":
            result[side] = [s for s in samples if s.id in assigned[side]]
    return result


class QuestionSetConfig(Config):
    """Which questions a job reads: inputs, a per-input limit, the split and the side of it."""

    input: str | list[str] = Field(
        description="RoG parquet/jsonl(.gz) file(s) or folder(s) of shards; `@shared/...` allowed."
    )
    limit: int | None = Field(None, ge=1, description="Only the first N questions of each input.")
    split: SplitConfig = Field(
        default_factory=SplitConfig, description="As in the training config, so `side: val` is its held-out side."
    )
    side: Literal["all", "train", "val", "test"] = Field(
        "all", description="Questions to use; `test` needs `split.file`."
    )
