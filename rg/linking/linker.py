"""Topic entities of a raw question: n-gram mention candidates, exact/alias matching, dense alignment.

PrivGemo (topic entity recognition, then DRM alignment of each mention to KG entities by
embedding similarity) with the LLM's mention extraction replaced by a local algorithm:

1. The question is normalised (:func:`rg.privacy.normalise.normalise_with_map`) and every word
   n-gram up to ``max_ngram`` words is looked up in the name index. N-grams made only of
   function words (:data:`STOPWORDS`) count only when they match a name exactly with a capital
   letter (a film called *It*). Spans matched ``exact`` or ``cased`` win over the others, then
   longer spans win; among one span's candidates the best match tier wins: ``exact`` (the stored
   name written verbatim there, trailing punctuation included, the longest such name; 1.0) >
   ``cased`` (the same words in the same case; 0.97) > ``normalised`` (0.95) > ``alias`` (0.9).
   With ``case_hint``, when some matched span is written with a capital letter or a digit (the
   question's first letter counts only for an exact name that is not a function word),
   all-lowercase spans are dropped: in a cased question they are template words (*film*,
   *director*) that happen to be tag names, not the named entity. With ``prefer_multiword``,
   when some matched span has several words, lowercase one-word spans are dropped too
   (*president* in "what did james k polk do before he was president"). The spans either hint set
   aside are returned apart (``set_aside``), never as topics: a reader may use them to narrow its
   answers (*drama* in "which drama films did greta halvorsen write", typed in lower case).
2. Dense alignment (``dense: fallback`` when step 1 found nothing, ``remaining`` on the words
   step 1 left): n-grams that neither start nor end with a function word are embedded and
   searched in FAISS; the best non-overlapping (n-gram, name) pairs with cosine ≥ ``threshold``
   become mentions scored by their cosine.
3. A mention whose best tier holds several KG nodes is *ambiguous*: it is returned with the
   whole candidate set and the question fails as ``ambiguous`` (``on_ambiguous: fail``) or takes
   them all (``all``); nothing is picked silently. No mention at all fails as ``not_found``.

The linker sees the question text only; gold answers and dataset topic entities never reach it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Sequence

import numpy as np

from rg.linking.config import LinkingConfig
from rg.linking.index import NameIndex
from rg.linking.names import NamedEntity
from rg.privacy.normalise import normalise_with_map
from rg.text.encoder import EncoderLoadError, TextEncoder, default_model_path

Match = Literal["exact", "cased", "normalised", "alias", "dense"]
Failure = Literal["ambiguous", "not_found"]
TIER_SCORE: dict[str, float] = {"exact": 1.0, "cased": 0.97, "normalised": 0.95, "alias": 0.9}
TIERS = ("exact", "cased", "normalised", "alias")
_WORDS = re.compile(r"\w+")

STOPWORDS = frozenset(
    "a an the of in on at to for from by with about as into onto over under and or but nor not no is are was were "
    "be been being am do does did done has have had having what which who whom whose when where why how that this "
    "these those it its it s he she they them their his her him i me my we us our you your there here than then "
    "also too very can could will would shall should may might must one ones s".split()
)
"""Function words: a mention made only of these needs an exact, capitalised name match."""


@dataclass(frozen=True)
class Candidate:
    """A KG entity a mention may refer to.

    Attributes:
        entity_id: Its id in the store.
        name: The matched name.
        score: 1.0 / 0.95 / 0.9 for exact / normalised / alias, the cosine for dense.
        match: How it matched.
    """

    entity_id: str
    name: str
    score: float
    match: Match


@dataclass(frozen=True)
class Mention:
    """A span of the question linked to one or more candidates.

    Attributes:
        text: The span as written in the question.
        start: First word (index into the normalised question's words).
        end: One past the last word.
        candidates: The best tier's candidates (more than one entity: ambiguous).
        ambiguous: True when the candidates are several KG nodes.
    """

    text: str
    start: int
    end: int
    candidates: tuple[Candidate, ...]
    ambiguous: bool

    @property
    def score(self) -> float:
        return max(c.score for c in self.candidates)


@dataclass(frozen=True)
class LinkResult:
    """The topic entities of one question.

    Attributes:
        question: The raw question.
        entities: Topic entity ids in mention order (each once); empty on failure.
        mentions: Every mention found, ambiguous ones included.
        failure: None, ``ambiguous`` or ``not_found``.
        detail: A readable reason when it failed.
        set_aside: Lower-case spans that name entities but that ``case_hint`` or ``prefer_multiword`` kept
            from the topics (template words such as *film*, or a genre typed in lower case), none
            overlapping a mention; not topics.
    """

    question: str
    entities: tuple[str, ...]
    mentions: tuple[Mention, ...] = field(default=())
    failure: Failure | None = None
    detail: str = ""
    set_aside: tuple[Mention, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Span:
    start: int
    end: int
    text: str
    key: str


class EntityLinker:
    """Link raw questions to KG entities through a :class:`NameIndex`.

    Args:
        index: The KG's name index.
        config: Thresholds and modes.
        encoder: Embeds mention n-grams for dense alignment; by default an encoder of
            ``config.encoder`` without its cache (question text is not written to disk), loaded
            on first use.

    Raises:
        ValueError: when ``encoder``'s model is not the one that embedded the index.
    """

    def __init__(self, index: NameIndex, config: LinkingConfig, encoder: TextEncoder | None = None) -> None:
        self.index = index
        self.config = config
        self._encoder = encoder
        self._common = common_words() if config.vocabulary_hint else frozenset()
        if config.dense != "off" and index.faiss_index is None:
            raise ValueError("the name index is exact-only (built with `dense: off`), but linking.dense is "
                             f"{config.dense!r}. Fix: set `linking.dense: off` or rebuild the index with an encoder")
        if encoder is not None:
            self._check_encoder(encoder)

    def _check_encoder(self, encoder: TextEncoder) -> None:
        if encoder.model_id != self.index.encoder_id:
            raise ValueError(f"the name index was embedded with {self.index.encoder_id}, the linker's encoder "
                             f"is {encoder.model_id}. Fix: set `linking.encoder` to the index's model or "
                             "rebuild the index")

    @property
    def encoder(self) -> TextEncoder:
        if self._encoder is None:
            self._encoder = TextEncoder(self.config.encoder.model_copy(update={"cache_dir": None}))
            self._check_encoder(self._encoder)
        return self._encoder

    def learn(self, names: Sequence[NamedEntity]) -> int:
        """Add names to the index in place (entities a KG edit added); returns the entries added."""
        return self.index.add(names, self.encoder if self.index.faiss_index is not None else None)

    def link(self, question: str) -> LinkResult:
        """Topic entities of one question (see the module docstring)."""
        return self.link_many([question])[0]

    def link_many(self, questions: Sequence[str]) -> list[LinkResult]:
        """Topic entities of each question; the dense n-grams of all of them are embedded in one call."""
        words = [_words(q) for q in questions]
        exact, aside = zip(*(self._exact(q, w) for q, w in zip(questions, words))) if questions else ((), ())
        dense_spans: list[list[_Span]] = []
        for question, parsed, mentions in zip(questions, words, exact):
            wanted = self.config.dense == "remaining" or (self.config.dense == "fallback" and not mentions)
            dense_spans.append(self._dense_spans(question, parsed, mentions) if wanted else [])
        flat = [s for spans in dense_spans for s in spans]
        hits = self._search([s.key for s in flat]) if flat else []
        results, at = [], 0
        for question, mentions, spans, kept_aside in zip(questions, exact, dense_spans, aside):
            found = self._dense(spans, hits[at:at + len(spans)], mentions)
            at += len(spans)
            taken = {i for m in found for i in range(m.start, m.end)}
            set_aside = tuple(m for m in kept_aside if taken.isdisjoint(range(m.start, m.end)))
            result = self._result(question, sorted([*mentions, *found], key=lambda m: m.start))
            results.append(dataclasses.replace(result, set_aside=set_aside) if result.entities else result)
        return results

    def named_spans(self, question: str) -> dict[str, tuple[str, ...]]:
        """Every entity some span of ``question`` names exactly, by name or alias in any case and spacing, with
        the spans as written: overlapping and lower-case spans included, spans of function words only left
        out. Not topic linking (no tier, case or overlap rule picks among them): what the privacy session
        must mask, because each of them names an entity of the KG."""
        tokens, spans = _words(question)
        found: dict[str, tuple[str, ...]] = {}
        for n in range(min(self.config.max_ngram, len(tokens)), 0, -1):
            for i in range(len(tokens) - n + 1):
                rows = self.index.by_key.get(" ".join(tokens[i:i + n]))
                if rows is None or all(t in STOPWORDS for t in tokens[i:i + n]):
                    continue
                surface = question[spans[i][0]:spans[i + n - 1][1]]
                for row in rows:
                    entity = self.index.entries[row].entity_id
                    found[entity] = tuple(dict.fromkeys((*found.get(entity, ()), surface)))
        return found

    # ------------------------------------------------------------------ exact and alias
    def _exact(self, question: str, parsed: tuple[list[str], list[tuple[int, int]]]
               ) -> tuple[list[Mention], list[Mention]]:
        """The mentions, and the spans the case and multi-word hints set aside (none overlapping a mention)."""
        tokens, spans = parsed
        found: list[tuple[tuple, Mention]] = []
        uncased = not any(c.isupper() for c in question)  # typed in lower case: rare words stand in for capitals
        for n in range(min(self.config.max_ngram, len(tokens)), 0, -1):
            for i in range(len(tokens) - n + 1):
                key = " ".join(tokens[i:i + n])
                rows = self.index.by_key.get(key)
                if rows is None:
                    continue
                surface = question[spans[i][0]:spans[i + n - 1][1]]
                mention = self._exact_mention(question, spans[i][0], surface, i, i + n, rows)
                if all(t in STOPWORDS for t in tokens[i:i + n]):
                    if mention.candidates[0].match not in ("exact", "cased") or surface.islower():
                        continue
                rank = TIERS.index(mention.candidates[0].match)
                cased = any(c.isupper() or c.isdigit() for c in (surface[1:] if spans[i][0] == 0 else surface)) or (
                    spans[i][0] == 0 and rank < 2 and surface[:1].isupper() and tokens[i] not in STOPWORDS) or (
                    uncased and self._rare(tokens[i:i + n]))
                found.append(((rank > 1, -n, rank, i), cased, mention))
        every = found
        if self.config.case_hint and any(cased for _, cased, _ in found):
            found = [f for f in found if f[1]]
        if self.config.prefer_multiword and any(m.end - m.start > 1 for _, _, m in found):
            found = [f for f in found if f[2].end - f[2].start > 1 or f[1]]
        kept = _non_overlapping(m for _, _, m in sorted(found, key=lambda f: f[0]))
        used = {i for m in kept for i in range(m.start, m.end)}
        chosen = {id(f) for f in found}
        aside = [f for f in every if id(f) not in chosen and used.isdisjoint(range(f[2].start, f[2].end))]
        return kept, _non_overlapping(m for _, _, m in sorted(aside, key=lambda f: f[0]))

    def _rare(self, words: Sequence[str]) -> bool:
        """Whether a span holds a word the packaged encoder's vocabulary lacks (never, without the vocabulary)."""
        return bool(self._common) and any(w.isalpha() and w not in self._common for w in words)

    def _exact_mention(self, question: str, at: int, surface: str, start: int, end: int, rows: list[int]) -> Mention:
        """The span's candidates of its best tier: ``exact`` (the name written verbatim at the span,
        trailing punctuation included; the longest such name), ``cased`` (the same words in the
        same case), ``normalised``, ``alias``."""
        words = _WORDS.findall(surface)
        best: dict[str, tuple[float, int, Candidate]] = {}
        for row in rows:
            entry = self.index.entries[row]
            if entry.kind == "alias":
                match: Match = "alias"
            elif question.startswith(entry.name, at):
                match = "exact"
            elif _WORDS.findall(entry.name) == words:
                match = "cased"
            else:
                match = "normalised"
            length = len(entry.name) if match == "exact" else 0
            cand = Candidate(entry.entity_id, entry.name, TIER_SCORE[match], match)
            old = best.get(entry.entity_id)
            if old is None or (cand.score, length) > old[:2]:
                best[entry.entity_id] = (cand.score, length, cand)
        top = max(v[:2] for v in best.values())
        cands = tuple(sorted((v[2] for v in best.values() if v[:2] == top), key=lambda c: c.entity_id))
        return Mention(surface, start, end, cands, len(cands) > 1)

    # ------------------------------------------------------------------ dense alignment
    def _dense_spans(self, question: str, parsed: tuple[list[str], list[tuple[int, int]]],
                     mentions: list[Mention]) -> list[_Span]:
        tokens, spans = parsed
        covered = {i for m in mentions for i in range(m.start, m.end)}
        out = []
        for n in range(1, min(self.config.max_ngram, len(tokens)) + 1):
            for i in range(len(tokens) - n + 1):
                window = tokens[i:i + n]
                if covered.intersection(range(i, i + n)) or window[0] in STOPWORDS or window[-1] in STOPWORDS:
                    continue
                out.append(_Span(i, i + n, question[spans[i][0]:spans[i + n - 1][1]], " ".join(window)))
        return out

    def _search(self, keys: list[str]) -> list[list[tuple[float, int]]]:
        vectors = np.ascontiguousarray(self.encoder.encode(keys), dtype=np.float32)  # (S, D)
        k = min(self.config.top_k, max(1, len(self.index.dense_keys)))
        scores, rows = self.index.faiss_index.search(vectors, k)  # (S, k), (S, k)
        return [[(float(s), int(r)) for s, r in zip(srow, rrow) if r >= 0] for srow, rrow in zip(scores, rows)]

    def _dense(self, spans: list[_Span], hits: list[list[tuple[float, int]]], taken: list[Mention]) -> list[Mention]:
        pairs = []
        for span, found in zip(spans, hits):
            if found and found[0][0] >= self.config.threshold:
                score, row = found[0]
                pairs.append((-score, -(span.end - span.start), span.start, span, score, row))
        pairs.sort(key=lambda p: p[:3])
        out: list[Mention] = []
        used = {i for m in taken for i in range(m.start, m.end)}
        for _, _, _, span, score, row in pairs:
            if used.intersection(range(span.start, span.end)):
                continue
            key = self.index.dense_keys[row]
            best: dict[str, Candidate] = {}
            for r in self.index.by_key[key]:
                entry = self.index.entries[r]
                best.setdefault(entry.entity_id, Candidate(entry.entity_id, entry.name, round(score, 4), "dense"))
            cands = tuple(sorted(best.values(), key=lambda c: c.entity_id))
            out.append(Mention(span.text, span.start, span.end, cands, len(cands) > 1))
            used.update(range(span.start, span.end))
        return out

    # ------------------------------------------------------------------ result
    def _result(self, question: str, mentions: list[Mention]) -> LinkResult:
        if not mentions:
            return LinkResult(question, (), (), "not_found", "no n-gram matches an entity name"
                              + ("" if self.config.dense == "off" else f" or aligns with one at cosine >= "
                                                                       f"{self.config.threshold}"))
        ambiguous = [m for m in mentions if m.ambiguous]
        if ambiguous and self.config.on_ambiguous == "fail":
            detail = "; ".join(f"{m.text!r} names {len(m.candidates)} entities: "
                               + ", ".join(c.entity_id for c in m.candidates) for m in ambiguous)
            return LinkResult(question, (), tuple(mentions), "ambiguous", detail)
        ids = dict.fromkeys(c.entity_id for m in mentions for c in m.candidates)
        return LinkResult(question, tuple(ids), tuple(mentions))


def _words(question: str) -> tuple[list[str], list[tuple[int, int]]]:
    """The normalised words of ``question`` and each word's ``(start, end)`` in the raw text."""
    text, origin = normalise_with_map(question)
    tokens, spans, at = [], [], 0
    for word in text.split(" ") if text else []:
        tokens.append(word)
        spans.append((origin[at], origin[at + len(word) - 1] + 1))
        at += len(word) + 1
    return tokens, spans


@functools.cache
def common_words() -> frozenset[str]:
    """The whole words of the packaged encoder's WordPiece vocabulary (all-MiniLM-L6-v2, uncased): English words
    common enough to be one token. A word outside it (``norhaven``, ``cobain``) is rare: most likely a name.
    Empty when the package is not installed."""
    try:
        vocab = default_model_path() / "vocab.txt"
    except EncoderLoadError:
        return frozenset()
    words = vocab.read_text(encoding="utf-8").split("\n")
    return frozenset(w for w in words if w.isalpha() and not w.startswith("##"))


def _non_overlapping(mentions) -> list[Mention]:
    """Mentions in the given order, each kept unless it overlaps one kept before."""
    used: set[int] = set()
    kept = []
    for m in mentions:
        if used.isdisjoint(range(m.start, m.end)):
            kept.append(m)
            used.update(range(m.start, m.end))
    return kept
