"""Sweeps that need no training: replay cached retrieval scores under other QA settings.

Retrieval is the expensive part of answering (a retriever or planner forward per question);
evidence construction and reading are cheap. A no-training sweep scores each question once with
the base evaluation's scorer, stores the scores (and a planner's decoded paths), and then
evaluates any number of evidence and reader settings against the same cached scores::

    base = load_config("configs/evaluate_qa_synthetic.yaml", QAEvaluateConfig)
    data = SweepData.prepare(base, cache_dir="outputs/sweep/scores")     # scores once
    evaluate_point(base_dict, ["top_k=50", "evidence.max_length=2"], data)  # {"hits1": ..., ...}

Only keys that leave retrieval untouched may vary (:data:`SWEEPABLE`): a change of retriever,
input or split needs new scores, that is a training sweep. Gold answers stay in
:class:`SweepData`'s ``gold`` and are used only to score predictions, never to answer.

A base with ``reasoner: dualtower`` sweeps the controller's own settings instead (``dualtower.``
keys: W1, W_max, α, D_max, beams, privacy mode…): nothing is cached but the questions, each point
answers them with the trained planner as the local Brain (loaded once per Tune worker process),
and ``brain_calls`` per question is a cost for the Pareto front.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from itertools import product
from typing import Any, Callable, ClassVar, Literal, Mapping, Sequence

import numpy as np
from pydantic import Field, field_validator
from tqdm.auto import tqdm

from rg.config import Config, ConfigError, apply_overrides, read_yaml, validate_config
from rg.console import user_stream
from rg.data.sample import Sample
from rg.data.splits import DuplicateIdError, load_split_samples
from rg.run.storage import resolve_mapping, submitted_job
from rg.evaluation.qa import answer_questions, build_reader, inference_view
from rg.jobs.evaluate_qa import QAEvaluateConfig
from rg.jobs.qa_pool import build_qa_scorer
from rg.evaluation.qa_metrics import Gold, score_prediction, summarize
from rg.evaluation.scorers import PathScorer
from rg.runtime import RayConfig

SWEEPABLE = ("top_k", "min_triple_score", "chains", "evidence.", "reader.", "match", "dualtower.")
"""Key prefixes a no-training sweep may vary: evidence and reading (or, with ``reasoner: dualtower``, the
controller's settings), never retrieval."""
DUALTOWER_KEYS = ("dualtower.", "match")
"""What a ``reasoner: dualtower`` base may vary (it has no retrieval, evidence or reader settings)."""
SCORES_FILE = "scores.npz"
META_FILE = "scores.json"

DecodedPaths = list[tuple[tuple[str, ...], float]]


def check_sweep_key(key: str) -> None:
    """Refuse a swept key that would change retrieval (its cached scores would be stale)."""
    if not any(key == p or (p.endswith(".") and key.startswith(p)) for p in SWEEPABLE):
        raise ConfigError(
            f"space key {key!r} changes retrieval, which a no-training sweep replays from cache. "
            f"Fix: sweep only keys starting with {list(SWEEPABLE)}, or use a training sweep"
        )


class CachedScorer:
    """A :class:`~rg.evaluation.scorers.TripleScorer` that replays recorded scores by question id.

    Its name is ``cached:<scorer>`` so results say which retriever produced the scores.
    """

    def __init__(self, scorer: str, scores: Mapping[str, np.ndarray], paths: Mapping[str, DecodedPaths]) -> None:
        self.name = f"cached:{scorer}"
        self._scores = scores
        self._paths = paths

    def score(self, samples: Sequence[Sample]) -> list[np.ndarray]:
        out = []
        for sample in samples:
            if sample.id not in self._scores:
                raise KeyError(f"question {sample.id!r} has no cached scores; rebuild the cache")
            scores = self._scores[sample.id]
            if len(scores) != len(sample.triples):
                raise ValueError(f"cached scores of {sample.id!r} cover {len(scores)} triples, the question has {len(sample.triples)}")
            out.append(scores)
        return out

    def decoded_paths(self, question_id: str) -> DecodedPaths:
        """The planner's decoded paths recorded with the scores (empty for a triple retriever)."""
        return self._paths.get(question_id, [])


def _fingerprint(base: QAEvaluateConfig, ids: Sequence[str]) -> str:
    """What the cached scores depend on: the scorer, the input, the side and the question ids."""
    record = {
        "retriever": base.retriever.model_dump(mode="json"),
        "input": base.input,
        "side": base.side,
        "split": base.split.model_dump(mode="json"),
        "limit": base.limit,
        "ids": list(ids),
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def _score_all(base: QAEvaluateConfig, samples: Sequence[Sample], batch: int, progress: bool) -> tuple[str, dict, dict]:
    scorer = build_qa_scorer(base)
    scores: dict[str, np.ndarray] = {}
    paths: dict[str, DecodedPaths] = {}
    decodes = isinstance(scorer, PathScorer)
    with tqdm(total=len(samples), unit="q", desc="score questions (once)", disable=not progress,
              file=user_stream()) as bar:
        for start in range(0, len(samples), batch):
            chunk = [inference_view(s) for s in samples[start : start + batch]]
            for sample, array in zip(chunk, scorer.score(chunk)):
                scores[sample.id] = np.asarray(array, dtype=np.float64)
                if decodes:
                    paths[sample.id] = [(tuple(p), float(w)) for p, w in scorer.decoded_paths(sample.id)]
            bar.update(len(chunk))
    return scorer.name, scores, paths


@dataclass(frozen=True)
class SweepData:
    """What every trial of a no-training sweep shares: questions, gold answers and cached scores.

    Attributes:
        samples: Inference views of the questions (no answers).
        gold: Gold answers by question id (scoring only).
        scorer: The cached scores' replaying scorer (None for ``reasoner: dualtower``, which scores nothing).
    """

    @property
    def scorer_name(self) -> str:
        """Which scores the sweep replays (``dualtower`` when it answers with the controller)."""
        return self.scorer.name if self.scorer is not None else "dualtower"

    samples: tuple[Sample, ...]
    gold: Mapping[str, Gold]
    scorer: CachedScorer | None

    @classmethod
    def prepare(cls, base: QAEvaluateConfig, cache_dir: str | Path, batch: int = 16, progress: bool = True) -> "SweepData":
        """Load the base evaluation's questions and their scores, scoring them once if no valid cache exists.

        The cache is reused only when its fingerprint (scorer config, input, side, split and
        question ids) matches; otherwise the questions are scored again and the cache replaced.
        """
        samples = load_split_samples(base.input, base.split, (base.side,), base.limit)[base.side]
        if not samples:
            raise ValueError(f"no questions on side {base.side!r} of {base.input}; check `base` input, split and side")
        ids = [s.id for s in samples]
        if len(set(ids)) != len(ids):
            raise DuplicateIdError(ids, str(base.input))
        if base.reasoner == "dualtower":  # the controller answers each point; there are no scores to cache
            return cls(samples=tuple(inference_view(s) for s in samples), gold={s.id: Gold.of(s) for s in samples},
                       scorer=None)
        cache = Path(cache_dir)
        fingerprint = _fingerprint(base, ids)
        meta_path = cache / META_FILE
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        if meta.get("fingerprint") == fingerprint and (cache / SCORES_FILE).is_file():
            with np.load(cache / SCORES_FILE) as npz:
                flat, offsets = npz["scores"], npz["offsets"]
            scores = {i: flat[offsets[k] : offsets[k + 1]] for k, i in enumerate(meta["ids"])}
            paths = {k: [(tuple(p), float(w)) for p, w in v] for k, v in meta["paths"].items()}
            name = meta["scorer"]
        else:
            name, scores, paths = _score_all(base, samples, batch, progress)
            cache.mkdir(parents=True, exist_ok=True)
            offsets = np.cumsum([0] + [len(scores[i]) for i in ids])
            flat = np.concatenate([scores[i] for i in ids]) if ids else np.zeros(0)
            tmp = cache / ("tmp-" + SCORES_FILE)
            np.savez(tmp, scores=flat, offsets=offsets)
            tmp.replace(cache / SCORES_FILE)
            record = {"fingerprint": fingerprint, "scorer": name, "ids": ids,
                      "paths": {k: [[list(p), w] for p, w in v] for k, v in paths.items()}}
            meta_path.write_text(json.dumps(record))
        return cls(
            samples=tuple(inference_view(s) for s in samples),
            gold={s.id: Gold.of(s) for s in samples},
            scorer=CachedScorer(name, scores, paths),
        )


def point_config(base: Mapping[str, Any], overrides: Sequence[str]) -> QAEvaluateConfig:
    """The base evaluation config (a YAML mapping without ``kind``) with ``key=value`` overrides, validated."""
    for item in overrides:
        check_sweep_key(item.partition("=")[0])
    data = apply_overrides(json.loads(json.dumps(base)), overrides)
    return validate_config(data, QAEvaluateConfig, source=f"sweep point {list(overrides)}")


def evaluate_point(base: Mapping[str, Any], overrides: Sequence[str], data: SweepData) -> dict[str, float]:
    """Answer every question of ``data`` with the base config under ``overrides``; the metrics.

    Returns:
        ``hits1``, ``hit``, ``f1`` (macro), ``failed`` (share of questions with a failure),
        ``evidence_lines`` and ``triples`` (means per question: the reading cost),
        ``prompt_tokens`` / ``llm_calls`` per question (0 for the local reader) and ``brain_calls``
        per question (the dual tower's Brain side; 0 otherwise).
    """
    cfg = point_config(base, overrides)
    if cfg.reasoner == "dualtower":
        predictions = asyncio.run(_dualtower_qa(cfg).answer(list(data.samples)))
    else:
        reader = build_reader(cfg.reader)
        predictions = asyncio.run(
            answer_questions(data.samples, data.scorer, reader, top_k=cfg.top_k, chains=cfg.chains,
                             evidence=cfg.evidence, min_score=cfg.min_triple_score)
        )
    scores = [score_prediction(p, data.gold[p.id], cfg.match) for p in predictions]
    overall = summarize(scores, cfg.match).overall
    brain = [p.usage_by_side["brain"].calls if "brain" in p.usage_by_side else 0 for p in predictions]
    return {
        "hits1": overall.hits_at_1,
        "hit": overall.hit,
        "f1": overall.macro_f1,
        "failed": overall.failed / max(1, overall.n),
        "evidence_lines": overall.evidence_lines,
        "triples": overall.triples,
        "prompt_tokens": overall.prompt_tokens,
        "llm_calls": overall.llm_calls,
        "brain_calls": sum(brain) / max(1, len(brain)),
    }


@functools.lru_cache(maxsize=2)
def _planner(path: str):
    """A planner loaded once per process (a Tune worker reused across grid points keeps it)."""
    from rg.retrievers.planner.model import load_planner

    return load_planner(path)


@functools.lru_cache(maxsize=1)
def _encoder():
    from rg.text.encoder import TextEncoder

    return TextEncoder()


def _dualtower_qa(cfg: QAEvaluateConfig):
    from rg.evaluation.dualtower_qa import DualTowerQA, check_brain_view

    dt = cfg.dualtower
    assert dt is not None  # checked by QAEvaluateConfig
    check_brain_view(dt, cfg.schema_dir)  # a trial's privacy mode must match its planner's view
    planner = _planner(dt.brain.planner) if dt.brain.kind == "local" and dt.brain.planner else None
    encoder = _encoder() if dt.needs_encoder else None
    hand = _planner(dt.hand.planner) if dt.hand.resolve_clusters == "planner" and dt.hand.planner else None
    return DualTowerQA(dt, cfg.schema_dir, planner=planner, encoder=encoder, hand_planner=hand)


class SweepQAConfig(Config):
    """A no-training sweep: a grid of evidence and reader settings over one cached retrieval.

    ``python -m tune.sweep --config configs/sweep_qa_synthetic.yaml``
    """

    KIND: ClassVar[str] = "sweep_qa"

    base: str = Field(description="An `evaluate_qa` YAML: its retriever, input and side are scored once.")
    base_set: list[str] = Field(default_factory=list, description="`key=value` overrides applied to `base` first.")
    space: dict[str, list[Any]] = Field(
        description="Swept key → values (the grid is their product); keys as in `--set`, e.g. `evidence.max_length`."
    )
    metric: Literal["hits1", "hit", "f1"] = Field("hits1", description="Maximised; picks the best configuration.")
    cost: Literal["evidence_lines", "triples", "prompt_tokens", "llm_calls", "brain_calls"] = Field(
        "evidence_lines", description="Minimised against `metric` on the Pareto front (per question)."
    )
    name: str = Field(description="Stable run name: rerunning the same name resumes the sweep's unfinished trials.")
    output_dir: str = Field(description="Score cache, Tune experiment, table, plots and the best config.")
    max_concurrent_trials: int = Field(2, ge=1, description="Trials at once (each takes `trial_cpus`).")
    trial_cpus: float = Field(1.0, gt=0, description="CPUs a trial reserves.")
    ray: RayConfig = Field(default_factory=RayConfig)

    @field_validator("space")
    @classmethod
    def _grid(cls, space: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return check_space(space, check_sweep_key)

    def grid(self) -> list[dict[str, Any]]:
        """Every point of the space, in a stable order."""
        return grid_points(self.space)

    def load_base(self, root: str | None = None) -> tuple[dict[str, Any], QAEvaluateConfig]:
        """The base evaluation as a mapping (no ``kind``) and validated; every grid point is checked too.

        Args:
            root: When given, the base's relative paths (input, retriever, encoder cache) are resolved
                against it (:func:`rg.run.storage.paths_root`, the storage root of a submitted job; a
                submitted job always resolves them, so without a root a relative path raises).

        Raises:
            ConfigError: naming the base file, or the first grid point that does not validate.
            StorageRootError: in a submitted job, for a relative path without a storage root.
        """
        data = apply_overrides(read_yaml(self.base), self.base_set)
        if root is not None or submitted_job():
            data = resolve_mapping(data, root)
        kind = data.pop("kind", QAEvaluateConfig.KIND)
        if kind != QAEvaluateConfig.KIND:
            raise ConfigError(f"base {self.base} declares kind {kind!r}. Fix: point `base` at an `evaluate_qa` config")
        base = validate_config(data, QAEvaluateConfig, source=self.base)
        if base.reasoner == "dualtower":
            wrong = [k for k in self.space if not any(k == p or (p.endswith(".") and k.startswith(p))
                                                      for p in DUALTOWER_KEYS)]
            if wrong:
                raise ConfigError(f"space keys {wrong} have no effect with the base's reasoner dualtower. Fix: sweep "
                                  "`dualtower.` keys (w1, w_max, alpha, d_max, brain.beams, ...)")
            if base.memory is not None:
                raise ConfigError("the base sets `memory`, whose state would carry from one grid point to the next. "
                                  "Fix: drop `memory` from the base (base_set: memory=null)")
        elif any(k.startswith("dualtower.") for k in self.space):
            raise ConfigError("space sweeps `dualtower.` keys but the base's reasoner is not dualtower. Fix: "
                              "base_set: [reasoner=dualtower, ...] or drop those keys")
        for point in self.grid():
            point_config(data, overrides_of(point))
        return data, base


def check_space(space: dict[str, list[Any]], check_key: Callable[[str], None]) -> dict[str, list[Any]]:
    """A sweep's space: at least one key, each with values; ``check_key`` raises for a key the sweep may not vary."""
    if not space:
        raise ValueError("the space is empty; name at least one key with a list of values")
    for key, values in space.items():
        check_key(key)
        if not values:
            raise ValueError(f"space key {key!r} has no values; give a non-empty list")
    return space


def grid_points(space: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every point of a grid (the product of the values), in a stable order."""
    keys = list(space)
    return [dict(zip(keys, values)) for values in product(*(space[k] for k in keys))]


def overrides_of(point: Mapping[str, Any]) -> list[str]:
    """A grid point as ``key=value`` overrides (values written as JSON, which YAML reads back)."""
    return [f"{key}={json.dumps(value)}" for key, value in point.items()]


def pareto_front(metric: Sequence[float], cost: Sequence[float]) -> list[int]:
    """Indices of the points no other point beats: at least as good in both, better in one.

    Higher ``metric`` and lower ``cost`` are better; returned by ascending cost.
    """
    points = list(zip(metric, cost))
    front = [
        i for i, (m, c) in enumerate(points)
        if not any(m2 >= m and c2 <= c and (m2 > m or c2 < c) for m2, c2 in points)
    ]
    return sorted(front, key=lambda i: (cost[i], -metric[i]))
