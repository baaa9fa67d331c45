"""The memories: experience retrieval latency, write throughput, replay cost, edge bytes, and rounds.

    python -m bench.memory --quick      # writes bench/results/memory_quick.json
    python -m bench.memory [--questions 40] [--train 300] [--epochs 15] [--out PATH]

1. **Experience retrieval** (PrivGemo's pool): p50/p99 of one dual-key lookup (FAISS search of
   the concatenated [e_Q, e_I] keys, buffer merge and ranking; embedding excluded) at 1k and 10k
   records, and 100k in the full run (past ``exact_max`` the index is HNSW). Keys are random unit
   vectors of the sentence encoder's size (384). ``--quick`` stops at 10k and says so
   (``retrieval_largest``).
2. **Write throughput**: traces remembered per second into a sealed pool (AES-GCM + fsync per
   record), and bulk records per second (one fsync).
3. **Replay** (ReMindRAG's edge memory): seconds per question against subgraph size, with a
   fifth of the edges holding vectors; **bytes per stored edge** (vector, in memory, on disk).
4. **Rounds**: the dual-tower controller on the synthetic KG (the set-up of ``bench.dualtower``:
   a tiny relation-path planner as the local Brain) answers the same questions three times with
   the experience pool and the edge memory (hashing embedder: no model), per round: Hits@1, Brain
   calls per question, replay/experience hit rate. The local Brain counts calls but no tokens, so
   tokens per question per side come from the same rounds against the scripted LLM Brain at
   127.0.0.1 (whitespace tokens of the real prompts). ``token_reduction_round3`` is
   1 − brain tokens/question in round 3 over round 1 (ReMindRAG reports −58.8% after three rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from rg.memory import EdgeMemory, EdgeMemoryConfig, ExperienceConfig, ExperiencePool, PoolMemory, SealedLog
from rg.memory.embed import HashingEmbedder
from rg.memory.experience import ExperienceRecord
from rg.reasoning.dualtower.memory import RecalledAnalysis, Trace

KEY = os.urandom(32)  # a throwaway key for the benchmark's temporary files
TAG = "utility|1.0|0"
DIM = 384


class RandomKeys:
    """Unit vectors keyed by text (deterministic per text), the encoder's size."""

    def __init__(self, dim: int = DIM) -> None:
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = np.stack([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=self.dim) for t in texts])
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    rows = rng.normal(size=(n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def synthetic_records(n: int, rng: np.random.Generator) -> list[ExperienceRecord]:
    eq, ei = unit_rows(rng, n, DIM), unit_rows(rng, n, DIM)
    return [ExperienceRecord(id=f"r{i}", indicator=f"TE -[rel_{i % 97}]-> ANSWER", relations=(f"rel_{i % 97}",),
                             depth=1 + i % 3, answer_type=None, trajectory=(("topic", 1),),
                             templates={f"TE_1 → [rel_{i % 97}] → (type)": ((f"rel_{i % 97}",),)}, successes=1,
                             failures=0, warnings=(), privacy=TAG, e_q=eq[i], e_i=ei[i]) for i in range(n)]


def retrieval(sizes: Sequence[int], queries: int, seed: int) -> dict[str, Any]:
    out = {}
    rng = np.random.default_rng(seed)
    for n in sizes:
        pool = ExperiencePool(ExperienceConfig(embedder="hashing"), RandomKeys())
        started = time.perf_counter()
        pool.add_many(synthetic_records(n, rng))
        build = time.perf_counter() - started
        qs, qi = unit_rows(rng, queries, DIM), unit_rows(rng, queries, DIM)
        times = []
        for a, b in zip(qs, qi):
            started = time.perf_counter()
            pool.search(a, b, TAG)
            times.append(time.perf_counter() - started)
        ms = np.asarray(times) * 1000
        out[str(n)] = {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
                       "index": "hnsw" if pool.indexes[TAG].approximate else "flat", "build_s": build,
                       "queries": queries}
    return out


def write_throughput(n: int, folder: Path) -> dict[str, float]:
    emb = HashingEmbedder(256)
    pool = ExperiencePool(ExperienceConfig(embedder="hashing"), emb, SealedLog(folder / "pool.sealed", KEY))
    started = time.perf_counter()
    for i in range(n):
        pool.remember(Trace(question=f"which TE_1 question number {i} asks for rel_{i % 50}",
                            analysis=RecalledAnalysis(f"TE -[rel_{i % 50}]-> ANSWER", (f"rel_{i % 50}",), 1),
                            trajectory=(("topic", 1),), templates=((f"TE_1 → [rel_{i % 50}] → (t)", ((f"rel_{i % 50}",),)),),
                            sufficient=True, warnings=(), privacy=TAG))
    remember_s = time.perf_counter() - started
    pool.log.close()
    bulk = ExperiencePool(ExperienceConfig(embedder="hashing"), RandomKeys(), SealedLog(folder / "bulk.sealed", KEY))
    records = synthetic_records(n * 10, np.random.default_rng(1))
    started = time.perf_counter()
    bulk.add_many(records)
    bulk_s = time.perf_counter() - started
    size = bulk.log.size()
    bulk.log.close()
    return {"remember_per_s": n / remember_s, "remembered": n, "bulk_records_per_s": len(records) / bulk_s,
            "sealed_bytes_per_record": size / len(records)}


def replay_cost(sizes: Sequence[int], folder: Path, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    out: dict[str, Any] = {}
    emb = RandomKeys()
    bytes_per_edge: dict[str, float] = {}
    for n in sizes:
        nodes = [f"n{i}" for i in range(max(n // 3, 2))]
        triples = [(rng.choice(nodes), f"r{rng.randrange(20)}", rng.choice(nodes)) for _ in range(n)]
        log = SealedLog(folder / f"edges_{n}.sealed", KEY)
        mem = EdgeMemory(EdgeMemoryConfig(), emb, log)
        q = mem.query("the benchmark question")
        touched = rng.sample(triples, max(n // 5, 1))
        mem.memorise(q, touched[: len(touched) // 2], [])
        mem.memorise(mem.query("another question"), touched[len(touched) // 2:], [])
        seeds = [triples[0][0]]
        started = time.perf_counter()
        reps = 20
        for _ in range(reps):
            found = mem.replay(triples, seeds, q)
        out[str(n)] = {"seconds_per_question": (time.perf_counter() - started) / reps, "stored_edges": len(mem.vectors),
                       "replayed_edges": len(found.edges)}
        mem.compact()
        bytes_per_edge = mem.bytes_per_edge()
        log.close()
    return {"by_subgraph_triples": out, "bytes_per_edge": bytes_per_edge, "dim": DIM}


def rounds(questions: int, train_n: int, epochs: int, n_rounds: int, seed: int) -> dict[str, Any]:
    from bench.dualtower import hit1, samples, scripted_brain, train
    from tests.scripted_server import Respond, Script, ScriptedServer
    from rg.reasoning.dualtower import DualTowerConfig, build_controller
    from rg.reasoning.dualtower.controller import privacy_tag

    pool_, schema = samples(questions + train_n, seed)
    random.Random(seed).shuffle(pool_)
    test, train_set = pool_[:questions], pool_[questions:]

    def run(controller) -> list[dict[str, Any]]:
        per_round, first_wrong, fixed = [], set(), set()
        for r in range(n_rounds):
            hits = calls = 0
            sources: dict[str, int] = {}
            tokens = {"brain": 0, "hand": 0}
            for sample in test:
                result = controller.answer(sample.question, sample.q_entities, sample.triples)
                ok = hit1(result.answers, sample.answers)
                hits += ok
                if r == 0 and not ok:
                    first_wrong.add(sample.id)
                elif ok and sample.id in first_wrong:
                    fixed.add(sample.id)
                calls += result.brain_calls
                source = str(result.memory.get("analysis"))
                sources[source] = sources.get(source, 0) + 1
                for sides in result.usage.get("stages", {}).values():
                    for side, counts in sides.items():
                        tokens[side] = tokens.get(side, 0) + counts["prompt_tokens"] + counts["completion_tokens"]
            n = len(test)
            per_round.append({"round": r + 1, "hits1": hits / n, "brain_calls_per_question": calls / n,
                              "tokens_per_question": {s: v / n for s, v in tokens.items()},
                              "experience_hit_rate": sources.get("experience", 0) / n,
                              "replay_hit_rate": sources.get("replay", 0) / n, "analysis_sources": sources})
        return [*per_round, {"self_corrected": len(fixed), "wrong_in_round1": len(first_wrong)}]

    def memories():
        emb = HashingEmbedder(256)
        return ExperiencePool(ExperienceConfig(embedder="hashing"), emb), EdgeMemory(EdgeMemoryConfig(), emb)

    config = DualTowerConfig(similarity="lexical", brain={"kind": "local"})
    planner = train(train_set, lambda p: p, epochs)
    pool, edges = memories()
    local = run(build_controller(config, schema, planner=planner, memory=PoolMemory(pool, privacy_tag(config)),
                                 edges=edges))
    baseline = run(build_controller(config, schema, planner=planner))[:1]
    with ScriptedServer(Script.always(Respond(scripted_brain))) as server:
        llm_config = DualTowerConfig(similarity="lexical", brain={"kind": "llm", "llm": {
            "base_url": server.base_url, "model": "scripted", "side": "brain", "backoff_s": 0.0, "max_backoff_s": 0.0}})
        pool, edges = memories()
        llm = run(build_controller(llm_config, schema, memory=PoolMemory(pool, privacy_tag(llm_config)), edges=edges))
    return {"questions": len(test), "train_questions": len(train_set), "local_brain": local,
            "local_brain_no_memory_round1": baseline[0], "scripted_llm_brain": llm}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="Smaller sizes (largest retrieval pool 10k).")
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--train", type=int, default=300)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None,
                        help="JSON path (default bench/results/memory.json, or memory_quick.json with --quick).")
    parser.add_argument("--faiss-threads", type=int, default=1,
                        help="OpenMP threads of FAISS (1: single lookups do not fight a busy machine's other work).")
    args = parser.parse_args(argv)
    faiss.omp_set_num_threads(args.faiss_threads)
    sizes = [1000, 10000] if args.quick else [1000, 10000, 100000]
    queries = 200 if args.quick else 1000
    remembered = 50 if args.quick else 300
    replay_sizes = [100, 1000, 10000] if args.quick else [100, 1000, 10000, 100000]
    if args.quick:
        args.questions, args.train, args.epochs = 20, 120, 8
    shrunk = None if not args.quick else {
        "retrieval_sizes": sizes, "retrieval_queries": queries, "remembered": remembered,
        "replay_subgraph_triples": replay_sizes, "round_questions": args.questions,
        "planner_train_questions": args.train, "planner_epochs": args.epochs,
        "full_run": {"retrieval_sizes": [1000, 10000, 100000], "retrieval_queries": 1000, "remembered": 300,
                     "replay_subgraph_triples": [100, 1000, 10000, 100000], "round_questions": 40,
                     "planner_train_questions": 300, "planner_epochs": 15}}
    started = time.perf_counter()
    load_before = os.getloadavg()
    part_seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="rg-bench-memory-") as tmp:
        folder = Path(tmp)
        mark = time.perf_counter()
        retrieval_ms = retrieval(sizes, queries, args.seed)
        part_seconds["retrieval"], mark = time.perf_counter() - mark, time.perf_counter()
        writes = write_throughput(remembered, folder)
        part_seconds["writes"], mark = time.perf_counter() - mark, time.perf_counter()
        replay = replay_cost(replay_sizes, folder, args.seed)
        part_seconds["replay"], mark = time.perf_counter() - mark, time.perf_counter()
    played = rounds(args.questions, args.train, args.epochs, args.rounds, args.seed)
    part_seconds["rounds"] = time.perf_counter() - mark
    largest = max(retrieval_ms, key=int)  # the largest pool actually measured
    local, llm = played["local_brain"], played["scripted_llm_brain"]
    t1, t3 = llm[0]["tokens_per_question"]["brain"], llm[args.rounds - 1]["tokens_per_question"]["brain"]
    result = {
        "benchmark": "memory", "quick": args.quick, "quick_shrunk": shrunk, "seed": args.seed,
        "retrieval_largest": int(largest),
        "retrieval_p50_ms_100k": retrieval_ms[largest]["p50_ms"],
        "retrieval_p50_ms_100k_note": None if largest == "100000" else
        f"--quick: measured at {largest} records, not 100k (run without --quick for 100k)",
        "retrieval": retrieval_ms, "writes": writes, "replay": replay,
        "hits1_round1": local[0]["hits1"], "hits1_round3": local[args.rounds - 1]["hits1"],
        "brain_calls_per_question_round3": local[args.rounds - 1]["brain_calls_per_question"],
        "token_reduction_round3": (1 - t3 / t1) if t1 else None,
        "token_reduction_source": "scripted LLM Brain (whitespace tokens of the real prompts), brain side",
        "rounds": played, "embedder": "hashing (rounds); random unit keys of 384 dims (retrieval, replay)",
        "faiss_threads": args.faiss_threads, "seconds": time.perf_counter() - started,
        "part_seconds": part_seconds, "python": platform.python_version(), "cpus": os.cpu_count(),
        "load_average_before_after": [load_before[0], os.getloadavg()[0]],
    }
    out = Path(args.out or ("bench/results/memory_quick.json" if args.quick else "bench/results/memory.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"memory: retrieval p50 {result['retrieval_p50_ms_100k']:.3f} ms at {largest}; Hits@1 round 1 "
          f"{result['hits1_round1']:.2f} -> round {args.rounds} {result['hits1_round3']:.2f}; Brain calls/q round "
          f"{args.rounds} {result['brain_calls_per_question_round3']:.2f}; brain tokens -"
          f"{100 * (result['token_reduction_round3'] or 0):.0f}% -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
