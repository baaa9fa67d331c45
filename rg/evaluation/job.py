"""``python -m jobs.evaluate`` (retrieval mode): rank triples with retrievers and baselines and
measure triple and answer recall@K against weak, refined and reference labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from rg.config import Config
from rg.data.paths import resolve_data_path
from rg.data.rog import read_rog
from rg.evaluation.references import labels_reference, weak_reference, webqsp_gpt4o_reference
from rg.evaluation.report import ReportFiles, write_results
from rg.evaluation.retrieval import DEFAULT_KS, evaluate_retrieval
from rg.evaluation.retriever_scorer import RetrieverScorer
from rg.evaluation.scorers import CosineScorer, HopDistanceScorer, TripleScorer
from rg.text.encoder import EncoderConfig, TextEncoder
from rg.training.data import split_ids


class MethodConfig(Config):
    """One ranking method: a trained retriever checkpoint or an untrained baseline."""

    kind: Literal["retriever", "cosine", "hop_distance"]
    path: str | None = Field(None, description="Checkpoint folder (kind `retriever` only).")

    @model_validator(mode="after")
    def _path_for_retrievers(self) -> "MethodConfig":
        if (self.kind == "retriever") != (self.path is not None):
            raise ValueError("`path` is required for kind `retriever` and only for it")
        return self


class EvaluateConfig(Config):
    """Retrieval evaluation of several methods on one set of questions."""

    KIND: ClassVar[str] = "evaluate"

    input: str = Field(description="RoG parquet/jsonl(.gz) file or folder of shards; `@shared/...` allowed.")
    limit: int | None = Field(None, ge=1, description="Only the first N questions.")
    split: Literal["all", "train", "val"] = Field(
        "all", description="Questions to score: `val` is the held-out side of jobs.train's seeded split."
    )
    val_fraction: float = Field(0.2, gt=0, lt=1, description="As in the training config (split `train`/`val`).")
    split_seed: int = Field(0, description="As in the training config (split `train`/`val`).")
    output_dir: str = Field(description="Where retrieval.json / .md / .png go.")
    methods: list[MethodConfig] = Field(min_length=1)
    weak_reference: bool = Field(True, description="Score against weak shortest-path labels.")
    labels: dict[str, str] = Field(default_factory=dict, description="Reference name → labels parquet folder.")
    gpt4o_labels: str | None = Field(None, description="WebQSP GPT-4o evidence labels (jsonl.gz).")
    ks: tuple[int, ...] = DEFAULT_KS
    encoder: EncoderConfig = Field(default_factory=EncoderConfig)


def build_scorer(method: MethodConfig, encoder: TextEncoder) -> TripleScorer:
    if method.kind == "retriever":
        assert method.path is not None  # checked by the config validator
        return RetrieverScorer(method.path, encoder)
    if method.kind == "cosine":
        return CosineScorer(encoder)
    return HopDistanceScorer()


def evaluate(cfg: EvaluateConfig) -> tuple[list[dict[str, Any]], ReportFiles]:
    """Evaluate every method; write and return the results."""
    samples = list(read_rog(resolve_data_path(cfg.input)))[: cfg.limit]
    if cfg.split != "all":
        train_ids, val_ids = split_ids([s.id for s in samples], cfg.val_fraction, cfg.split_seed)
        keep = val_ids if cfg.split == "val" else train_ids
        samples = [s for s in samples if s.id in keep]
    references: dict[str, dict[str, tuple[int, ...]]] = {}
    if cfg.weak_reference:
        references["weak"] = weak_reference(samples)
    for name, path in cfg.labels.items():
        references[name] = labels_reference(resolve_data_path(path))
    if cfg.gpt4o_labels:
        references["gpt4o"] = webqsp_gpt4o_reference(resolve_data_path(cfg.gpt4o_labels))
    encoder = TextEncoder(cfg.encoder)
    results = [evaluate_retrieval(samples, build_scorer(m, encoder), references, cfg.ks) for m in cfg.methods]
    files = write_results(results, Path(cfg.output_dir), title=f"{Path(cfg.input).name} ({cfg.split}): {len(samples)} questions")
    return [r.to_dict() for r in results], files
