"""A trained retriever (MLP-DDE, PNA) as a :class:`~rg.evaluation.scorers.TripleScorer`."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from rg.data.sample import Sample
from rg.retrievers.graphs import collate
from rg.retrievers.registry import load_retriever
from rg.text.encoder import TextEncoder
from rg.retrievers.inputs import build_tables, question_graph


class RetrieverScorer:
    """Scores every triple of a question with a retriever checkpoint.

    Args:
        directory: A folder written by ``Retriever.save`` (e.g. ``jobs.train``'s export).
        encoder: The text encoder the retriever was trained with.
        batch_questions: Questions per forward pass.

    Raises:
        ValueError: when the encoder differs from the one recorded in the checkpoint.
    """

    def __init__(self, directory: str | Path, encoder: TextEncoder, batch_questions: int = 16) -> None:
        loaded = load_retriever(directory)
        self.model, self.meta = loaded.model, loaded.meta
        if self.meta.encoder_model_id and self.meta.encoder_model_id != encoder.model_id:
            raise ValueError(
                f"retriever {directory} was trained with encoder {self.meta.encoder_model_id!r}, not "
                f"{encoder.model_id!r}. Fix: set `encoder.model` to the training encoder"
            )
        self.encoder = encoder
        self.batch_questions = batch_questions
        self.name = f"{self.meta.kind}:{self.meta.label_source or 'unknown'}"

    @torch.no_grad()
    def score(self, samples: Sequence[Sample]) -> list[np.ndarray]:
        tables, index = build_tables(samples, self.encoder)
        scores: list[np.ndarray] = []
        for start in range(0, len(samples), self.batch_questions):
            chunk = samples[start : start + self.batch_questions]
            graphs = [question_graph(s, index) for s in chunk]
            batch = collate(graphs)
            logits = self.model(batch, tables).float().numpy()
            ptr = batch.triple_ptr.tolist()
            scores.extend(logits[ptr[i] : ptr[i + 1]] for i in range(len(chunk)))
        return scores
