"""Shared test data: synthetic questions cut into subgraph samples and written as RoG parquet, and a model-free
text encoder.

Not a test module: imported as ``tests.synthetic_data`` by the tests and by ``tests/conftest.py``. Every call
with the same arguments gives the same samples (the generator and the subgraph cut are deterministic).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from rg.data.rog import write_rog_parquet
from rg.data.sample import Sample
from rg.data.subgraphs import SubgraphConfig, buildable_samples
from rg.data.synthetic import SyntheticConfig, SyntheticKG, generate
from rg.graph import KnowledgeGraph


@dataclass(frozen=True)
class SyntheticSamples:
    """The generated KG and questions, and the samples of the questions whose subgraph could be cut."""

    data: SyntheticKG
    samples: list[Sample]


def synthetic_subgraphs(
    questions: int, max_triples: int | None, seed: int = 0, *, gold_paths: bool = True
) -> SyntheticSamples:
    """Generate ``questions`` synthetic questions with ``seed`` and cut each one's subgraph.

    Args:
        questions: Number of questions to generate.
        max_triples: The subgraph cap (``SubgraphConfig.max_triples``); None keeps every triple reached.
        seed: The generator's seed.
        gold_paths: False drops the gold relation paths, as in datasets without them (MetaQA).

    Returns:
        The data and the samples in question order; questions whose subgraph cannot be cut
        (:class:`~rg.data.subgraphs.Unbuildable`) are left out.
    """
    data = generate(SyntheticConfig(questions=questions, seed=seed))
    kg = KnowledgeGraph.from_triples(data.triples)
    samples = buildable_samples(kg, data.questions, SubgraphConfig(max_triples=max_triples))
    if not gold_paths:
        samples = [replace(s, relation_paths=()) for s in samples]
    return SyntheticSamples(data, samples)


def write_parts(samples: Sequence[Sample], paths: Sequence[Path]) -> None:
    """Write ``samples`` in order as RoG parquet, split into ``len(paths)`` consecutive near-equal parts
    (part ``i`` holds ``samples[i * n // parts : (i + 1) * n // parts]``)."""
    n, parts = len(samples), len(paths)
    for i, path in enumerate(paths):
        write_rog_parquet(samples[i * n // parts : (i + 1) * n // parts], path)


def write_synthetic_parquet(
    paths: Path | Sequence[Path], questions: int, max_triples: int | None, seed: int = 0, *, gold_paths: bool = True
) -> SyntheticSamples:
    """:func:`synthetic_subgraphs`, written to one RoG parquet file or split over several (:func:`write_parts`).

    Returns:
        What was written, with the generated data (for tests that also need the KB or the schema).
    """
    made = synthetic_subgraphs(questions, max_triples, seed, gold_paths=gold_paths)
    write_parts(made.samples, [paths] if isinstance(paths, Path) else paths)
    return made


class HashEncoder:
    """A stand-in for ``TextEncoder``: a fixed pseudo-random vector per text (no model); records its calls.

    Args:
        dim: Vector width.
        model_id: The id checkpoints and tables record.
    """

    def __init__(self, dim: int = 8, model_id: str = "hash-encoder-test") -> None:
        self.dim = dim
        self.model_id = model_id
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One vector per text, seeded by the text's SHA-256.

        Shapes:
            texts: N strings -> (N, dim) float32
        """
        self.calls.append(list(texts))
        rows = [
            np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")).normal(size=self.dim)
            for t in texts
        ]
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim)
