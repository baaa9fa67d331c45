"""How many hops a question needs, predicted from the training questions that read like it.

The Hand cuts the subgraph it reads to this depth around the topics. A store's subgraph is cut at
``d_max`` hops, much wider than the subgraphs the Hand's retriever and reader learnt on, and the
Brain's paths are not a reliable depth (a verified path of the wrong length is still verified).
Questions of one depth share their wording far more than their names, so the predictor reads the
name-free template (each topic mention written ``TE_i``) and takes the depth most of its ``k``
nearest training templates have (cosine over sentence embeddings; ties go to the nearest one's).

The training depths come from the dataset (``Sample.hops``: the MetaQA file a question is in, the
synthetic generator's template), on the training side only; inference reads only the question.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rg.text.encoder import TextEncoder

FOLDER = "hops"
"""Where a reader folder keeps its depth predictor (``<reader>/hops``)."""

_VECTORS, _META = "vectors.npy", "hops.json"


def _unit(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)


@dataclass(frozen=True)
class HopPredictor:
    """k-nearest-neighbour depth of a question template (module docstring).

    Attributes:
        vectors: Unit embeddings of the training templates, ``(N, D)``.
        hops: Their depths, ``(N,)``.
        k: Neighbours that vote.
        encoder_id: The encoder the vectors come from (:attr:`TextEncoder.model_id`).
    """

    vectors: np.ndarray
    hops: np.ndarray
    k: int
    encoder_id: str

    @classmethod
    def fit(cls, templates: Sequence[str], hops: Sequence[int], encoder: TextEncoder, k: int = 5) -> HopPredictor:
        """The predictor of the training ``templates`` and their ``hops``.

        Raises:
            ValueError: without templates, with a length mismatch or a depth below 1, or ``k < 1``.
        """
        if not templates:
            raise ValueError("no training questions with a known depth (Sample.hops) to fit the depth predictor on")
        if len(templates) != len(hops):
            raise ValueError(f"{len(templates)} templates for {len(hops)} depths")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        depths = np.asarray(hops, dtype=np.int64)
        if depths.min() < 1:
            raise ValueError(f"depths must be >= 1, got {int(depths.min())}")
        return cls(_unit(encoder.encode(list(templates))), depths, k, encoder.model_id)

    def predict(self, templates: Sequence[str], encoder: TextEncoder) -> list[int]:
        """The depth of each template.

        Raises:
            ValueError: when ``encoder`` is not the one the predictor was fitted with.
        """
        if encoder.model_id != self.encoder_id:
            raise ValueError(f"the depth predictor was fitted with encoder {self.encoder_id!r}, not {encoder.model_id!r}; "
                             "give the Hand the encoder the read stage used (the reader folder's hops/hops.json)")
        if not templates:
            return []
        similarity = _unit(encoder.encode(list(templates))) @ self.vectors.T  # (Q, N)
        k = min(self.k, len(self.hops))
        nearest = np.argsort(-similarity, axis=1, kind="stable")[:, :k]  # (Q, k), nearest first
        out = []
        for row in nearest:
            votes = np.bincount(self.hops[row])
            best = np.flatnonzero(votes == votes.max())
            out.append(int(next(h for h in self.hops[row] if h in best)))  # a tie: the nearest tied depth
        return out

    def save(self, folder: str | Path) -> Path:
        """Write ``vectors.npy`` and ``hops.json`` into ``folder``; returns it."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / _VECTORS, self.vectors)
        meta = {"hops": self.hops.tolist(), "k": self.k, "encoder": self.encoder_id}
        (folder / _META).write_text(json.dumps(meta) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> HopPredictor:
        """Read a folder :meth:`save` wrote.

        Raises:
            ValueError: when its files disagree on the number of questions.
        """
        folder = Path(folder)
        meta = json.loads((folder / _META).read_text())
        vectors = np.load(folder / _VECTORS)
        hops = np.asarray(meta["hops"], dtype=np.int64)
        if len(vectors) != len(hops):
            raise ValueError(f"{folder}: {len(vectors)} vectors for {len(hops)} depths; rerun the read stage")
        return cls(vectors, hops, int(meta["k"]), str(meta["encoder"]))

    @staticmethod
    def exists(folder: str | Path) -> bool:
        """Whether ``folder`` holds a saved predictor."""
        return (Path(folder) / _META).is_file()
