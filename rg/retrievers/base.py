"""What every triple-scoring retriever shares: scoring, loss, top-K retrieval and checkpoints.

A retriever scores every triple of every question in a :class:`GraphBatch` with one logit
(``forward``), is trained with binary cross-entropy on the triple labels (``loss``), and returns
each question's top-K triples (``retrieve``). The MLP-DDE triple retriever and the PNA entity
retriever (whose triple score is ``p(h) + p(t)``) both fit this shape, so the training loop,
evaluation and the evidence stage do not care which one they hold.

A checkpoint is a folder::

    model.pt      the state dict (``torch.save``; loaded with ``weights_only=True``)
    config.json   the model config (its ``kind`` says which class to build)
    meta.json     format version, kind, label source, encoder model id, prompt ids, extras
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple, TypeVar

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from rg.config import Config
from rg.retrievers.graphs import EmbeddingTables, GraphBatch, QuestionGraph
from rg.data.labels import LabelSource

CHECKPOINT_FORMAT = 1
WEIGHTS_FILE = "model.pt"
CONFIG_FILE = "config.json"
META_FILE = "meta.json"

R = TypeVar("R", bound="Retriever")


class RetrieverConfig(Config):
    """Fields every retriever config has; each kind's config derives from this one."""

    kind: str = Field(description="Registry name of the retriever kind (fixed per config class).")
    text_dim: int = Field(384, gt=0, description="Width D of the text embeddings (384 for the default MiniLM).")
    pos_weight: float | None = Field(
        None,
        gt=0,
        description=(
            "Weight of positive triples in the BCE loss (torch's pos_weight); None weighs both "
            "classes equally. Positives are rare (often < 1%), so values like 10-50 speed up learning."
        ),
    )
    loss_average: Literal["triple", "question"] = Field(
        "triple",
        description=(
            "'triple': BCE averaged over all triples of the batch (SubgraphRAG), so a question's weight grows with "
            "its subgraph (a 5,000-triple 3-hop graph outweighs hundreds of 1-hop ones); 'question': averaged "
            "within each question first, then over questions."
        ),
    )


class CheckpointMeta(Config):
    """What a checkpoint was trained from, saved beside its weights.

    ``kind`` is filled in by :meth:`Retriever.save`; the rest is given by the caller.
    """

    kind: str | None = Field(None, description="Retriever kind; set by save().")
    label_source: LabelSource | None = Field(None, description="Supervision used: 'weak' or 'refined'.")
    encoder_model_id: str | None = Field(
        None, description="TextEncoder.model_id of the embeddings the model was trained on."
    )
    prompt_ids: tuple[str, ...] = Field((), description="Ids of the prompt templates behind the labels.")
    extra: dict[str, Any] = Field(default_factory=dict, description="Any further JSON-ready facts.")


class Ranked(NamedTuple):
    """One question's retrieved triples, best first.

    Attributes:
        indices: ``(K,)`` triple indices into the question's ``sample.triples``.
        scores: ``(K,)`` their logits.
    """

    indices: torch.Tensor
    scores: torch.Tensor


def triple_bce(
    logits: torch.Tensor,
    labels: torch.Tensor,
    pos_weight: float | None = None,
    group: torch.Tensor | None = None,
    num_groups: int | None = None,
) -> torch.Tensor:
    """Binary cross-entropy with logits, averaged over all items, or per group then over groups.

    Args:
        logits: Item scores (triples, or entities for PNA's entity loss).
        labels: 0/1 targets.
        pos_weight: Optional weight of the positive class.
        group: The question of each item; None averages over all items.
        num_groups: Number of questions (required with ``group``); a question without items
            does not count.

    Shapes:
        logits, labels, group: (T,) -> ()
    """
    weight = None if pos_weight is None else torch.tensor(pos_weight, dtype=logits.dtype, device=logits.device)
    if group is None:
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), pos_weight=weight)
    if num_groups is None:
        raise ValueError("triple_bce: pass num_groups with group")
    each = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), pos_weight=weight, reduction="none")
    sums = torch.zeros(num_groups, dtype=each.dtype, device=each.device).index_add_(0, group, each)
    counts = torch.bincount(group, minlength=num_groups).to(each.dtype)
    present = counts > 0
    return (sums[present] / counts[present]).mean()


def rank_triples(logits: torch.Tensor, triple_ptr: torch.Tensor, k: int) -> list[Ranked]:
    """Each question's top-``k`` triples by logit (ties keep the lower triple index first).

    Args:
        logits: Scores of all triples of a batch.
        triple_ptr: Triple offsets; question ``b`` owns ``triple_ptr[b]:triple_ptr[b + 1]``.
        k: How many to keep per question (fewer when the question has fewer triples).

    Returns:
        One :class:`Ranked` per question with indices local to the question.

    Shapes:
        logits: (T_total,); triple_ptr: (B + 1,) -> B x ((K_b,), (K_b,))
    """
    if k <= 0:
        raise ValueError(f"k must be a positive integer, got {k}")
    ptr = triple_ptr.tolist()
    ranked = []
    for start, end in zip(ptr[:-1], ptr[1:]):
        scores, order = torch.sort(logits[start:end], descending=True, stable=True)
        ranked.append(Ranked(indices=order[:k], scores=scores[:k]))
    return ranked


class Retriever(nn.Module, ABC):
    """Base of the triple-scoring retrievers (one subclass per registered kind).

    Subclasses set ``kind`` and ``config_class`` and implement :meth:`forward`.

    Args:
        config: The model config (an instance of ``config_class``).
    """

    kind: ClassVar[str]
    config_class: ClassVar[type[RetrieverConfig]]

    def __init__(self, config: RetrieverConfig) -> None:
        super().__init__()
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}"
            )
        self.config = config

    @classmethod
    def prepare_config(cls, config: RetrieverConfig, graphs: Iterable[QuestionGraph]) -> RetrieverConfig:
        """The config completed with statistics of the training graphs (default: unchanged).

        PNA overrides this to fill in its in-degree histogram.
        """
        return config

    @abstractmethod
    def forward(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        """One logit per triple of the batch.

        Shapes:
            batch: B questions, T_total triples -> (T_total,)
        """

    def loss(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        """BCE over the triples of the batch (SubgraphRAG's objective), averaged as ``loss_average`` says.

        Raises:
            ValueError: if the batch has no labels.
        """
        if batch.labels is None:
            raise ValueError("loss() needs a labelled batch; build the QuestionGraphs with labels")
        group = batch.triple_graph if self.config.loss_average == "question" else None
        return triple_bce(self(batch, tables), batch.labels, self.config.pos_weight, group, batch.num_graphs)

    @torch.no_grad()
    def retrieve(self, batch: GraphBatch, tables: EmbeddingTables, k: int) -> list[Ranked]:
        """The top-``k`` triples of each question, best first (call ``eval()`` first).

        Shapes:
            batch: B questions -> B x ((K_b,), (K_b,)) with K_b = min(k, T_b)
        """
        return rank_triples(self(batch, tables), batch.triple_ptr, k)

    def save(self, directory: str | Path, meta: CheckpointMeta | None = None) -> Path:
        """Write weights, config and metadata into ``directory`` (created if missing).

        Args:
            directory: The checkpoint folder.
            meta: What the model was trained from; its ``kind`` is set to this model's.

        Returns:
            The folder.
        """
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        meta = (meta or CheckpointMeta()).model_copy(update={"kind": self.kind})
        torch.save(self.state_dict(), folder / WEIGHTS_FILE)
        (folder / CONFIG_FILE).write_text(self.config.model_dump_json(indent=2) + "\n")
        record = {"format": CHECKPOINT_FORMAT, **meta.model_dump(mode="json")}
        (folder / META_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        return folder

    @classmethod
    def load(cls: type[R], directory: str | Path, map_location: str | torch.device = "cpu") -> R:
        """Rebuild a model of this class from a checkpoint folder written by :meth:`save`.

        Raises:
            ValueError: if the folder holds another kind or an unknown format.
            FileNotFoundError: if a checkpoint file is missing.
        """
        folder = Path(directory)
        meta = read_meta(folder)
        if meta.kind != cls.kind:
            raise ValueError(
                f"checkpoint {folder} holds a {meta.kind!r} retriever, not {cls.kind!r}. "
                "Fix: load it with rg.retrievers.load_retriever, which picks the class by kind"
            )
        config = cls.config_class.model_validate_json((folder / CONFIG_FILE).read_text())
        model = cls(config)
        state = torch.load(folder / WEIGHTS_FILE, map_location=map_location, weights_only=True)
        model.load_state_dict(state)
        return model


def read_meta(directory: str | Path) -> CheckpointMeta:
    """The metadata of a checkpoint folder.

    Raises:
        FileNotFoundError: if ``meta.json`` is missing.
        ValueError: if its format is not :data:`CHECKPOINT_FORMAT`.
    """
    path = Path(directory) / META_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {directory} is not a retriever checkpoint folder")
    record = json.loads(path.read_text())
    found = record.pop("format", None)
    if found != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: checkpoint format {found!r} is not the supported {CHECKPOINT_FORMAT}")
    return CheckpointMeta.model_validate(record)
