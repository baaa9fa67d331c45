"""Subgraphs cut through a KG store (``kg:`` in the build config): the in-memory store and Virtuoso.

Exact samples on a hand-made graph; a ``kind: sparql`` build equals the ``kind: memory`` build of
the same graph; transient store failures leave questions unfinished (never lost) and the next run
builds them; Virtuoso stopped in the middle of a build, then restarted, loses and doubles nothing.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from rg.config import ConfigError, load_config
from rg.jobs.build_subgraphs import BuildSubgraphsConfig, build_subgraphs, format_report
from rg.data.rog import read_rog
from rg.data.sample import Question
from rg.data.sources import KBSource, load_kb
from rg.subgraphs.store import build_store_sample
from rg.subgraphs import STORE_FAILURES_IN_A_ROW, ShardTask, SubgraphConfig, build_sample, finished_shard, run_shard
from rg.data.synthetic import SyntheticConfig, generate
from rg.graph import KnowledgeGraph
from rg.stores.base import StoreError
from rg.stores.memory import MemoryStore
from rg.stores.ntriples import entity_ids, relabel
from rg.run.ports import free_port, free_ports
from tests.stores_virtuoso import load_graph

TRIPLES = [("Film A", "directed_by", "Ann Lee"), ("Film A", "starred_actors", "Bo Chen"),
           ("Film B", "starred_actors", "Bo Chen"), ("Film B", "release_year", "1999"),
           ("Film C", "directed_by", "Ann Lee")]


def _question(qid: str, topics: tuple[str, ...], answers: tuple[str, ...], hops: int = 1) -> Question:
    return Question(qid, f"question {qid}", answers, topics, hops)


def test_store_sample_equals_the_engine_sample_on_a_tiny_graph():
    kg = KnowledgeGraph.from_triples(TRIPLES)
    store = MemoryStore(kg)
    config = SubgraphConfig()
    q = _question("q1", ("Bo Chen",), ("Film A", "Film B", "Film Q"), hops=2)
    engine, via_store = build_sample(kg, q, config), build_store_sample(store, q, config)
    assert sorted(engine.sample.triples) == list(via_store.sample.triples) == sorted(TRIPLES[:4])
    assert via_store.sample.a_entities == engine.sample.a_entities == ("Film A", "Film B")
    assert (via_store.covered, via_store.covered_uncapped, via_store.truncated) == (False, False, False)
    capped = build_store_sample(store, _question("q2", ("Ann Lee",), ("Bo Chen",), hops=2),
                                SubgraphConfig(max_triples=2))
    assert capped.sample.triples == (("Film A", "directed_by", "Ann Lee"), ("Film C", "directed_by", "Ann Lee"))
    assert (capped.truncated, capped.covered, capped.covered_uncapped) == (True, False, True)


class _FailingStore(MemoryStore):
    """A memory store whose k-hop fails like a stopped server for the questions named in ``down``."""

    def __init__(self, kg: KnowledgeGraph, down: set[str]) -> None:
        super().__init__(kg)
        self.down = down
        self.asked: list[str] = []

    def k_hop(self, seeds, hops, max_triples=None, direction="both", cut="walk"):
        self.asked.append(seeds[0])
        if seeds[0] in self.down:
            raise StoreError("unreachable", "connection refused")
        return super().k_hop(seeds, hops, max_triples, direction, cut)


def test_transient_failures_leave_the_shard_unfinished_and_the_rerun_builds_it(tmp_path):
    kg = KnowledgeGraph.from_triples(TRIPLES)
    items = tuple(_question(f"q{i}", (t,), ("Film A",)) for i, t in enumerate(["Ann Lee", "Bo Chen", "Film B"]))
    task = ShardTask("s", 0, str(tmp_path / "s" / "shard-00000.parquet"), items)
    stats = run_shard(_FailingStore(kg, {"Bo Chen"}), task, SubgraphConfig())
    assert (stats.lines, stats.built, stats.unfinished, stats.bad) == (3, 2, 1, {"store_unreachable": 1})
    parquet = Path(task.parquet_path)
    trusted, reason = finished_shard(parquet, parquet.with_suffix(".stats.json"))
    assert trusted is None and reason.startswith("1 questions were not built on store errors (store_unreachable × 1)")
    again = run_shard(_FailingStore(kg, set()), task, SubgraphConfig())
    assert (again.built, again.unfinished, again.bad) == (3, 0, {})
    assert finished_shard(parquet, parquet.with_suffix(".stats.json"))[0] == again
    assert [s.id for s in read_rog(parquet)] == ["q0", "q1", "q2"]


def test_a_store_failing_in_a_row_is_not_asked_for_the_rest_of_the_shard(tmp_path):
    kg = KnowledgeGraph.from_triples(TRIPLES)
    items = tuple(_question(f"q{i}", ("Ann Lee",), ("Film A",)) for i in range(STORE_FAILURES_IN_A_ROW + 4))
    store = _FailingStore(kg, {"Ann Lee"})
    stats = run_shard(store, ShardTask("s", 0, str(tmp_path / "shard-00000.parquet"), items), SubgraphConfig())
    assert len(store.asked) == STORE_FAILURES_IN_A_ROW
    assert (stats.built, stats.unfinished, stats.bad) == (0, len(items), {"store_unreachable": len(items)})
    assert "not tried after 3 store failures in a row" in stats.bad_examples[-1]


def test_a_permanent_store_error_is_a_bad_row_not_a_retry(tmp_path):
    class Truncating(MemoryStore):
        def k_hop(self, *args, **kwargs):
            raise StoreError("truncated", "1000000 rows reached max_rows")

    task = ShardTask("s", 0, str(tmp_path / "shard-00000.parquet"), (_question("q0", ("Ann Lee",), ("Film A",)),))
    stats = run_shard(Truncating(KnowledgeGraph.from_triples(TRIPLES)), task, SubgraphConfig())
    assert (stats.unfinished, stats.bad) == (0, {"store_truncated": 1})
    assert finished_shard(Path(task.parquet_path), Path(task.parquet_path).with_suffix(".stats.json"))[0] == stats


def test_kb_and_kg_together_is_a_config_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("output_dir: o\nkb: {path: k, format: tsv}\nkg: {kind: memory, kb: {path: k, format: tsv}}\n"
                    "questions: [{name: a, path: q, format: jsonl}]\n")
    with pytest.raises(ConfigError, match=r"exactly one of `synthetic`, `kb` and `kg`, got \['kb', 'kg'\]"):
        load_config(path, BuildSubgraphsConfig)
    path.write_text("output_dir: o\nkg: {kind: sparql, endpoint: 127.0.0.1:8890}\nquestions: [{name: a, path: q, format: jsonl}]\n")
    with pytest.raises(ConfigError, match=r"kg.*not an http\(s\) URL. Fix: e.g. http://127.0.0.1:8890/sparql"):
        load_config(path, BuildSubgraphsConfig)


# ------------------------------------------------------------------ through Ray, memory and Virtuoso
def _dataset(tmp_path: Path, questions: int) -> tuple[KnowledgeGraph, Path, Path]:
    folder = tmp_path / "dataset"
    generate(SyntheticConfig(questions=questions, seed=3)).write(folder)
    kg, _ = load_kb(KBSource(path=str(folder / "kg.txt"), format="tsv"))
    return kg, folder / "kg.txt", folder / "questions.jsonl"


def _config(out: Path, kg: dict, questions: Path, **extra) -> BuildSubgraphsConfig:
    return BuildSubgraphsConfig.model_validate({
        "output_dir": str(out), "kg": kg, "shard_size": 5, "num_actors": 1, "subgraph": {"max_triples": 40},
        "questions": [{"name": "syn", "path": str(questions), "format": "jsonl"}], **extra})


def _samples(folder: Path) -> dict[str, tuple]:
    return {s.id: (s.q_entities, s.a_entities, tuple(sorted(s.triples))) for s in read_rog(folder)}


def test_sparql_build_equals_memory_build(ray_local, virtuoso, tmp_path):
    kg, kb, questions = _dataset(tmp_path, 30)
    store = load_graph(virtuoso, kg, "http://rg.test/build", tmp_path)
    uncapped = {"subgraph": {"max_triples": None}}
    memory = build_subgraphs(_config(tmp_path / "mem", {"kind": "memory", "kb": {"path": str(kb), "format": "tsv"}},
                                     questions, **uncapped), progress=False)
    sparql = build_subgraphs(_config(tmp_path / "sparql", store.config.model_dump(), questions, **uncapped),
                             progress=False)
    assert memory["kb"]["store"] == "memory" and sparql["kb"]["store"] == "sparql"
    assert sparql["sources"]["syn"] == memory["sources"]["syn"]
    assert _samples(tmp_path / "sparql" / "syn") == _samples(tmp_path / "mem" / "syn")
    assert len(_samples(tmp_path / "mem" / "syn")) == 30
    assert "KG: SPARQL store http://127.0.0.1:" in format_report(sparql)

    # Under a cap the round is cut in the order of triple content, here the store's ids (m.0..):
    # the memory store over the same ids, named like the store, keeps exactly the same triples.
    ids = entity_ids(kg)
    same_ids = MemoryStore(relabel(kg, ids), dict(zip(ids.tolist(), kg.entity_names.tolist())))
    capped = SubgraphConfig(max_triples=40)
    truncated = 0
    for line in questions.read_text().splitlines():
        q = Question.from_record(json.loads(line))
        via_sparql, via_memory = build_store_sample(store, q, capped), build_store_sample(same_ids, q, capped)
        assert via_sparql == via_memory, q.id
        truncated += via_sparql.truncated
    assert truncated >= 10


def test_an_endpoint_that_never_answers_fails_before_any_work(tmp_path, job_line, capsys):
    from jobs import build_subgraphs as job
    from rg.cli import run_job

    _, _, questions = _dataset(tmp_path, 3)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({
        "kind": "build_subgraphs", "output_dir": str(tmp_path / "out"),
        "kg": {"kind": "sparql", "endpoint": f"http://127.0.0.1:{free_port()}/sparql", "max_retries": 1, "backoff_s": 0.01},
        "questions": [{"name": "syn", "path": str(questions), "format": "jsonl"}]}))
    assert run_job("jobs.build_subgraphs", job.main, ["--config", str(cfg), "--no-progress"]) == 2
    line = job_line(capsys.readouterr().err, "jobs.build_subgraphs")
    assert "unreachable: 2 attempts to http://127.0.0.1:" in line
    assert not list((tmp_path / "out").glob("syn/shard-*"))


@pytest.mark.slow  # ~60 s with a real Virtuoso; the transient-failure tests above cover the logic by default
def test_virtuoso_stopped_mid_build_then_restarted_loses_and_doubles_nothing(ray_local, tmp_path):
    from rg.stores.virtuoso import SERVER_BINARY, VirtuosoServer

    if shutil.which(SERVER_BINARY) is None:
        pytest.skip(f"{SERVER_BINARY} not installed: apt-get install -y virtuoso-opensource")
    kg, kb, questions = _dataset(tmp_path, 200)
    server = VirtuosoServer(tmp_path / "db", *free_ports(2))
    server.start(timeout=120)
    try:
        store = load_graph(server, kg, "http://rg.test/fault", tmp_path, max_retries=2, backoff_s=0.05, timeout_s=5)
        cfg = _config(tmp_path / "out", store.config.model_dump(), questions, subgraph={"max_triples": None})
        first_shard = tmp_path / "out" / "syn" / "shard-00000.stats.json"

        def stop_after_first_shard() -> None:
            deadline = time.monotonic() + 600
            while not first_shard.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            server.stop()

        stopper = threading.Thread(target=stop_after_first_shard)
        stopper.start()
        first = build_subgraphs(cfg, progress=False)
        stopper.join()
        s = first["sources"]["syn"]
        failed = {k: n for k, n in s["bad"].items() if k.startswith("store_")}
        assert s["lines"] == s["built"] + s["bad_total"] == 200
        assert first["unfinished"] == sum(failed.values()) > 0 and set(failed) <= {"store_unreachable", "store_timeout"}
        assert 5 <= s["built"] < 200
        assert f"{first['unfinished']:,} questions were not built on store errors" in format_report(first)
        built_before = _samples(tmp_path / "out" / "syn")

        server.start(timeout=120)
        second = build_subgraphs(cfg, progress=False)
        s2 = second["sources"]["syn"]
        assert second["unfinished"] == 0 and (s2["lines"], s2["built"], s2["bad_total"]) == (200, 200, 0)
        assert s2["resumed_lines"] == 200 - 5 * len(second["rebuilt_shards"])
        assert all("not built on store errors" in r["reason"] for r in second["rebuilt_shards"])
        after = _samples(tmp_path / "out" / "syn")
        rows = [x.id for x in read_rog(tmp_path / "out" / "syn")]
        assert len(rows) == len(set(rows)) == 200
        assert all(after[qid] == sample for qid, sample in built_before.items())

        memory = _config(tmp_path / "mem", {"kind": "memory", "kb": {"path": str(kb), "format": "tsv"}}, questions,
                         subgraph={"max_triples": None})
        build_subgraphs(memory, progress=False)
        assert after == _samples(tmp_path / "mem" / "syn")
    finally:
        server.stop()
