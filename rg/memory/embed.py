"""Text embedders of the memories: the sentence encoder, or feature hashing (no model).

Both return unit-length float32 rows, so an inner product is a cosine. ``encoder`` wraps
:class:`rg.text.encoder.TextEncoder` (all-MiniLM-L6-v2, 384 dimensions); ``hashing`` maps word
unigrams and bigrams to signed buckets (the hashing trick) — lexical, deterministic and fast,
for tests, benchmarks at scale and machines without the model.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np

EmbedderKind = Literal["encoder", "hashing"]
WORD = re.compile(r"[\w^-]+")


class Embedder(Protocol):
    """Unit-length embeddings. Shapes: texts N strings -> (N, dim) float32."""

    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / np.maximum(norms, 1e-12)).astype(np.float32)


class HashingEmbedder:
    """Signed feature hashing of lower-cased word unigrams and bigrams.

    Args:
        dim: Buckets (the vector size).
    """

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dim, 1.0 if (value >> 63) & 1 else -1.0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)  # (N, dim)
        for row, text in enumerate(texts):
            words = WORD.findall(text.lower())
            for feature in words + [f"{a} {b}" for a, b in zip(words, words[1:])]:
                index, sign = self._bucket(feature)
                out[row, index] += sign
        return _unit(out)


class EncoderEmbedder:
    """The project's sentence encoder (:class:`rg.text.encoder.TextEncoder`)."""

    def __init__(self, encoder) -> None:  # rg.text.encoder.TextEncoder (imported lazily: it loads torch)
        self.encoder = encoder
        self.dim = int(encoder.dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _unit(np.asarray(self.encoder.encode(list(texts)), dtype=np.float32))


def make_embedder(kind: EmbedderKind, dim: int = 256, encoder=None) -> Embedder:
    """The embedder ``kind`` names (``encoder`` loads the default model unless one is given)."""
    if kind == "hashing":
        return HashingEmbedder(dim)
    if encoder is None:
        from rg.text.encoder import TextEncoder
        encoder = TextEncoder()
    return EncoderEmbedder(encoder)
