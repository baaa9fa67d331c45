"""Every benchmark in bench/ runs end to end on tiny data the test makes, and writes its documented keys.

Timing targets are not checked here (benchmarks report them); crashes, missing keys and wrong
answers are. The MetaQA-reading benchmarks get a hand-made movie KB and question files in the
MetaQA format (through ``$RG_SHARED_DATA``); the others get synthetic questions.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from rg.run.paths import ENV_VAR

KB = """\
Inception|directed_by|Christopher Nolan
Inception|starred_actors|Leonardo DiCaprio
Inception|release_year|2010
Inception|has_genre|Science Fiction
Interstellar|directed_by|Christopher Nolan
Interstellar|starred_actors|Matthew McConaughey
Interstellar|release_year|2014
Interstellar|has_genre|Science Fiction
Titanic|directed_by|James Cameron
Titanic|written_by|James Cameron
Titanic|starred_actors|Leonardo DiCaprio
Titanic|starred_actors|Kate Winslet
Titanic|release_year|1997
Avatar|directed_by|James Cameron
Avatar|release_year|2009
Avatar|has_genre|Science Fiction
The Revenant|starred_actors|Leonardo DiCaprio
The Revenant|directed_by|Alejandro G. Inarritu
"""
QUESTIONS = {
    1: ["who directed [Inception]\tChristopher Nolan", "what films did [Kate Winslet] act in\tTitanic",
        "[Avatar] was released in which year\t2009"],
    2: ["who acted in the films directed by [Christopher Nolan]\tLeonardo DiCaprio|Matthew McConaughey",
        "who directed the films starring [Kate Winslet]\tJames Cameron",
        "which years were the films of [James Cameron] released\t1997|2009"],
    3: ["who directed the films that share actors with [Inception]\tJames Cameron|Alejandro G. Inarritu",
        "which genres do films by the director of [Titanic] have\tScience Fiction",
        "who starred in films sharing a genre with [Avatar]\tLeonardo DiCaprio|Matthew McConaughey"],
}


@pytest.fixture
def tiny_metaqa(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A shared-data folder holding a hand-made 18-triple movie KB and 3 questions per hop file."""
    folder = tmp_path / "shared" / "metaqa"
    folder.mkdir(parents=True)
    with gzip.open(folder / "kb_reconstructed.txt.gz", "wt") as f:
        f.write(KB)
    for hops, lines in QUESTIONS.items():
        with gzip.open(folder / f"qa_test_{hops}hop.txt.gz", "wt") as f:
            f.write("\n".join(lines) + "\n")
    monkeypatch.setenv(ENV_VAR, str(folder.parent))
    return folder.parent


def synthetic_samples(n: int) -> list:
    """The first ``n`` synthetic questions with subgraphs (as ``bench.planner`` builds them)."""
    from bench.planner import synthetic_samples as build

    return build(max(n, 10), seed=0)[:n]


def lookup(report: Any, dotted: str) -> list[Any]:
    """The values at ``dotted`` (``*`` matches every key or list item); fails if a step is missing."""
    values = [report]
    for step in dotted.split("."):
        found = []
        for value in values:
            if step == "*":
                assert isinstance(value, (dict, list)) and value, f"{dotted}: nothing under {step!r}"
                found.extend(value.values() if isinstance(value, dict) else value)
            else:
                assert isinstance(value, dict) and step in value, f"key {dotted!r} missing at {step!r}"
                found.append(value[step])
        values = found
    return values


def check_keys(path: Path, keys: list[str]) -> dict[str, Any]:
    """Read a bench's JSON and check that every documented key is there."""
    report = json.loads(path.read_text())
    for key in keys:
        lookup(report, key)
    return report


def test_graph_ops_smoke(tiny_metaqa: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from bench import graph_ops

    out = tmp_path / "graph_ops.json"
    graph_ops.main(["--questions", "3", "--answers", "2", "--out", str(out)])
    report = check_keys(out, [
        "speedup_khop", "speedup_shortest_paths", "identical", "questions", "pairs", "baseline", "seed",
        "quick", "questions_per_hop", "max_answers_per_question", "build_seconds.rg", "graph.triples",
        "khop.by_hop.*.rg_ms_per_query", "khop.by_hop.*.networkx_ms_per_query", "khop.by_hop.*.speedup",
        "khop.by_hop.*.mean_subgraph_triples", "khop.by_hop.*.largest_result", "khop.by_hop.*.empty_results",
        "khop.all.speedup", "shortest_paths.by_hop.*.mixed.mean_paths", "shortest_paths.by_hop.*.all.speedup",
        "shortest_paths.by_mode.q->a.speedup", "shortest_paths.by_mode.a->q.speedup",
        "shortest_paths.by_mode.mixed.speedup", "shortest_paths.all.queries", "shortest_paths.path_limit",
        "shortest_paths.pairs_over_path_limit", "skipped.topic_not_in_kg", "comparisons", "mismatches",
        "mismatch_examples", "versions", "cpus", "timing", "wall_seconds",
    ])
    assert report["questions"] == 9 and report["pairs"] == 13
    assert report["identical"] and report["mismatches"] == 0 and report["comparisons"] == 9 + 3 * 13
    assert report["khop"]["by_hop"]["1"]["largest_result"] == 4  # Inception: its four triples
    assert "graph_ops: khop" in capsys.readouterr().out


def test_subgraph_cap_smoke(tiny_metaqa: Path, tmp_path: Path) -> None:
    from bench import subgraph_cap

    out = tmp_path / "subgraph_cap.json"
    assert subgraph_cap.main(["--questions", "3", "--caps", "2,8", "--out", str(out)]) == 0
    cells = [f"hops.*.by_cut.{cut}.{cap}.{key}" for cut in ("walk", "scramble") for cap in ("2", "8", "None")
             for key in ("coverage", "coverage_retained", "path_reach", "mean_triples", "p90_triples",
                         "truncated_share")]
    report = check_keys(out, ["baseline", "seed", "quick", "seconds", "hops.1.questions", *cells])
    assert out.with_suffix(".png").stat().st_size > 0
    uncapped = report["hops"]["1"]["by_cut"]["walk"]["None"]
    assert uncapped["coverage"] == 1.0 and uncapped["truncated_share"] == 0.0
    assert report["hops"]["3"]["by_cut"]["walk"]["2"]["mean_triples"] <= 2


def test_graph_scale_smoke(tmp_path: Path) -> None:
    from bench import graph_scale

    out = tmp_path / "graph_scale.json"
    assert graph_scale.main(["--triples", "4000", "--queries", "5", "--out", str(out)]) == 0
    report = check_keys(out, [
        "triples", "baseline", "memory_ratio", "rg_bytes_per_triple", "build_speedup", "rg_build_s",
        "rg_build_mb", "rg_build_peak_mb", "networkx_build_s", "networkx_build_mb", "networkx_build_peak_mb",
        "khop_ms", "mean_khop_triples", "shortest_paths_ms", "pairs_connected",
    ])
    assert report["triples"] == 4000 and 0.0 <= report["pairs_connected"] <= 1.0


def test_evidence_smoke(tmp_path: Path) -> None:
    from bench import evidence
    from rg.data.rog import write_rog_parquet

    samples = synthetic_samples(12)
    for i, name in enumerate(evidence.HOP_SETS):
        write_rog_parquet(samples[4 * i : 4 * i + 4], tmp_path / "in" / name / "part-00000.parquet")
    out = tmp_path / "evidence.json"
    assert evidence.main(["--input", str(tmp_path / "in"), "--questions", "4", "--ks", "5,20,50",
                          "--repeat", "1", "--out", str(out)]) == 0
    report = check_keys(out, [
        "baseline", "ranker", "ks", "triples_in.5", "chains_out.50", "compression.20", "chains_per_ms.5",
        "triples_per_ms.5", "ms_per_question.5", "growth.*.triples_growth", "growth.*.chains_growth",
        "growth.*.elasticity", "growth.*.sublinear", "sublinear", "all.*.mean.walks",
        "all.*.mean.triples_chained", "all.*.mean.unanchored", "all.*.mean.groups", "all.*.walk_sources",
        "all.*.answers_in_triples", "all.*.answers_at_anchored_ends", "by_hop.*.mean_subgraph_triples",
        "by_hop.*.bad_rows", "by_hop.*.by_k.*.compression", "read_seconds", "wall_seconds",
    ])
    assert report["all"]["5"]["questions"] == 12 and report["all"]["5"]["walk_sources"] == {"bfs": 12}
    assert len(report["growth"]) == 3


def test_evidence_missing_input_names_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from bench import evidence

    assert evidence.main(["--input", str(tmp_path), "--out", str(tmp_path / "e.json")]) == 2
    assert "jobs.build_subgraphs" in capsys.readouterr().err


def test_planner_smoke(tmp_path: Path) -> None:
    from bench import planner

    out = tmp_path / "planner.json"
    assert planner.main(["--questions", "30", "--epochs", "1", "--repeats", "1", "--out", str(out)]) == 0
    report = check_keys(out, [
        "baseline", "quick", "test_questions", "timed_passes", "training.epochs", "training.best_epoch",
        "settings.*.questions_per_s", "settings.*.cpu_seconds", "settings.*.groundable_fraction",
        "settings.*.malformed_fraction", "settings.*.path_exact_match", "settings.*.answer_recall",
        "speed_ratio_constrained_over_unconstrained.k=1", "speed_ratio_constrained_over_unconstrained.k=10",
        "versions", "cpus", "torch_threads", "load_average_before_after", "wall_seconds",
    ])
    assert {(s["mode"], s["beam_width"]) for s in report["settings"]} == {
        (mode, k) for mode in ("constrained", "unconstrained") for k in planner.BEAM_WIDTHS
    }
    constrained = [s for s in report["settings"] if s["mode"] == "constrained"]
    assert all(s["groundable_fraction"] == 1.0 for s in constrained if s["paths_per_question"] > 0)


def test_planner_decode_smoke(tmp_path: Path) -> None:
    """This checkout as its own baseline: the comparison machinery must find the same beams everywhere."""
    from bench import planner_decode

    out = tmp_path / "planner_decode.json"
    checkout = Path(planner_decode.__file__).resolve().parents[1]
    assert planner_decode.main(["--baseline", str(checkout), "--questions", "6", "--bases", "tiny",
                                "--out", str(out)]) == 0
    report = check_keys(out, [
        "baseline", "baseline_commit", "candidate", "questions", "transformers", "machine.cpu_model",
        "machine.cpu_flags.avx2", "machine.cores", "machine.torch_threads", "machine.load_1min", "machine.commit",
        "load_1min_after", "wall_seconds", "bases.tiny.rows.*.same_beams", "bases.tiny.rows.*.generate_higher_total_score",
        "bases.tiny.rows.*.baseline_questions_per_s", "bases.tiny.rows.*.generate_questions_per_s",
        "bases.tiny.rows.*.generate_vs_baseline", "bases.tiny.rows.*.generate_vs_baseline_cpu",
    ])
    greedy, beams = report["bases"]["tiny"]["rows"]
    assert (greedy["k"], beams["k"]) == (1, 5)
    assert greedy["same_beams"] == beams["same_beams"] == report["questions"]  # the same search on both sides


def test_planner_decode_quality_rows(tmp_path: Path) -> None:
    """The paths-and-Hits@1 part on a tiny untrained planner: both sides score the same paths the same way."""
    from bench import planner_decode
    from bench.planner import synthetic_samples
    from rg.retrievers.planner import beam_search

    samples = synthetic_samples(12, 3)[:4]
    planner_dir = planner_decode.build_planner("tiny", samples).save(tmp_path / "planner")
    rows = planner_decode.quality(planner_dir, samples, beam_search)
    assert [(r["mode"], r["k"]) for r in rows] == [(m, k) for m in planner_decode.MODES for k in planner_decode.BEAM_WIDTHS]
    for row in rows:
        assert row["same_paths"] == row["questions"] == 4 and row["hits1_generate_minus_baseline"] == 0
        assert {key: v for key, v in row["baseline"].items() if key != "seconds"} == \
            {key: v for key, v in row["generate"].items() if key != "seconds"}
        if row["mode"] == "constrained":
            assert row["generate"]["groundable_fraction"] == 1.0 and row["generate"]["malformed_fraction"] == 0.0


def test_dualtower_smoke(tmp_path: Path) -> None:
    from bench import dualtower

    out = tmp_path / "dualtower.json"
    argv = ["--questions", "4", "--train", "30", "--epochs", "1", "--llm-questions", "1", "--multi-topic", "2",
            "--resolve-clusters", "all", "--out", str(out)]
    assert dualtower.main(argv) == 0
    report = check_keys(out, [
        "hits1_plaintext", "hits1_privacy", "hits1_utility", "hits1_privacy_sanitised", "brain_calls_per_question",
        "questions_per_s", "modes.*.seconds_per_question_by_stage", "anchors", "llm_brain_tokens.per_question",
    ])
    assert [m["mode"] for m in report["modes"]] == list(dualtower.MODES)
    assert (report["similarity"], report["resolve_clusters"]) == ("lexical", "all")
    assert all(m["questions"] == 4 and m["questions_with_faults"] == 0 and m["faults_by_kind"] == {}
               for m in report["modes"])
    assert report["llm_brain_tokens"]["per_question"]["brain"]["prompt_tokens"] > 0
    several = report["multi_topic"]
    assert several["questions"] == 2
    for kind in ("joint", "separate"):
        assert set(several[kind]) == {"hits1", "f1", "answered", "answers_per_question", "brain_calls_per_question"}
        assert all(0 <= several[kind][k] <= 1 for k in ("hits1", "f1", "answered"))


def test_retriever_smoke(tmp_path: Path) -> None:
    from bench import retriever
    from rg.data.rog import write_rog_parquet

    write_rog_parquet(synthetic_samples(6), tmp_path / "shards" / "part-00000.parquet")
    out = tmp_path / "retriever.json"
    argv = ["--input", str(tmp_path / "shards"), "--questions", "6", "--batch", "3", "--repeat", "1",
            "--cache-dir", str(tmp_path / "cache"), "--no-train", "--out", str(out)]
    assert retriever.main(argv) == 0
    report = check_keys(out, [
        "scoring_triples_per_s", "per_question_loop_triples_per_s", "batched_speedup",
        "per_question_rg_forward_triples_per_s", "batching_speedup", "mlp_gflops", "matmul_peak_gflops",
        "mlp_share_of_peak", "features_s", "mlp_only_gflops", "mlp_only_share_of_peak", "reference_mlp_gflops",
        "reference_share_of_peak", "torch_blocks_forward_s", "fused_forward_speedup",
        "scoring_kernel.per_triple_half", "walk_scoring_triples_per_s", "walk_cost_ratio",
    ])
    assert report["questions"] == 6 and "train_speedup_2_workers" not in report


@pytest.mark.heavy_smoke  # 87 s on 2 cores: CI's second step
def test_retriever_one_worker_training_smoke(tmp_path: Path, ray_local) -> None:
    """The Ray Train part of bench.retriever with its one-worker baseline alone (``--workers 1``): one
    TorchTrainer run of one epoch on 4 synthetic questions; no ratio is written without the 2-worker run."""
    from bench import retriever
    from rg.data.rog import write_rog_parquet

    write_rog_parquet(synthetic_samples(4), tmp_path / "shards" / "part-00000.parquet")
    out = tmp_path / "retriever.json"
    argv = ["--input", str(tmp_path / "shards"), "--questions", "4", "--batch", "2", "--repeat", "1",
            "--epochs", "1", "--train-batch", "2", "--workers", "1", "--cache-dir", str(tmp_path / "cache"),
            "--out", str(out)]
    assert retriever.main(argv) == 0
    report = check_keys(out, ["train_batching", "by_workers.*.train_seconds", "by_workers.*.train_questions",
                              "machine.command", "machine.wall_seconds"])
    assert [w["workers"] for w in report["by_workers"]] == [1] and report["by_workers"][0]["train_questions"] > 0
    assert "train_speedup_2_workers" not in report


@pytest.mark.slow
def test_retriever_training_smoke(tmp_path: Path, ray_local) -> None:
    """The Ray Train scaling part of bench.retriever (two TorchTrainer runs: slow on 2 cores)."""
    from bench import retriever
    from rg.data.rog import write_rog_parquet

    write_rog_parquet(synthetic_samples(8), tmp_path / "shards" / "part-00000.parquet")
    out = tmp_path / "retriever.json"
    argv = ["--input", str(tmp_path / "shards"), "--questions", "8", "--batch", "4", "--repeat", "1",
            "--epochs", "1", "--train-batch", "2", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
    assert retriever.main(argv) == 0
    report = check_keys(out, [
        "train_speedup_2_workers", "train_speedup_2_workers_after_first_epoch", "epoch_speedup_2_workers",
        "wall_speedup_2_workers", "train_batching", "by_workers.*.train_seconds", "by_workers.*.train_questions",
    ])
    assert [w["workers"] for w in report["by_workers"]] == [1, 2]


@pytest.mark.heavy_smoke  # 40 s on 2 cores: CI's second step
def test_serve_smoke(tmp_path: Path, ray_local) -> None:
    """bench.serve on 2 questions at one client, a burst at the Hand's capacity, no load step and no Brain
    batching: the overhead is a share of the in-process question time measured in the same run."""
    from bench.serve import run

    out = tmp_path / "serve.json"
    report = run(requests=2, levels=[1], overload_factor=1, out=out, batching_requests=0, paired_questions=2)
    check_keys(out, ["overhead_share_of_question", "overhead_p50_ms", "in_process_p50_ms", "serve_p50_ms_paired",
                     "load.*.throughput_rps", "overload.status", "machine.cpu_model", "machine.load_1min_after"])
    assert report["in_process_p50_ms"] > 0 and report["step"] is None and report["brain_batching"] is None
    share = (report["serve_p50_ms_paired"] - report["in_process_p50_ms"]) / report["in_process_p50_ms"]
    assert abs(report["overhead_share_of_question"] - share) < 0.01  # the rounded p50s differ by < 0.05 ms
    assert [row["status"] for row in report["load"]] == [{"200": 2}]
    assert set(report["overload"]["status"]) <= {"200", "503"} and report["lost_accepted_requests"] == 0


def test_memory_smoke(tmp_path: Path) -> None:
    """bench.memory at toy sizes: 300 records (flat index, so the pool finds the exact search's nearest record
    every time), 3 sealed writes, one replay size, three rounds of 4 questions with a one-epoch planner."""
    from bench import memory

    out = tmp_path / "memory.json"
    argv = ["--sizes", "300", "--queries", "10", "--remembered", "3", "--replay-sizes", "50", "--questions", "4",
            "--train", "30", "--epochs", "1", "--out", str(out)]
    assert memory.main(argv) == 0
    report = check_keys(out, [
        "retrieval_over_exact_p50_100k", "retrieval_p50_ms_100k", "retrieval_exact_p50_ms_100k",
        "retrieval_p50_ms_100k_note", "retrieval.300.over_exact_p50", "retrieval.300.recall_exact_top1",
        "writes.remember_per_s", "replay.by_subgraph_triples.50.seconds_per_question", "hits1_round1", "hits1_round3",
        "brain_calls_per_question_round3", "token_reduction_round3", "rounds.local_brain", "machine.commit",
    ])
    row = report["retrieval"]["300"]
    assert row["index"] == "flat" and row["recall_exact_top1"] == 1.0 and row["queries"] == 10
    assert report["retrieval_over_exact_p50_100k"] == row["p50_ms"] / row["exact_p50_ms"]
    assert report["retrieval_largest"] == 300 and "not 100k" in report["retrieval_p50_ms_100k_note"]
    assert report["writes"]["remembered"] == 3 and len(report["rounds"]["local_brain"]) == 4  # 3 rounds + self-correction


def test_refine_smoke(tmp_path: Path, ray_local) -> None:
    from bench import refine

    out = tmp_path / "refine.json"
    argv = ["--pools", "2", "--waves", "1", "--concurrency", "2", "--latency", "0.05", "--out", str(out)]
    assert refine.main(argv) == 0
    report = check_keys(out, [
        "baseline", "quick", "min_efficiency", "load_average_before_after", "by_pool.*.throughput_qps", "by_pool.*.ideal_qps",
        "by_pool.*.efficiency", "by_pool.*.job_wall_s", "by_pool.*.llm_calls", "by_pool.*.questions",
        "by_pool.*.refined",
    ])
    assert [(r["pool_size"], r["questions"], r["llm_calls"]) for r in report["by_pool"]] == [(2, 4, 4)]
    assert all(r["refined"] == r["questions"] for r in report["by_pool"])


@pytest.mark.heavy_smoke  # 28 s on 2 cores: CI's second step
def test_models_server_smoke(tmp_path: Path, ray_local) -> None:
    """bench.models: the LLM server with and without batching, 2 clients, a few tokens."""
    from bench import models
    from rg.models import REGISTRY, ModelNotAvailableError

    try:
        REGISTRY["smollm2-135m"].locate()
    except ModelNotAvailableError as err:
        pytest.skip(str(err))
    out = tmp_path / "models.json"
    assert models.main(["--clients", "2", "--rounds", "1", "--max-tokens", "4", "--out", str(out)]) == 0
    report = check_keys(out, ["server_batching_speedup_2", "server.batched", "server.unbatched", "baseline",
                              "machine.cpu_flags.avx2", "machine.load_1min_before", "machine.load_1min_after"])
    assert set(report) <= {"bench", "quick", "baseline", "server_start_s", "server", "server_max_tokens",
                           "server_rounds", "server_batching_speedup_2", "machine"}  # the server's keys alone
    for run in (*report["server"]["batched"], *report["server"]["unbatched"]):
        assert run["requests"] == 2 and 2 <= run["completion_tokens"] <= 8 and run["tokens_per_s"] > 0


def test_planner_bases_split_keeps_paraphrase_wordings_out_of_training() -> None:
    """Questions in a held-out wording are dropped; every test question with a held-out wording in
    its family is reworded in one (same topic, same answers); the family's path becomes the gold path."""
    from bench.planner_bases import held_out_wordings, split_by_wording
    from rg.data.paraphrase import Family, TemplateBank
    from rg.data.sample import Sample

    bank = TemplateBank([Family("director", (("directed_by",),), ("who directed {0}", "{0} was directed by whom",
                                                                   "who is the director of {0}")),
                         Family("year", (("release_year",),), ("when was {0} released",))])
    assert held_out_wordings(bank, 2) == {"{0} was directed by whom"}
    assert held_out_wordings(bank, 1) == {"{0} was directed by whom", "who is the director of {0}"}
    films = ["Heat", "Alien", "Brazil", "Ronin", "Fargo", "Gattaca"]
    samples = [Sample(f"q{i}", f"who directed {f}", ("X",), (f,), ("X",), ((f, "directed_by", "X"),))
               for i, f in enumerate(films)]
    samples += [Sample("q6", "Ran was directed by whom", ("K",), ("Ran",), ("K",), (("Ran", "directed_by", "K"),)),
                Sample("q7", "when was Heat released", ("1995",), ("Heat",), ("1995",), ()),
                Sample("q8", "who acted in Heat", ("P",), ("Heat",), ("P",), ())]
    split = split_by_wording(samples, bank, held_out_wordings(bank, 2), 0.5, seed=0)
    assert (split.unmatched, split.held_out_questions) == (1, 1)
    assert len(split.train) + len(split.test) == 7 and split.test
    assert {s.id for s in split.train}.isdisjoint(s.id for s in split.test)
    assert all(s.relation_paths == (("directed_by",),) for s in split.train + split.test if s.id != "q7")
    directed = [s for s in split.test if s.id != "q7"]
    assert [p.id for p in split.paraphrased] == [f"{s.id}~p" for s in directed]
    assert [p.question for p in split.paraphrased] == [f"{s.q_entities[0]} was directed by whom" for s in directed]
    assert [p.answers for p in split.paraphrased] == [s.answers for s in directed]


def planner_bases_quick(tmp_path: Path, bases: str) -> dict[str, Any]:
    from bench import planner_bases

    out = tmp_path / "planner_bases.json"
    assert planner_bases.main(["--quick", "--bases", bases, "--out", str(out)]) == 0
    report = check_keys(out, [
        "baseline", "quick", "seconds_by_dataset.synthetic", "planner.datasets.synthetic.train_questions",
        "machine.commit", "machine.wall_seconds",
        *(f"planner.datasets.synthetic.{b}.{key}" for b in bases.split(",") for key in (
            "training.seconds_per_epoch", "seen.path_exact_match", "paraphrase.hits1")),
    ])
    assert report["quick"] is True and set(report["planner"]["datasets"]) == {"synthetic"}  # --quick: no MetaQA
    synthetic = report["planner"]["datasets"]["synthetic"]
    assert synthetic["test_questions"] == synthetic["paraphrase_questions"] == 6
    for base in bases.split(","):
        for part in ("seen", "paraphrase"):
            assert synthetic[base][part]["questions"] == 6 and synthetic[base][part]["failures"] == 0
        for key in (f"planner_hits1_paraphrase_{base}", f"planner_hits1_seen_{base}",
                    f"planner_exact_match_paraphrase_{base}", f"planner_hits1_paraphrase_{base}_synthetic"):
            assert 0.0 <= report[key] <= 1.0, key
        assert report[f"planner_seconds_per_epoch_{base}_synthetic"] > 0
    return report


def test_planner_bases_tiny_smoke(tmp_path: Path) -> None:
    """bench.planner_bases --quick --bases tiny: the tiny planner on a few synthetic questions, seen and paraphrased."""
    report = planner_bases_quick(tmp_path, "tiny")
    assert set(report["planner"]["bases"]) == {"tiny"} and "planner_hits1_paraphrase_pretrained" not in report
    assert report["planner"]["datasets"]["synthetic"]["tiny"]["training"]["epochs"] == 2


@pytest.mark.slow
def test_planner_bases_quick_smoke(tmp_path: Path) -> None:
    """bench.planner_bases --quick: both bases (SmolLM2-135M for one optimiser step)."""
    from rg.models import REGISTRY, ModelNotAvailableError

    try:
        REGISTRY["smollm2-135m"].locate()
    except ModelNotAvailableError as err:
        pytest.skip(str(err))
    report = planner_bases_quick(tmp_path, "tiny,pretrained")
    assert report["planner"]["datasets"]["synthetic"]["pretrained"]["training"]["epochs"] == 1


def test_privacy_smoke(tiny_metaqa: Path, tmp_path: Path) -> None:
    from bench import privacy

    out = tmp_path / "privacy.json"
    argv = ["--kb", "@shared/metaqa/kb_reconstructed.txt.gz", "--questions-file", "@shared/metaqa/qa_test_2hop.txt.gz",
            "--questions", "3", "--payloads", "10", "--payload-chars", "512", "--raw-strings", "100",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
    assert privacy.main(argv) == 0
    report = check_keys(out, [
        "guard_speedup_vs_naive", "privacy_share_of_question_time", "identical_verdicts", "guard_payloads_per_s",
        "naive_payloads_per_s", "ms_per_question.extract", "ms_per_question.retrieve", "ms_per_question.privacy",
        "ms_per_question.privacy_expose", "ms_per_question.privacy_mask", "ms_per_question.privacy_guard",
    ])
    assert report["dataset"] == "metaqa 2-hop test" and report["questions"] == 3
    assert report["identical_verdicts"] is True and report["planted"] == 5  # every second request carries a name


def test_sparql_smoke(tiny_metaqa: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """bench.sparql on the hand-made KB: its own Virtuoso, 3 questions per hop, all identical."""
    import shutil

    from bench import sparql

    if shutil.which("virtuoso-t") is None:
        pytest.skip("virtuoso-t not installed: apt-get install -y virtuoso-opensource")
    out = tmp_path / "sparql.json"
    assert sparql.main(["--questions", "3", "--per-entity", "2", "--out", str(out)]) == 0
    report = check_keys(out, [
        "batching_speedup", "vs_memory_ratio", "identical", "khop2.questions", "khop2.per_entity_questions",
        "khop2.batched_ms_per_question", "khop2.memory_ms_per_question", "comparisons.total",
        "comparisons.mismatches", "comparisons_by_hop.*.comparisons", "graph.triples_in_store", "virtuoso.start_s",
    ])
    assert report["identical"] and report["comparisons"]["mismatches"] == 0
    assert report["khop2"]["questions"] == 9 and report["khop2"]["per_entity_questions"] == 2
    assert report["graph"] == {"entities": 16, "edges": 18, "triples_in_store": 34}
    assert "bench.sparql: 2-hop batching" in capsys.readouterr().out


@pytest.mark.heavy_smoke  # 86 s on 2 cores: CI's second step
def test_driver_memory_smoke(tmp_path: Path) -> None:
    """bench.driver_memory --quick on 12 questions and one Ray Train worker: jobs.train and the floor in child
    processes (their own local Ray)."""
    from bench import driver_memory

    out = tmp_path / "driver_memory.json"
    argv = ["--quick", "--questions", "12", "--set", "num_workers=1", "--out", str(out)]
    assert driver_memory.main(argv) == 0
    report = check_keys(out, ["command", "commit", "rg_path", "driver_peak_rss_mb", "floor_peak_rss_mb",
                              "driver_data_mb", "peak_over_floor", "quick"])
    assert report["quick"] is True and report["rg_path"].startswith(report["checkout"])
    assert report["driver_peak_rss_mb"] >= report["floor_peak_rss_mb"] > 0


@pytest.mark.slow
def test_driver_memory_before_after_smoke(tmp_path: Path) -> None:
    """bench.driver_memory --quick --kind train_planner --before examples_on=driver: the baseline run and the current one."""
    from bench import driver_memory

    out = tmp_path / "driver_memory.json"
    argv = ["--quick", "--kind", "train_planner", "--before", "examples_on=driver", "--out", str(out)]
    assert driver_memory.main(argv) == 0
    report = check_keys(out, ["command", "commit", "floor_peak_rss_mb", "driver_peak_rss_mb", "baseline",
                              "before.driver_peak_rss_mb", "before.driver_data_mb", "before.command",
                              "after.driver_peak_rss_mb", "before_over_after", "data_before_over_after"])
    assert "examples_on=driver" in report["before"]["command"] and "examples_on=driver" not in report["after"]["command"]
    assert report["before"]["driver_peak_rss_mb"] >= report["floor_peak_rss_mb"] > 0


def test_linking_smoke(tiny_metaqa: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from bench import linking

    out = tmp_path / "linking.json"
    report = linking.main(["--quick", "--out", str(out)])
    check_keys(out, [
        "accuracy", "questions_per_s", "index_build_seconds", "index_bytes", "quick", "seed", "questions_per_hop",
        "baseline", "config.dense", "metaqa.index.entries", "metaqa.index.bytes", "metaqa.by_hop.*.accuracy",
        "metaqa.by_hop.*.failures.ambiguous", "metaqa.by_hop.*.failures.not_found", "metaqa.by_hop.*.failures.wrong",
        "metaqa.by_hop.*.topic_not_in_kg", "metaqa.by_hop.*.accuracy_reachable", "metaqa.by_hop.*.questions_per_s",
        "metaqa.failures", "webqsp.skipped", "wall_seconds",
    ])
    assert report["metaqa"]["questions"] == 9 and report["accuracy"] == 1.0
    assert report["metaqa"]["index"]["entries"] == 16  # the 16 entities of the 18-triple KB
    assert "linking: MetaQA accuracy 1.000" in capsys.readouterr().out


@pytest.mark.heavy_smoke  # 22 s on 2 cores: CI's second step
def test_reader_tuned_quick_smoke(tmp_path: Path) -> None:
    """bench.reader_tuned --quick: tuned (SmolLM2-135M + LoRA, one epoch in process) vs retriever_scores reader on
    a tiny synthetic set; the file holds this run's keys alone."""
    from bench import reader_tuned
    from rg.models import REGISTRY, ModelNotAvailableError

    try:
        REGISTRY["smollm2-135m"].locate()
    except ModelNotAvailableError as err:
        pytest.skip(str(err))
    out = tmp_path / "reader_tuned.json"
    assert reader_tuned.main(["--quick", "--reader-work", str(tmp_path / "work"), "--out", str(out)]) == 0
    report = check_keys(out, ["reader_hits1_demo", "reader_hits1_demo_retriever_scores", "reader_demo_source",
                              "reader_quick_run.ceiling.gold_in_shown_lines", "baseline", "machine.wall_seconds"])
    assert report["reader_demo_source"].startswith("quick:") and report["quick"] is True
    run = report["reader_quick_run"]
    assert run["tuned"]["reader"] == "tuned:smollm2-135m+lora" and run["retriever_scores"]["reader"] == "retriever_scores"
    assert run["tuned"]["hits1"] == report["reader_hits1_demo"]
    assert run["tuned"]["n_per_hop"] == run["retriever_scores"]["n_per_hop"] == run["ceiling"]["n"]  # same questions
    for hop, share in run["ceiling"]["gold_in_shown_lines"].items():
        assert 0.0 <= run["tuned"]["hit_per_hop"][hop] <= share <= run["ceiling"]["gold_in_evidence"][hop] <= 1.0
    assert "reader_hits1_metaqa" not in report  # --quick reads no MetaQA


def test_models_reader_keys_from_a_demo_run(tmp_path: Path) -> None:
    """--demo reads the pipeline's qa/tuned and qa/chains Hits@1; MetaQA per-hop keys come from the comparison."""
    from bench.reader_tuned import demo_figures, reader_keys

    for stage, reader, hits1 in (("tuned", "tuned:smollm2-135m+lora", 0.2), ("chains", "retriever_scores", 0.075)):
        (tmp_path / "qa" / stage).mkdir(parents=True)
        (tmp_path / "qa" / stage / "qa.json").write_text(json.dumps(
            {"run": {"reader": reader}, "summary": {"overall": {"hits_at_1": hits1, "n": 40}}}))
    demo = demo_figures(tmp_path)
    assert demo == {"tuned": {"reader": "tuned:smollm2-135m+lora", "hits1": 0.2, "n": 40},
                    "chains": {"reader": "retriever_scores", "hits1": 0.075, "n": 40}}
    metaqa = {"tuned": {"hits1_per_hop": {"1": 0.9, "2": 0.5}}, "retriever_scores": {"hits1_per_hop": {"1": 0.5, "2": 0.0}},
              "ceiling": {"gold_in_shown_lines": {"1": 0.95, "2": 0.6}}}
    keys = reader_keys(metaqa, demo, "demo pipeline outputs", None)
    assert keys["reader_hits1_metaqa"] == {"1": 0.9, "2": 0.5}
    assert keys["reader_hits1_metaqa_retriever_scores"] == {"1": 0.5, "2": 0.0}
    assert keys["reader_gold_in_shown_lines_metaqa"] == {"1": 0.95, "2": 0.6}
    assert (keys["reader_hits1_demo"], keys["reader_hits1_demo_retriever_scores"]) == (0.2, 0.075)
    with pytest.raises(FileNotFoundError, match="qa/tuned/qa.json"):
        demo_figures(tmp_path / "nothing")


def test_reader_tuned_needs_data(tmp_path: Path) -> None:
    from bench import reader_tuned

    with pytest.raises(SystemExit):
        reader_tuned.main(["--out", str(tmp_path / "reader_tuned.json")])
    assert not (tmp_path / "reader_tuned.json").exists()


def test_dualtower_metaqa_flags_name_what_is_missing(tmp_path: Path, capsys) -> None:
    from bench import dualtower

    with pytest.raises(SystemExit):
        dualtower.main(["--metaqa-subgraphs", str(tmp_path), "--metaqa-planner", str(tmp_path)])
    err = capsys.readouterr().err
    assert "--metaqa-privacy-planner" in err and "--metaqa-schema" in err and "--metaqa-planner," not in err


@pytest.mark.heavy_smoke  # 96 s on 2 cores: CI's second step
def test_privacy_stores_smoke(tmp_path: Path, ray_local) -> None:
    """bench.privacy_stores with 3 questions: its own Virtuoso, both served apps, the scripted LLM Brain only."""
    import shutil

    from bench import privacy_stores

    if shutil.which("virtuoso-t") is None:
        pytest.skip("virtuoso-t not installed: apt-get install -y virtuoso-opensource")
    out = tmp_path / "privacy_stores.json"
    assert privacy_stores.main(["--questions", "3", "--planner", str(tmp_path / "absent"), "--out", str(out)]) == 0
    report = check_keys(out, [
        "machine_before.cpu_model", "machine_before.cpu_flags.avx512_bf16", "machine_after.load_1min", "local.skipped",
        "llm.same_answers", "llm.answered.sparql", "llm.p50_ms.memory", "llm.sparql_vs_memory_p50",
        "llm.leaking_bodies.sparql", "llm.exposure_matches.sparql", "seconds",
    ])
    assert report["llm"]["same_answers"] == 3 and report["llm"]["leaking_bodies"] == {"memory": 0, "sparql": 0}
    assert report["llm"]["exposure_matches"] == {"memory": 3, "sparql": 3}


@pytest.mark.heavy_smoke  # 50 s on 2 cores: CI's second step
def test_serve_quality_smoke(tmp_path: Path, ray_local) -> None:
    """bench.serve_quality on 3 synthetic questions (a serve config with a scripted LLM Brain and the local Hand
    reader, pipeline predictions written here), then with ``--metaqa`` on a MetaQA-format KB and question file of the
    hand-made film graph, with a split whose test side holds 2 of its 3 questions."""
    import gzip

    import yaml

    from bench import serve_quality
    from bench.privacy_stores import relation_brain
    from rg.data.synthetic import SyntheticConfig, generate
    from tests.dualtower_world import TRIPLES
    from tests.scripted_server import Respond, Script, ScriptedServer

    kg = generate(SyntheticConfig(seed=0, questions=200))
    kg.write(tmp_path / "demo" / "build" / "dataset")  # the build stage's dataset: the questions' topic names
    questions = kg.questions[:3]
    for stage in ("dualtower", "tuned"):
        folder = tmp_path / "demo" / "qa" / stage
        folder.mkdir(parents=True)
        rows = [{"id": q.id, "question": q.question, "answers": list(q.answers), "gold": list(q.answers)}
                for q in questions]
        (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    metaqa = tmp_path / "metaqa"
    metaqa.mkdir()
    (metaqa / "kb.txt").write_text("".join(f"{h}|{r}|{t}\n" for h, r, t in TRIPLES))
    with gzip.open(metaqa / "qa_test_1hop.txt.gz", "wt") as lines:
        lines.write("who directed [Heat]\tMichael Mann\nwho directed [Casino]\tMartin Scorsese\n"
                    "when was [Top Gun] released\t1986\n")
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"unit": "0-based line index", "splits": {"1hop": {"train": [2], "test": [0, 1]}}}))

    def config(path: Path, kg: dict, brain_url: str) -> Path:
        args = {"kg": kg, "auth": {"mode": "off"}, "linking": {"index_dir": str(path.with_suffix("")), "dense": "off"},
                "dualtower": {"similarity": "lexical", "brain": {"kind": "llm", "llm": {
                    "base_url": brain_url, "model": "scripted", "side": "brain"}}}}
        path.write_text(yaml.safe_dump({"applications": [{"name": "rg", "import_path": "serve.app:build_app",
                                                          "args": args}]}))
        return path

    with ScriptedServer(Script.always(Respond(relation_brain))) as brain:
        demo = config(tmp_path / "serve.yaml", {"synthetic": {"seed": 0, "questions": 200}}, brain.base_url)
        films = config(tmp_path / "serve_metaqa.yaml", {"store": {"kind": "memory", "kb": {
            "path": str(metaqa / "kb.txt"), "format": "metaqa"}}}, brain.base_url)
        out = tmp_path / "serve_quality.json"
        assert serve_quality.main(["--pipeline-dir", str(tmp_path / "demo"), "--config", str(demo), "--metaqa",
                                   "--metaqa-config", str(films), "--metaqa-data", str(metaqa), "--metaqa-split",
                                   str(split), "--out", str(out)]) == 0
    report = check_keys(out, [
        "machine_before.cpu_flags.avx2", "questions", "paraphrased", "pipeline_tuned.hits_at_1",
        "pipeline_dualtower.macro_f1", "served_as_written.hits_at_1", "served_typed.micro_f1",
        "served_paraphrased.hits_at_1", "served_rewritten.macro_f1", "served_as_written_vs_tuned",
        "served_equals_pipeline_dualtower", "seconds_per_question_mean", "p50_ms", "p95_ms", "hits1_demo",
        "macro_f1_demo", "hits1_demo_typed", "hits1_demo_paraphrased", "hits1_demo_rewritten",
        "hits1_metaqa.1hop", "metaqa.1hop.macro_f1", "metaqa.1hop.p50_ms", "metaqa.p95_ms", "machine_after.load_1min",
    ])
    assert report["questions"] == 3 and report["pipeline_tuned"]["hits_at_1"] == 1.0
    assert report["paraphrased"] == 3  # every synthetic template has other wordings
    assert report["metaqa"]["questions"] == {"1hop": 2}  # the test side only


def test_demo_runs_each_checkout_with_its_own_copy_of_the_config(tmp_path: Path) -> None:
    from bench import demo

    assert demo.config_in(tmp_path, demo.ROOT / "configs" / "demo.yaml") == tmp_path / "configs" / "demo.yaml"
    outside = tmp_path / "mine.yaml"
    assert demo.config_in(Path("/elsewhere"), outside) == outside


@pytest.mark.heavy_smoke  # 59 s on 2 cores: CI's second step
def test_demo_smoke_and_a_quiet_console(tmp_path: Path) -> None:
    """bench.demo over a tiny pipeline (build, refine, evaluate and one QA stage on 24 synthetic questions) in a
    child process, as the README runs the main command: every stage timed, and its captured console holds the
    stage table and none of Ray's log lines, ``core_worker`` messages, Python warnings or tracebacks, which are in
    the run's log file instead."""
    import yaml

    from bench import demo

    config = {
        "kind": "pipeline", "output_dir": "replaced-by-the-bench", "split": {"val_fraction": 0.25, "seed": 0},
        "ray": {"num_cpus": 2},
        "build": {"synthetic": {"seed": 1, "questions": 24}, "subgraph": {"max_triples": 300}, "shard_size": 12,
                  "num_actors": 1},
        "refine": {"selector": "similarity", "num_actors": 1, "actor_cpus": 0.5, "batch_size": 12},
        "evaluate": {"ks": [10, 100], "methods": [{"kind": "hop_distance"}]},
        "qa": {"baseline": {"retriever": {"kind": "hop_distance"}, "top_k": 50, "num_actors": 1, "actor_cpus": 0.5,
                            "batch_size": 6},
               "raw": {"retriever": {"kind": "hop_distance"}, "top_k": 50, "chains": False, "num_actors": 1,
                       "actor_cpus": 0.5, "batch_size": 6}},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "demo.json"
    assert demo.main(["--config", str(path), "--out", str(out), "--fresh-models"]) == 0
    report = check_keys(out, [
        "machine.cpu_model", "machine.cpu_flags.avx512_bf16", "machine.load_1min_after", "isa", "run.commit",
        "run.wall_seconds", "run.pipeline_seconds", "run.stages.build.seconds", "run.qa", "run.console_noise_lines",
        "pipeline_over_budget",
    ])
    run = report["run"]
    assert report["fresh_models"] is True  # an empty models cache of its own (no stage here loads a base model)
    assert list(run["stages"]) == ["build", "refine", "evaluate", "qa/baseline", "qa/raw"]
    assert set(run["qa"]["qa/baseline"]) == {"hits_at_1", "macro_f1", "micro_f1"}
    pooled = run["stages"]["qa/raw"]
    assert pooled["pool"] == run["stages"]["qa/baseline"]["pool"] == ["qa/baseline", "qa/raw"]
    assert run["qa_seconds"] == pooled["seconds"]  # the pool counted once
    assert run["console_has_stage_table"] and run["console_noise"] == [] and run["console_noise_lines"] == 0
    assert run["log_noise_lines"] > 0  # Ray's lines went to the run's log file


def test_demo_counts_an_actor_pool_once() -> None:
    from bench.demo import qa_seconds

    stages = {"read": {"seconds": 9.0}, "qa/a": {"seconds": 4.0, "pool": ["qa/a", "qa/b"]},
              "qa/b": {"seconds": 4.0, "pool": ["qa/a", "qa/b"]}, "qa/c": {"seconds": 2.5}}
    assert qa_seconds(stages) == 6.5


def test_read_stage_smoke(tmp_path: Path) -> None:
    """bench.read_stage --quick: a tiny LLaMA with LoRA on its top 2 of 4 layers, steps timed both ways."""
    from bench import read_stage

    out = tmp_path / "read_stage.json"
    assert read_stage.main(["--quick", "--steps", "3", "--out", str(out)]) == 0
    report = check_keys(out, [
        "machine.cpu_flags.avx2", "baseline", "frozen_layers", "full_step_s", "cached_step_s", "cached_over_full",
        "prefix_s_per_example", "projected_train_s_full", "projected_train_s_cached", "padding_share",
        "opening_tokens", "prefix_whole_s", "prefix_opening_over_whole", "prefix_max_abs_diff",
    ])
    assert report["frozen_layers"] == 2 and report["layers"] == 4 and report["timed_steps"] == 3
    assert report["opening_tokens"] == 10 and report["prefix_max_abs_diff"] < 1e-5  # the examples open alike


def test_kg_edits_bench_checks_staleness_against_acknowledged_deletes() -> None:
    from bench.kg_edits import History, p

    history = History({"Casino": {"Nicholas Pileggi"}})
    history.deleted_at[("Casino", "Nicholas Pileggi")] = 10.0
    assert history.stale("Casino", ["Nicholas Pileggi"], sent=11.0)      # asked after the delete's reply
    assert not history.stale("Casino", ["Nicholas Pileggi"], sent=9.0)   # asked before it: not stale
    assert not history.stale("Casino", ["Ann Newwriter"], sent=11.0)
    assert p([3.0, 1.0, 2.0], 0.5) == 2.0 and p([], 0.95) is None


@pytest.mark.slow  # starts a Serve app with five deployments (1-3 min on the shared 2-core machine)
def test_kg_edits_bench_smoke(tmp_path: Path) -> None:
    import json

    from bench.kg_edits import run

    out = tmp_path / "kg_edits.json"
    result = run(seconds=3.0, edit_period_s=0.5, edit_count=8, out=out)
    saved = json.loads(out.read_text())
    for key in ("visible_p95_s", "stale_answers", "lost_edits", "latency_ratio_under_edits", "edits_per_s",
                "machine_before"):
        assert key in saved
    assert result["stale_answers"] == 0 and result["lost_edits"] == 0
