"""The experience pool (PrivGemo §4.4): dual-key ranking, buffer, privacy filter, merge, prune, sealing."""

from __future__ import annotations

import numpy as np
import pytest

from rg.config import ConfigError, validate_config
from rg.memory.embed import HashingEmbedder
from rg.memory.experience import ColdStartExemplar, ExperienceConfig, ExperiencePool, ExperienceRecord
from rg.memory.sealed import FRAME_MAGIC, SealedLog, read_sealed
from rg.reasoning.dualtower.brain import Indicator
from rg.reasoning.dualtower.memory import Exemplar, RecalledAnalysis, Trace
from rg.reasoning.dualtower.prune import agreeing

KEY = bytes(range(32))
TAG = "utility|1.0|0"


class TableEmbedder:
    dim = 2

    def __init__(self, table):
        self.table = {k: np.asarray(v, np.float32) / np.linalg.norm(v) for k, v in table.items()}

    def embed(self, texts):
        return np.stack([self.table[t] for t in texts])


def record(rid, e_q, e_i, privacy=TAG, **kw):
    base = dict(indicator=f"ind {rid}", relations=("r",), depth=1, answer_type=None, trajectory=(("topic", 1),),
                templates={f"TE_1 → [r{rid}] → (film)": ((f"r{rid}",),)}, successes=1, failures=0, warnings=(),
                privacy=privacy)
    base.update(kw)
    unit = lambda v: np.asarray(v, np.float32) / np.linalg.norm(v)  # noqa: E731
    return ExperienceRecord(id=rid, e_q=unit(e_q), e_i=unit(e_i), **base)


def test_dual_key_ranking_order():
    emb = TableEmbedder({"Q": [1, 0], "I": [0, 1]})
    pool = ExperiencePool(ExperienceConfig(embedder="hashing", buffer=0), emb)
    # A: same question, other indicator; B: both halfway; C: other question, same indicator
    pool.add_many([record("A", [1, 0], [1, 0]), record("B", [1, 1], [1, 1]), record("C", [0, 1], [0, 1])])
    found = pool.retrieve("Q", "I", TAG, k=3)
    assert [f.record.id for f in found] == ["B", "A", "C"] or [f.record.id for f in found] == ["B", "C", "A"]
    scores = {f.record.id: f.score for f in found}
    assert scores["B"] == pytest.approx(0.5 * 2 ** -0.5 * 2)  # 0.5·cos45 + 0.5·cos45
    assert scores["A"] == pytest.approx(0.5) and scores["C"] == pytest.approx(0.5)
    # λq > λI favours the question key
    pool_q = ExperiencePool(ExperienceConfig(embedder="hashing", buffer=0, lambda_q=0.9, lambda_i=0.1), emb)
    pool_q.add_many([record("A", [1, 0], [1, 0]), record("C", [0, 1], [0, 1])])
    assert [f.record.id for f in pool_q.retrieve("Q", "I", TAG, k=2)] == ["A", "C"]


def test_buffer_hit_counts_reorder_close_scores():
    emb = TableEmbedder({"Q": [1, 0], "I": [1, 0], "X": [0.96, 0.28]})
    cfg = ExperienceConfig(embedder="hashing", lambda_sim=0.7, lambda_hit=0.3)
    pool = ExperiencePool(cfg, emb)
    pool.add_many([record("near", [1, 0], [1, 0]), record("often", [0.96, 0.28], [0.96, 0.28])])
    for _ in range(5):  # "often" is retrieved alone five times
        assert pool.retrieve("X", "X", TAG, k=1)[0].record.id == "often"
    ranked = pool.retrieve("Q", "I", TAG, k=2)
    assert ranked[0].record.id == "often"  # 0.7·0.96 + 0.3·1 beats 0.7·1 + 0.3·0
    assert ranked[0].score < ranked[1].score
    assert pool.buffer["often"] == 6


def test_hit_counts_never_push_the_closest_record_out_of_the_gate():
    """A repeated question's own record (score 1) ranks below two often-hit records of another depth at k = 2;
    it is still returned, so the gate recalls its depth and skips the Brain."""
    emb = TableEmbedder({"Q": [1, 0], "X": [0.9, 0.436]})
    pool = ExperiencePool(ExperienceConfig(embedder="hashing", w_exp=2, skip_threshold=0.97), emb)
    other = dict(relations=("r", "s"), depth=2)
    pool.add_many([record("own", [1, 0], [1, 0]), record("often1", [0.9, 0.436], [1, 0], **other),
                   record("often2", [0.9, 0.436], [1, 0], **other)])
    for _ in range(5):
        assert {f.record.id for f in pool.retrieve("X", None, TAG)} == {"often1", "often2"}
    found = pool.retrieve("Q", None, TAG)
    assert [f.record.id for f in found] == ["often1", "own"]  # 0.7·0.9 + 0.3 beats 0.7·1 + 0; own kept last
    hints = pool.hints("Q", None, TAG)
    assert hints.skip_brain and hints.analysis.depth == 1 and hints.score == pytest.approx(1.0)


def test_buffer_capacity_evicts_least_hit():
    emb = TableEmbedder({"Q": [1, 0]})
    pool = ExperiencePool(ExperienceConfig(embedder="hashing", buffer=2), emb)
    pool.add_many([record(str(i), [1, 0.1 * i], [1, 0]) for i in range(3)])
    pool.retrieve("Q", None, TAG, k=1)
    pool.retrieve("Q", None, TAG, k=1)
    pool.retrieve("Q", None, TAG, k=3)
    assert len(pool.buffer) == 2 and "0" in pool.buffer


def test_privacy_mode_filter():
    emb = TableEmbedder({"Q": [1, 0], "I": [1, 0]})
    pool = ExperiencePool(ExperienceConfig(embedder="hashing"), emb)
    pool.add_many([record("u", [1, 0], [1, 0], privacy="utility|1.0|0"),
                   record("p", [1, 0], [1, 0], privacy="privacy|1.0|0"),
                   record("g", [1, 0], [1, 0], privacy="privacy|1.0|1")])
    assert [f.record.id for f in pool.retrieve("Q", "I", "privacy|1.0|0")] == ["p"]
    assert [f.record.id for f in pool.retrieve("Q", "I", "utility|1.0|0")] == ["u"]
    assert pool.retrieve("Q", "I", "plaintext|1.0|0") == []


def trace(question, indicator="TE -[directed_by]-> ANSWER", ok=True, template="TE_1 → [directed_by] → (person)"):
    return Trace(question=question, analysis=RecalledAnalysis(indicator, ("directed_by",), 1, None),
                 trajectory=(("topic", 2), ("topic", 1)) if ok else (("topic", 1),),
                 templates=((template, (("directed_by",),)),) if ok else (), sufficient=ok,
                 warnings=(("topic", 2),) if ok else (("topic", 1),), privacy=TAG)


def test_hints_merge_and_warnings():
    pool = ExperiencePool(ExperienceConfig(embedder="hashing"), HashingEmbedder(64))
    assert pool.hints("who directed TE_1", None, TAG).skip_brain is False
    pool.remember(trace("who directed TE_1"))
    pool.remember(trace("who directed TE_1", template="TE_1 → [directed_by] → (film)"))
    assert len(pool) == 1  # merged: same question key and indicator
    (rec,) = pool.records.values()
    assert rec.successes == 2 and len(rec.templates) == 2
    hints = pool.hints("who directed TE_1", None, TAG)
    assert hints.skip_brain and hints.analysis.indicator == "TE -[directed_by]-> ANSWER"
    assert hints.init == ("topic", 1) and hints.warnings == (("topic", 2),)
    assert (("directed_by",),) in hints.relation_paths
    assert not pool.hints("when was TE_1 released in cinemas", None, TAG).skip_brain
    # a failed trace of another indicator stays a warning, not a template
    pool.remember(trace("who directed TE_1", indicator="TE -[written_by]-> ANSWER", ok=False))
    assert len(pool) == 2
    after = pool.hints("who directed TE_1", None, TAG)
    assert after.skip_brain and after.analysis.indicator == "TE -[directed_by]-> ANSWER"
    assert ("topic", 2) in after.warnings  # the failed trace's action and the verified one's detour


def test_exemplars_are_close_records_templates_that_walk_their_own_relations():
    """Exemplars: only records scoring exemplar_threshold or more, only their templates that walk the record's
    relations (a path that also verified, e.g. a screenwriter who also directed, is no exemplar nor local path),
    each with the record's depth and relations so the controller can keep those of the node's shape."""
    emb = TableEmbedder({"Q": [1, 0], "I": [1, 0]})
    pool = ExperiencePool(ExperienceConfig(embedder="hashing", buffer=0, exemplar_threshold=0.9), emb)
    rel = ("written_by", "written_by^-1")
    pool.add_many([
        record("close", [1, 0], [1, 0], relations=rel, depth=2,
               templates={"TE_1 → [written_by] → (person) ← [written_by] ← (film)": (rel,),
                          "TE_1 → [written_by] → (person) ← [directed_by] ← (film)": (("written_by", "directed_by^-1"),)}),
        record("far", [0.6, 0.8], [1, 0]),  # dual-key score 0.5·0.6 + 0.5·1 = 0.8 < 0.9
    ])
    (ex,) = pool.exemplars("Q", "I", TAG)
    assert ex == Exemplar("TE_1 → [written_by] → (person) ← [written_by] ← (film)", 2, rel, pytest.approx(1.0))
    assert pool.hints("Q", None, TAG).relation_paths == frozenset({(rel,)})
    # a record naming no relations keeps all its templates
    assert len(record("x", [1, 0], [1, 0], relations=(), templates={"a": (("p",),), "b": (("q",),)}).agreeing_templates()) == 2
    # the controller's side: the node's depth, and its relations when both name them
    node = Indicator(text="TE -[written_by]-> ?x1 -[written_by^-1]-> ANSWER", relations=rel, depth=2)
    other = Exemplar("p other", 2, ("starred_actors", "starred_actors^-1"))
    shallow = Exemplar("p shallow", 1, ())
    assert agreeing([ex, other, shallow, "bare text"], node) == [ex.pattern, "bare text"]
    assert agreeing([other, shallow], Indicator(text="free text", depth=2)) == ["p other"]
    assert agreeing([other, shallow], Indicator(text="free text", depth=1)) == ["p shallow"]


def test_prune_low_value_and_cold_start():
    cold = ColdStartExemplar(question="who directed TE_1", indicator="TE -[directed_by]-> ANSWER",
                             relations=("directed_by",), templates=("TE_1 → [directed_by] → (person)",))
    pool = ExperiencePool(ExperienceConfig(embedder="hashing", cold_start=(cold,)), HashingEmbedder(64))
    assert pool.hints("who directed TE_1", None, TAG).skip_brain
    pool.add_many([record("bad", [1, 0] + [0] * 62, [1, 0] + [0] * 62, successes=0, failures=3),
                   record("good", [0, 1] + [0] * 62, [0, 1] + [0] * 62, successes=4)])
    assert pool.prune(1) == 1
    assert "good" in pool.records and "bad" not in pool.records
    assert any(r.cold for r in pool.records.values())
    assert all(i in pool.records for idx in pool.indexes.values() for i in idx.ids)


def test_switches_to_hnsw_past_the_threshold():
    rng = np.random.default_rng(0)
    emb = HashingEmbedder(16)
    pool = ExperiencePool(ExperienceConfig(embedder="hashing", exact_max=50, buffer=0), emb)
    keys = rng.normal(size=(80, 16)).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    pool.add_many([record(str(i), k, k) for i, k in enumerate(keys)])
    assert pool.indexes[TAG].approximate
    target = keys[7]
    emb_t = TableEmbedder({"q": target})
    pool.embedder = emb_t
    assert pool.retrieve("q", "q", TAG, k=1)[0].record.id == "7"


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="lambda_q"):
        validate_config({"lambda_q": 2.0}, ExperienceConfig)
    with pytest.raises(ConfigError, match="lambda_q and lambda_i"):
        validate_config({"lambda_q": 0.0, "lambda_i": 0.0}, ExperienceConfig)


def test_sealed_pool_reloads_refuses_tampered_and_holds_no_plaintext(tmp_path):
    path = tmp_path / "pool.sealed"
    pool = ExperiencePool(ExperienceConfig(embedder="hashing"), HashingEmbedder(64), SealedLog(path, KEY))
    pool.remember(trace("who directed TE_1"))
    pool.remember(trace("when was TE_1 released", indicator="TE -[release_year]-> ANSWER"))
    pool.remember(trace("who wrote TE_1", indicator="TE -[written_by]-> ANSWER"))
    pool.log.close()
    data = path.read_bytes()
    for needle in (b"directed_by", b"TE -[", b"indicator", b"templates", b"release_year", b"person", b"utility"):
        assert needle not in data
    again = ExperiencePool(ExperienceConfig(embedder="hashing"), HashingEmbedder(64), SealedLog(path, KEY))
    assert sorted(r.indicator for r in again.records.values()) == sorted(
        r.indicator for r in pool.records.values())
    again.log.close()
    frames = [i for i in range(len(data)) if data[i:i + 4] == FRAME_MAGIC]
    broken = bytearray(data)
    broken[frames[2] + 60] ^= 1  # the second record
    path.write_bytes(bytes(broken))
    third = ExperiencePool(ExperienceConfig(embedder="hashing"), HashingEmbedder(64), SealedLog(path, KEY))
    assert third.refused == 1 and len(third) == 2
    assert "TE -[release_year]-> ANSWER" not in {r.indicator for r in third.records.values()}
    assert third.compact() == 2
    third.log.close()
    assert len(read_sealed(path, KEY).records) == 2


def test_buffer_keeps_a_newcomer_out_when_every_buffered_record_was_hit_more():
    emb = TableEmbedder({"A": [1, 0], "B": [0, 1], "C": [0.6, 0.8]})
    pool = ExperiencePool(ExperienceConfig(embedder="hashing", buffer=2), emb)
    pool.add_many([record("a", [1, 0], [1, 0]), record("b", [0, 1], [0, 1]), record("c", [0.6, 0.8], [1, 0])])
    for name in ("A", "A", "B", "B"):
        pool.retrieve(name, None, TAG, k=1)
    pool.retrieve("C", None, TAG, k=1)
    assert pool.records["c"].hits == 1 and "c" not in pool.buffer
    assert (pool.buffer["a"], pool.buffer["b"]) == (2, 2)
    pool.prune(2)  # "c" (fewest hits) goes; the buffer forgets nothing it did not hold
    assert set(pool.records) == {"a", "b"} and len(pool.buffer) == 2


def test_buffered_ranking_matches_a_plain_sort_of_index_and_buffer_hits():
    """The vectorised rank (rank, then score, then id; the closest record always kept) against a plain sort."""
    rng = np.random.default_rng(3)
    keys = rng.normal(size=(60, 8))
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    emb = TableEmbedder({f"q{n}": list(rng.normal(size=8)) for n in range(40)})
    emb.dim = 8
    pool = ExperiencePool(ExperienceConfig(embedder="hashing", buffer=12, w_exp=4), emb)
    pool.add_many([record(f"r{n:02d}", list(k), list(k)) for n, k in enumerate(keys)])
    cfg = pool.config
    for n in range(40):
        e_q = np.asarray(emb.embed([f"q{n}"])[0], np.float32)
        query = np.concatenate([e_q, np.zeros_like(e_q)])
        counts = {i: pool.buffer.count(i) for i in pool.records if i in pool.buffer}
        scores = dict(pool.indexes[TAG].search(query, 4))
        scores.update({i: float(pool.indexes[TAG].key_rows([i])[0] @ query) for i in counts})
        top = max(list(counts.values()) + [1])
        expected = sorted(scores, key=lambda i: (-(cfg.lambda_sim * scores[i] + cfg.lambda_hit * counts.get(i, 0) / top),
                                                 -scores[i], i))[:4]
        closest = max(scores, key=scores.__getitem__)
        if closest not in expected:
            expected = expected[:3] + [closest]
        assert [f.record.id for f in pool.retrieve(f"q{n}", None, TAG)] == expected
