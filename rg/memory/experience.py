"""The privacy-aware experience pool (PrivGemo §4.4, Algorithm 6).

A record ε = (Ĩ, D_predict, Π̃, P̃_tpl, Ω, e_Q, e_Ĩ, π): the anonymised indicator (with its
relations and answer type), the depth prior, the mode/depth trajectory, the verified anonymised
path templates, the outcome (successes, failures, failed actions kept as warnings), the embeddings
of the topic-masked question and of the indicator, and the privacy tag (mode, ratio, grouping).
No answer, no raw name and no question text is stored (only its embedding).

Retrieval (GetExp) is dual-key: ``Score = λq·cos(e_Q, e_Qj) + λI·cos(e_I, e_Ij)``. Both keys sit
side by side in one FAISS inner-product index per privacy tag (so incompatible records are never
candidates), the query carrying the weights ``[λq·e_Q, λI·e_I]``; before question analysis the
indicator is unknown and the question key alone is used. An index is exact
(``IndexFlatIP``) up to ``exact_max`` records and HNSW (``IndexHNSWFlat``, inner product) past it.
The high-frequency buffer holds up to ``buffer`` recently retrieved records with their hit counts;
retrieval ranks the union of buffer and index hits by ``λsim·Score + λhit·Count/max Count``.

Write-back merges a trace into a record of the same tag and indicator whose question key is
closer than ``merge_threshold`` (templates united, counts added) and otherwise adds a record;
:meth:`ExperiencePool.prune` drops the lowest-value records past ``max_records``. Cold-start
exemplars from the config are loaded as records (never persisted). With a ``path`` the pool is
sealed with AES-GCM (:mod:`rg.memory.sealed`): every write appends the record's new state; on
load the last state of an id wins; :meth:`ExperiencePool.compact` keeps one state per record.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

import faiss
import numpy as np
from pydantic import Field, model_validator

from rg.config import Config
from rg.memory.embed import Embedder, EmbedderKind
from rg.memory.keys import KeyConfig
from rg.memory.sealed import SealedLog
from rg.reasoning.dualtower.memory import Action, Exemplar, MemoryHints, RecalledAnalysis, Trace

MODES = ("topic", "refine", "predict")
EXACT = 1.0 - 1e-5  # a question-key cosine this high is the same anonymised question (float32 rounding aside)


class ColdStartExemplar(Config):
    """A hand-written verified trace to start from (anonymised: ``TE_1``, relations, types)."""

    question: str = Field(min_length=1, description="The question with topic mentions as TE_i.")
    indicator: str = Field(min_length=1, description="Anonymised indicator, e.g. 'TE -[directed_by]-> ANSWER'.")
    relations: tuple[str, ...] = Field((), description="The indicator's relations.")
    depth: int = Field(1, ge=1, le=6, description="Depth prior D_predict.")
    templates: tuple[str, ...] = Field((), description="Verified path patterns (for the pruning score).")
    privacy: str = Field("utility|1.0|0", description="Privacy tag the exemplar applies to (mode|ratio|grouped).")


class ExperienceConfig(Config):
    """The experience pool (PrivGemo defaults: λq = λI = 0.5, λsim = 0.7, λhit = 0.3, W_exp = 5, buffer 1,000)."""

    lambda_q: float = Field(0.5, ge=0.0, le=1.0, description="λq: weight of the question key.")
    lambda_i: float = Field(0.5, ge=0.0, le=1.0, description="λI: weight of the indicator key.")
    lambda_sim: float = Field(0.7, ge=0.0, le=1.0, description="λsim: weight of the dual-key score in the buffer rank.")
    lambda_hit: float = Field(0.3, ge=0.0, le=1.0, description="λhit: weight of the (normalised) hit count.")
    w_exp: int = Field(5, ge=1, le=100, description="W_exp: experiences retrieved per lookup.")
    buffer: int = Field(1000, ge=0, le=1_000_000, description="High-frequency buffer capacity (records).")
    skip_threshold: float = Field(
        0.97, ge=0.0, le=1.0,
        description="Question-key cosine at or above which a verified trace lets the Hand skip the Brain's analysis.")
    ambiguity_margin: float = Field(
        0.03, ge=0.0, le=1.0,
        description="A confident trace gates only when no other retrieved record scoring within this margin of it "
        "has another depth or relation path (the question key cannot tell those questions apart).")
    reworded_skip: Literal["alone", "with_replay"] = Field(
        "with_replay",
        description="A confident match that is not the same anonymised question (a rewording: score below 1) "
        "skips the Brain 'alone', or only 'with_replay': when the edge memory replays a chain of this question "
        "that walks the trace's relations (the controller checks; without an edge memory such a match never "
        "skips). On MetaQA paraphrases a rewording's nearest trace was another 3-hop template's in 8 of 15 "
        "uncorroborated reuses (docs/memory.md).")
    exemplar_threshold: float = Field(
        0.9, ge=0.0, le=1.0,
        description="Dual-key score (question and indicator) at or above which a verified record's templates are "
        "exemplars of the pruning score; the controller further keeps those of the node's depth and relations.")
    merge_threshold: float = Field(0.97, ge=0.0, le=1.0, description="Question-key cosine to merge into a record.")
    exact_max: int = Field(20000, ge=1, description="Records per privacy tag kept in an exact index; HNSW past it.")
    hnsw_m: int = Field(32, ge=4, le=128, description="HNSW neighbours per node.")
    hnsw_ef_search: int = Field(64, ge=8, le=4096, description="HNSW search breadth.")
    max_records: int = Field(200_000, ge=1, description="Past this many records, prune() drops the lowest-value ones.")
    embedder: EmbedderKind = Field("encoder", description="'encoder' (sentence encoder) or 'hashing' (no model).")
    hashing_dim: int = Field(256, ge=16, le=4096, description="embedder hashing: vector size.")
    cold_start: tuple[ColdStartExemplar, ...] = Field((), description="Cold-start exemplars (PrivGemo uses 5).")
    path: Optional[str] = Field(None, description="Sealed pool file; None keeps the pool in memory only.")

    @model_validator(mode="after")
    def _weights(self) -> "ExperienceConfig":
        if self.lambda_q + self.lambda_i == 0:
            raise ValueError("lambda_q and lambda_i are both 0: no key would be compared. Fix: set one above 0")
        return self


@dataclass
class ExperienceRecord:
    """One stored experience (module docstring); ``e_q``/``e_i`` are unit float32 vectors."""

    id: str
    indicator: str
    relations: tuple[str, ...]
    depth: int
    answer_type: str | None
    trajectory: tuple[Action, ...]
    templates: dict[str, tuple[tuple[str, ...], ...]]
    successes: int
    failures: int
    warnings: tuple[Action, ...]
    privacy: str
    e_q: np.ndarray
    e_i: np.ndarray
    hits: int = 0
    cold: bool = False

    @property
    def verified(self) -> bool:
        return self.successes > 0 and bool(self.templates)

    def agreeing_templates(self) -> dict[str, tuple[tuple[str, ...], ...]]:
        """The templates that walk the record's own relations (all when it names none; a template of several
        branches, one per topic, cannot be compared with the one relation path and is kept). A record also
        holds the other paths that happened to verify for its question (a screenwriter who also directed):
        as exemplars or local selection paths they would pick that path for the next question of the template."""
        if not self.relations:
            return dict(self.templates)
        return {p: b for p, b in self.templates.items() if len(b) != 1 or tuple(b[0]) == self.relations}

    @property
    def value(self) -> float:
        """Low-value pruning rank: verified uses and hits, minus failures."""
        return self.successes - self.failures + 0.1 * self.hits

    def to_bytes(self) -> bytes:
        body = {
            "id": self.id, "indicator": self.indicator, "relations": list(self.relations), "depth": self.depth,
            "answer_type": self.answer_type, "trajectory": [list(a) for a in self.trajectory],
            "templates": {p: [list(b) for b in paths] for p, paths in self.templates.items()},
            "successes": self.successes, "failures": self.failures, "warnings": [list(a) for a in self.warnings],
            "privacy": self.privacy, "hits": self.hits,
            "e_q": base64.b64encode(self.e_q.astype(np.float32).tobytes()).decode(),
            "e_i": base64.b64encode(self.e_i.astype(np.float32).tobytes()).decode(),
        }
        return json.dumps(body, ensure_ascii=False).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "ExperienceRecord":
        body: dict[str, Any] = json.loads(data)
        return cls(
            id=body["id"], indicator=body["indicator"], relations=tuple(body["relations"]), depth=int(body["depth"]),
            answer_type=body["answer_type"], trajectory=tuple((m, int(d)) for m, d in body["trajectory"]),
            templates={p: tuple(tuple(b) for b in paths) for p, paths in body["templates"].items()},
            successes=int(body["successes"]), failures=int(body["failures"]),
            warnings=tuple((m, int(d)) for m, d in body["warnings"]), privacy=body["privacy"], hits=int(body["hits"]),
            e_q=np.frombuffer(base64.b64decode(body["e_q"]), dtype=np.float32).copy(),
            e_i=np.frombuffer(base64.b64decode(body["e_i"]), dtype=np.float32).copy())


@dataclass(frozen=True)
class Retrieved:
    """A retrieved record with its dual-key score and buffer rank."""

    record: ExperienceRecord
    score: float
    rank: float


@dataclass
class _TagIndex:
    """The FAISS index of one privacy tag over concatenated [e_Q, e_I] keys."""

    dim: int
    config: ExperienceConfig
    ids: list[str] = field(default_factory=list)
    index: Any = None
    keys: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    row: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index = faiss.IndexFlatIP(2 * self.dim)
        self.keys = np.zeros((16, 2 * self.dim), np.float32)  # (capacity, 2·dim), rows in ``ids`` order

    def key_rows(self, ids: Sequence[str]) -> np.ndarray:
        """The stored keys of ``ids``. Shapes: -> (len(ids), 2·dim)."""
        return self.keys[[self.row[i] for i in ids]]

    @property
    def approximate(self) -> bool:
        return isinstance(self.index, faiss.IndexHNSWFlat)

    def add(self, record_id: str, key: np.ndarray) -> None:
        if len(self.ids) == len(self.keys):
            self.keys = np.concatenate([self.keys, np.zeros_like(self.keys)])
        self.row[record_id] = len(self.ids)
        self.keys[len(self.ids)] = key
        self.ids.append(record_id)
        self.index.add(key.reshape(1, -1))
        if not self.approximate and len(self.ids) > self.config.exact_max:
            self.rebuild(self.keys[: len(self.ids)])

    def rebuild(self, keys: np.ndarray) -> None:
        """A fresh index over ``keys`` (rows in ``ids`` order), HNSW when past ``exact_max``."""
        self.keys = np.array(keys, dtype=np.float32).reshape(len(self.ids), 2 * self.dim)
        self.row = {i: n for n, i in enumerate(self.ids)}
        if len(self.ids) > self.config.exact_max:
            index = faiss.IndexHNSWFlat(2 * self.dim, self.config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efSearch = self.config.hnsw_ef_search
        else:
            index = faiss.IndexFlatIP(2 * self.dim)
        if len(keys):
            index.add(np.ascontiguousarray(keys, dtype=np.float32))
        self.index = index

    def search(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        if not self.ids:
            return []
        scores, rows = self.index.search(query.reshape(1, -1), min(k, len(self.ids)))
        return [(self.ids[r], float(s)) for r, s in zip(rows[0].tolist(), scores[0].tolist()) if r >= 0]


class _HitBuffer:
    """The high-frequency buffer: up to ``capacity`` recently retrieved records with their hit counts and keys.

    Slots hold each record's key, privacy tag and hit count in arrays, so one lookup scores every buffered
    record of its tag with a single matrix product (no per-record gather). When full, a new record replaces the
    least-hit one (the oldest among equals); a record hit once stays out when every buffered record was hit more.
    """

    def __init__(self, capacity: int, width: int) -> None:
        self.capacity = capacity
        size = min(capacity, 64)  # slots double as they fill, up to the capacity
        self.keys = np.zeros((size, width), np.float32)
        self.counts = np.zeros(size, np.int64)  # 0 marks a free slot
        self.touched = np.zeros(size, np.int64)
        self.tags = np.full(size, -1, np.int64)
        self.ids: list[str | None] = [None] * size
        self.slot: dict[str, int] = {}
        self.tag_code: dict[str, int] = {}
        self.tick = 0

    def __len__(self) -> int:
        return len(self.slot)

    def __contains__(self, record_id: object) -> bool:
        return record_id in self.slot

    def __getitem__(self, record_id: str) -> int:
        return int(self.counts[self.slot[record_id]])

    def count(self, record_id: str) -> int:
        n = self.slot.get(record_id)
        return 0 if n is None else int(self.counts[n])

    def hit(self, record_id: str, tag: str, key: np.ndarray) -> None:
        """Count one retrieval of ``record_id`` (key shape (width,)), admitting it if it ranks."""
        if self.capacity == 0:
            return
        self.tick += 1
        n = self.slot.get(record_id)
        if n is None:
            if len(self.slot) < self.capacity:
                if len(self.slot) == len(self.ids):
                    self._grow()
                n = int(np.flatnonzero(self.counts == 0)[0])
            else:
                low = int(self.counts.min())
                if low > 1:  # the newcomer (one hit) is the least hit: it does not enter
                    return
                ties = np.flatnonzero(self.counts == low)
                n = int(ties[np.argmin(self.touched[ties])])
                del self.slot[self.ids[n]]
            self.slot[record_id] = n
            self.ids[n] = record_id
            self.keys[n] = key
            self.tags[n] = self.tag_code.setdefault(tag, len(self.tag_code))
            self.counts[n] = 0
        self.counts[n] += 1
        self.touched[n] = self.tick

    def _grow(self) -> None:
        add = min(len(self.ids), self.capacity - len(self.ids))
        self.keys = np.concatenate([self.keys, np.zeros((add, self.keys.shape[1]), np.float32)])
        self.counts = np.concatenate([self.counts, np.zeros(add, np.int64)])
        self.touched = np.concatenate([self.touched, np.zeros(add, np.int64)])
        self.tags = np.concatenate([self.tags, np.full(add, -1, np.int64)])
        self.ids += [None] * add

    def pop(self, record_id: str) -> None:
        n = self.slot.pop(record_id, None)
        if n is not None:
            self.ids[n] = None
            self.counts[n] = 0
            self.tags[n] = -1

    def scored(self, tag: str, query: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The buffered records of ``tag``: ids, scores ``key·query`` and hit counts. Shapes: query (width,)."""
        code = self.tag_code.get(tag)
        if code is None or not self.slot:
            return [], np.zeros(0, np.float32), np.zeros(0, np.int64)
        rows = np.flatnonzero(self.tags == code)
        scores = (self.keys @ query)[rows]  # one product over all slots beats gathering the tag's rows first
        return [self.ids[r] for r in rows.tolist()], scores, self.counts[rows]


class ExperiencePool:
    """The experience pool (module docstring).

    Args:
        config: Settings.
        embedder: Embeds questions and indicators (unit vectors).
        log: Sealed file to persist to and load from (None: in memory only).
    """

    def __init__(self, config: ExperienceConfig, embedder: Embedder, log: SealedLog | None = None) -> None:
        self.config = config
        self.embedder = embedder
        self.dim = embedder.dim
        self.log = log
        self.records: dict[str, ExperienceRecord] = {}
        self.indexes: dict[str, _TagIndex] = {}
        self.buffer = _HitBuffer(config.buffer, 2 * self.dim)
        self.refused = 0
        if log is not None:
            self.refused = len(log.report.refused)
            latest: dict[str, ExperienceRecord] = {}
            for _, data in log.report.records:
                record = ExperienceRecord.from_bytes(data)
                if record.depth < 0:  # a tombstone: the record was pruned
                    latest.pop(record.id, None)
                else:
                    latest[record.id] = record
            for record in latest.values():
                self._index(record)
        for exemplar in config.cold_start:
            self._cold(exemplar)

    # ------------------------------------------------------------------ storage
    def _key(self, e_q: np.ndarray, e_i: np.ndarray) -> np.ndarray:
        return np.concatenate([e_q, e_i]).astype(np.float32)

    def _index(self, record: ExperienceRecord) -> None:
        if record.e_q.shape != (self.dim,):
            raise ValueError(f"a stored record has {record.e_q.size}-dimensional keys, the embedder {self.dim}. Fix: use "
                             "the embedder the pool was written with (memory.experience.embedder) or a new path")
        self.records[record.id] = record
        index = self.indexes.setdefault(record.privacy, _TagIndex(self.dim, self.config))
        index.add(record.id, self._key(record.e_q, record.e_i))

    def _persist(self, record: ExperienceRecord) -> None:
        if self.log is not None and not record.cold:
            self.log.append(record.to_bytes())

    def _cold(self, exemplar: ColdStartExemplar) -> None:
        e_q, e_i = self.embedder.embed([exemplar.question, exemplar.indicator])
        record = ExperienceRecord(
            id="cold-" + secrets.token_hex(6), indicator=exemplar.indicator, relations=exemplar.relations,
            depth=exemplar.depth, answer_type=None, trajectory=(("topic", exemplar.depth),),
            templates={t: () for t in exemplar.templates}, successes=1, failures=0, warnings=(),
            privacy=exemplar.privacy, e_q=e_q, e_i=e_i, cold=True)
        self._index(record)

    def __len__(self) -> int:
        return len(self.records)

    def add_many(self, records: Sequence[ExperienceRecord]) -> None:
        """Bulk load (benchmarks, migrations): index all and persist them with one fsync."""
        for record in records:
            self._index(record)
        if self.log is not None:
            self.log.append_many((SealedLog.new_id(), r.to_bytes()) for r in records if not r.cold)

    def compact(self) -> int:
        """Rewrite the sealed file with one state per stored record; returns how many."""
        if self.log is None:
            return 0
        return self.log.compact((SealedLog.new_id(), r.to_bytes()) for r in self.records.values() if not r.cold)

    # ------------------------------------------------------------------ retrieval
    def retrieve(self, question: str, indicator: str | None, privacy: str, k: int | None = None) -> list[Retrieved]:
        """GetExp: the top ``k`` (default W_exp) compatible records, best buffer rank first (the closest record
        always among them); hits counted."""
        if privacy not in self.indexes:
            return []
        if indicator is None:
            return self.search(self.embedder.embed([question])[0], None, privacy, k)
        e_q, e_i = self.embedder.embed([question, indicator])
        return self.search(e_q, e_i, privacy, k)

    def search(self, e_q: np.ndarray, e_i: np.ndarray | None, privacy: str, k: int | None = None) -> list[Retrieved]:
        """:meth:`retrieve` on given unit embeddings (``e_i`` None: the question key alone).

        Shapes: e_q (dim,), e_i (dim,) or None.
        """
        cfg = self.config
        k = k or cfg.w_exp
        index = self.indexes.get(privacy)
        if index is None or not index.ids:
            return []
        if e_i is None:
            query = self._key(e_q, np.zeros_like(e_q))
        else:
            query = self._key(cfg.lambda_q * e_q, cfg.lambda_i * e_i)
        found = index.search(query, k)
        buffered, buffer_scores, buffer_counts = self.buffer.scored(privacy, query)
        extra = [(i, s) for i, s in found if i not in self.buffer]
        ids = np.array(buffered + [i for i, _ in extra])
        scores = np.concatenate([buffer_scores, np.array([s for _, s in extra], np.float32)]).astype(np.float64)
        counts = np.concatenate([buffer_counts, np.zeros(len(extra), np.int64)])
        if not len(ids):
            return []
        rank = cfg.lambda_sim * scores + cfg.lambda_hit * counts / max(int(counts.max()), 1)
        order = np.lexsort((ids, -scores, -rank))  # rank, then score, then id
        top = order[:k].tolist()
        # hit counts reorder the rest, but never push out the closest record (a repeated question's own)
        closest = int(order[np.argmax(scores[order])])
        if closest not in top:
            top = top[: k - 1] + [closest]
        ranked = [(float(rank[n]), float(scores[n]), str(ids[n])) for n in top]
        out = [Retrieved(self.records[i], s, r) for r, s, i in ranked]
        for item in out:
            self._hit(item.record.id)
        return out

    def _hit(self, record_id: str) -> None:
        record = self.records[record_id]
        record.hits += 1
        if self.config.buffer:
            self.buffer.hit(record_id, record.privacy, self.indexes[record.privacy].key_rows([record_id])[0])

    def hints(self, question: str, indicator: str | None, privacy: str) -> MemoryHints:
        """Control hints from the retrieved records (Algorithm 6: ShouldSkipBrain, InitPolicy, MatchWarnings).

        ShouldSkipBrain needs a match that is close *and* unambiguous: the best verified record scores at least
        ``skip_threshold``, has more successes than failures, and every other retrieved record scoring within
        ``ambiguity_margin`` of it has its depth and relation path (a record of another template that the
        question key scores as high would otherwise gate this question with the wrong depth). A best record
        whose key equals the question's (score ≥ ``EXACT``) was written by this same anonymised question, so
        only records scoring as high rival it. The relation
        paths the Hand may then select locally come from the close records that agree with the best one only, and
        from their templates that walk their own relations (:meth:`ExperienceRecord.agreeing_templates`).
        """
        found = self.retrieve(question, indicator, privacy)
        if not found:
            return MemoryHints()
        cfg = self.config
        verified = [f for f in found if f.record.verified]
        best = max(verified, key=lambda f: f.score) if verified else None
        warnings = tuple(dict.fromkeys(a for f in found for a in f.record.warnings))
        exemplars = tuple(dict.fromkeys(p for f in verified for p in f.record.agreeing_templates()))
        if best is None:
            return MemoryHints(warnings=warnings, score=found[0].score)
        record = best.record
        shape = (record.depth, record.relations)
        # an exact key match is this very anonymised question, verified before: only another exact match rivals it
        margin = 0.0 if best.score >= EXACT else cfg.ambiguity_margin
        rivals = [f for f in found if f.score >= best.score - margin]
        agree = all((f.record.depth, f.record.relations) == shape for f in rivals)
        confident = (best.score >= cfg.skip_threshold and record.successes > record.failures
                     and bool(record.relations) and agree)
        close = [f for f in verified if f.score >= cfg.skip_threshold and (f.record.depth, f.record.relations) == shape]
        paths = frozenset(b for f in close for b in f.record.agreeing_templates().values() if b)
        init = record.trajectory[-1] if record.trajectory else None
        return MemoryHints(
            skip_brain=confident, needs_replay=best.score < EXACT and cfg.reworded_skip == "with_replay",
            analysis=RecalledAnalysis(record.indicator, record.relations, record.depth, record.answer_type),
            init=init, warnings=tuple(a for a in warnings if a != init), exemplars=exemplars, relation_paths=paths,
            score=best.score)

    def exemplars(self, question: str, indicator: str, privacy: str) -> list[Exemplar]:
        """The pruning score's memory term: the agreeing templates (:meth:`ExperienceRecord.agreeing_templates`)
        of the retrieved verified records scoring at least ``exemplar_threshold``, each with its record's depth
        and relations (the controller keeps those of the node's shape, ``rg.reasoning.dualtower.prune.agreeing``)."""
        return [Exemplar(p, f.record.depth, f.record.relations, f.score)
                for f in self.retrieve(question, indicator, privacy)
                if f.record.verified and f.score >= self.config.exemplar_threshold
                for p in f.record.agreeing_templates()]

    # ------------------------------------------------------------------ write-back
    def remember(self, trace: Trace) -> ExperienceRecord:
        """WriteBack: merge the trace into a close record of the same tag and indicator, or add one."""
        e_q, e_i = self.embedder.embed([trace.question, trace.analysis.indicator])
        templates = {p: paths for p, paths in trace.templates}
        index = self.indexes.get(trace.privacy)
        target = None
        if index is not None and index.ids:
            for rid, score in index.search(self._key(e_q, np.zeros_like(e_q)), 3):
                record = self.records[rid]
                if score >= self.config.merge_threshold and record.indicator == trace.analysis.indicator \
                        and not record.cold:
                    target = record
                    break
        if target is None:
            target = ExperienceRecord(
                id=secrets.token_hex(8), indicator=trace.analysis.indicator, relations=trace.analysis.relations,
                depth=trace.analysis.depth, answer_type=trace.analysis.answer_type, trajectory=trace.trajectory,
                templates=templates, successes=int(trace.sufficient), failures=int(not trace.sufficient),
                warnings=trace.warnings, privacy=trace.privacy, e_q=e_q, e_i=e_i)
            self._index(target)
        else:  # merge: unite templates, add counts, keep the latest successful trajectory
            target.templates.update(templates)
            target.successes += int(trace.sufficient)
            target.failures += int(not trace.sufficient)
            target.warnings = tuple(dict.fromkeys(target.warnings + trace.warnings))
            if trace.sufficient:
                target.trajectory = trace.trajectory
        self._persist(target)
        if len(self.records) > self.config.max_records:
            self.prune(self.config.max_records)
        return target

    def prune(self, keep: int) -> int:
        """PruneLowValue: keep the ``keep`` highest-value records (cold-start exemplars always stay)."""
        live = [r for r in self.records.values() if not r.cold]
        drop = sorted(live, key=lambda r: (r.value, r.hits))[: max(len(live) - keep, 0)]
        for record in drop:
            del self.records[record.id]
            self.buffer.pop(record.id)
            if self.log is not None:
                tomb = ExperienceRecord(record.id, "", (), -1, None, (), {}, 0, 0, (), record.privacy,
                                        record.e_q[:0], record.e_i[:0])
                self.log.append(tomb.to_bytes())
        if drop:
            for tag, index in self.indexes.items():
                index.ids = [i for i in index.ids if i in self.records]
                keys = [self._key(self.records[i].e_q, self.records[i].e_i) for i in index.ids]
                index.rebuild(np.stack(keys) if keys else np.zeros((0, 2 * self.dim), np.float32))
        return len(drop)


class PoolMemory:
    """An :class:`ExperiencePool` as the controller's :class:`~rg.reasoning.dualtower.memory.GatingMemory`.

    The controller passes its privacy tag with each lookup; ``exemplars`` (the older hook) uses the
    tag given here.
    """

    def __init__(self, pool: ExperiencePool, privacy: str) -> None:
        self.pool = pool
        self.privacy = privacy

    def exemplars(self, question: str, indicator: str) -> list[Exemplar]:
        return self.pool.exemplars(question, indicator, self.privacy)

    def hints(self, question: str, indicator: str | None, privacy: str) -> MemoryHints:
        return self.pool.hints(question, indicator, privacy)

    def remember(self, trace: Trace) -> None:
        self.pool.remember(trace)


__all__ = ["ColdStartExemplar", "ExperienceConfig", "ExperiencePool", "ExperienceRecord", "KeyConfig", "PoolMemory",
           "Retrieved", "MODES"]
