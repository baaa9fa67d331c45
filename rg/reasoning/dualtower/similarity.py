"""DRM: dense similarity between a candidate path and an indicator (PrivGemo §4.3.2).

PrivGemo scores anonymised paths against the skyline indicator with a dense retrieval model
(DRM). :class:`EncoderSimilarity` is that: the cosine of the sentence encoder's embeddings
(:class:`rg.text.TextEncoder`, the offline MiniLM by default). :class:`LexicalSimilarity` is a
model-free alternative named for what it is — the Dice overlap of the texts' words (relation
labels split at ``.``/``_``) — for machines without the encoder and for tests of the search itself.
:class:`HybridSimilarity` is the mean of the two: in ``privacy`` mode the view's relation labels are
opaque cluster ids (``rel_03 (type_05→type_04)``), which the encoder embeds almost alike, while their
words (``03``, ``04``) still tell them apart.
Both run on the Hand; neither sees anything the anonymised view does not hold.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from rg.text.encoder import TextEncoder

_WORD = re.compile(r"[a-z0-9]+")
_TAG = re.compile(r"\bte_\d+\b")
IGNORED = frozenset({"te", "answer", "ent", "x", "x1", "x2", "x3", "the", "of"})


@runtime_checkable
class Similarity(Protocol):
    """``score(texts, reference)``: similarity of each text to the reference, in [−1, 1]."""

    name: str

    def score(self, texts: Sequence[str], reference: str) -> np.ndarray:
        """Shapes: texts N strings -> (N,)."""
        ...


class EncoderSimilarity:
    """Cosine similarity of sentence-encoder embeddings (PrivGemo's DRM)."""

    def __init__(self, encoder: TextEncoder) -> None:
        self.encoder = encoder
        self.name = f"drm:{encoder.config.model}"

    def score(self, texts: Sequence[str], reference: str) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        vectors = self.encoder.encode([reference, *texts])  # (1 + N, D), unit rows
        return vectors[1:] @ vectors[0]  # (N,)


def words(text: str) -> frozenset[str]:
    """Lower-case words of ``text`` (labels split at punctuation), minus topic tags and placeholders."""
    return frozenset(w for w in _WORD.findall(_TAG.sub(" ", text.lower())) if w not in IGNORED)


class LexicalSimilarity:
    """Dice overlap of the words of each text and the reference (no model)."""

    name = "lexical"

    def score(self, texts: Sequence[str], reference: str) -> np.ndarray:
        ref = words(reference)
        out = np.zeros(len(texts), dtype=np.float32)
        for i, text in enumerate(texts):
            mine = words(text)
            if mine or ref:
                out[i] = 2 * len(mine & ref) / (len(mine) + len(ref))
        return out


class HybridSimilarity:
    """The mean of :class:`EncoderSimilarity` and :class:`LexicalSimilarity` (module docstring)."""

    def __init__(self, encoder: TextEncoder) -> None:
        self.dense = EncoderSimilarity(encoder)
        self.lexical = LexicalSimilarity()
        self.name = f"hybrid:{encoder.config.model}"

    def score(self, texts: Sequence[str], reference: str) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        return (self.dense.score(texts, reference) + self.lexical.score(texts, reference)) / 2
