"""Evidence chains on MetaQA: how many lines top-K triples become, and how fast.

    python -m bench.evidence --quick
    python -m bench.evidence [--input DIR] [--questions N] [--ks 50,100,200,500] [--max-length L] [--out PATH]

For the first N questions of each MetaQA test set (1, 2 and 3 hops) in ``--input`` (default
``outputs/metaqa`` of the project, written by ``python -m jobs.build_subgraphs --config
configs/build_metaqa.yaml``), the subgraph's triples are ranked by a cheap real ranker,
:class:`rg.evaluation.HopDistanceScorer` (triples nearer a topic entity first, ties in subgraph
order), and the top K for each K become evidence with :func:`rg.evidence.build_evidence`. The
baseline is the raw reader input of SubgraphRAG: one line per retrieved triple, so
``compression = triples_in / chains_out``. Chain counts grow sub-linearly with K when
``chains_growth < triples_growth`` between two Ks (equivalently ``elasticity`` =
log chains ratio / log triples ratio < 1). Each build is timed ``--repeat`` times (best kept)
with ``time.perf_counter`` and the garbage collector off.
"""

from __future__ import annotations

import argparse
import gc
import math
import platform
import sys
import time
from collections import Counter
from dataclasses import fields
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench.machine import RunRecord, write_report
from rg.data.records import BadRow
from rg.data.rog import rog_files, sample_from_row
from rg.data.sample import Sample
from rg.evaluation.scorers import HopDistanceScorer
from rg.evidence import EvidenceConfig, EvidenceStats, build_evidence, top_k_triples

BASELINE = "one line per retrieved triple (raw top-K triples)"
RANKER = "hop_distance"
HOP_SETS = ("1hop-test", "2hop-test", "3hop-test")
DEFAULT_INPUT = Path(__file__).resolve().parents[1] / "outputs" / "metaqa"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "evidence.json"
DEFAULT_KS = (50, 100, 200, 500)
READ_BATCH = 32
"""Rows decoded at a time: 3-hop shards hold up to 5,000 triples per row; read only what is used."""


def read_first(folder: Path, n: int) -> tuple[list[Sample], int]:
    """The first ``n`` valid samples of a RoG shard folder, and the bad rows skipped on the way."""
    samples: list[Sample] = []
    bad = 0
    for file in rog_files(folder):
        parquet = pq.ParquetFile(file)
        index = 0
        for batch in parquet.iter_batches(batch_size=READ_BATCH):
            for row in batch.to_pylist():
                item = sample_from_row(row, str(file), index)
                index += 1
                if isinstance(item, BadRow):
                    bad += 1
                    continue
                samples.append(item)
                if len(samples) == n:
                    return samples, bad
    return samples, bad


def answer_shares(sample: Sample, triples: tuple, ends: set[str]) -> tuple[float, float] | None:
    """Share of the gold answer entities in the top-K triples, and at anchored chain ends."""
    gold = set(sample.a_entities or sample.answers)
    if not gold:
        return None
    entities = {e for h, _r, t in triples for e in (h, t)}
    return len(gold & entities) / len(gold), len(gold & ends) / len(gold)


def measure(
    samples: list[Sample], ks: tuple[int, ...], config: EvidenceConfig, repeat: int
) -> dict[int, list[dict[str, Any]]]:
    """Per K, one record per question: the evidence stats, build time (best of ``repeat``) and
    answer shares."""
    scorer = HopDistanceScorer()
    rows: dict[int, list[dict[str, Any]]] = {k: [] for k in ks}
    for sample in samples:
        scores = scorer.score_one(sample)
        for k in ks:
            triples, top = top_k_triples(sample.triples, scores, k)
            ms = math.inf
            for _ in range(repeat):
                gc.disable()
                start = time.perf_counter()
                evidence = build_evidence(triples, top, sample.q_entities, config)
                ms = min(ms, (time.perf_counter() - start) * 1000.0)
                gc.enable()
            anchored_ends = {e for c in evidence.chains() if c.anchored for e in c.ends}
            rows[k].append({"stats": evidence.stats, "ms": ms, "answers": answer_shares(sample, triples, anchored_ends)})
    return rows


def numeric_fields() -> list[str]:
    """The :class:`EvidenceStats` fields that are counts (``walk_source`` is a label)."""
    return [f.name for f in fields(EvidenceStats) if f.type in (int, "int")]


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over questions, throughput and the compression against the raw-triple baseline."""
    n = len(records)
    stats: list[EvidenceStats] = [r["stats"] for r in records]
    total_ms = sum(r["ms"] for r in records)
    mean = {key: sum(getattr(s, key) for s in stats) / n for key in numeric_fields()}
    sources = Counter(s.walk_source for s in stats)
    shares = [r["answers"] for r in records if r["answers"] is not None]
    chains_out = sum(s.chains_out for s in stats)
    return {
        "questions": n,
        "triples_in": mean["triples_in"],
        "chains_out": mean["chains_out"],
        "mean": mean,
        "walk_sources": dict(sorted(sources.items())),
        "compression": sum(s.triples_in for s in stats) / max(chains_out, 1),
        "ms_per_question": total_ms / n,
        "chains_per_ms": chains_out / total_ms if total_ms else None,
        "triples_per_ms": sum(s.triples_in for s in stats) / total_ms if total_ms else None,
        "answers_in_triples": sum(a for a, _ in shares) / len(shares) if shares else None,
        "answers_at_anchored_ends": sum(b for _, b in shares) / len(shares) if shares else None,
    }


def growth(by_k: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Chain growth against triple growth between consecutive Ks and from the first K to the last."""
    ks = sorted(by_k)
    pairs = list(zip(ks, ks[1:])) + ([(ks[0], ks[-1])] if len(ks) > 2 else [])
    out = []
    for a, b in pairs:
        triples = by_k[b]["triples_in"] / by_k[a]["triples_in"] if by_k[a]["triples_in"] else None
        chains = by_k[b]["chains_out"] / by_k[a]["chains_out"] if by_k[a]["chains_out"] else None
        elastic = (
            math.log(chains) / math.log(triples) if triples and chains and triples > 1.0 + 1e-9 else None
        )
        out.append({
            "from_k": a, "to_k": b, "triples_growth": triples, "chains_growth": chains, "elasticity": elastic,
            "sublinear": None if elastic is None else elastic < 1.0,
        })
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.evidence", description=__doc__.split("\n")[0])
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT,
                        help=f"folder holding {', '.join(HOP_SETS)} RoG shard folders (default: {DEFAULT_INPUT})")
    parser.add_argument("--quick", action="store_true", help="60 questions per hop set")
    parser.add_argument("--questions", type=int, default=300, help="questions per hop set (first N, in shard order)")
    parser.add_argument("--ks", default=",".join(map(str, DEFAULT_KS)), help="top-K sizes")
    parser.add_argument("--max-length", type=int, default=EvidenceConfig().max_length, help="longest chain")
    parser.add_argument("--repeat", type=int, default=3, help="time each build this many times, keep the best")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    record = RunRecord("bench.evidence", argv)
    folders = {name: args.input / name for name in HOP_SETS}
    missing = [str(p) for p in folders.values() if not p.is_dir()]
    if missing:
        print(
            f"bench.evidence: input shard folder(s) not found: {', '.join(missing)}. Fix: build them with "
            "`python -m jobs.build_subgraphs --config configs/build_metaqa.yaml`, or pass --input DIR holding "
            f"{'/, '.join(HOP_SETS)}/ folders of RoG parquet shards.",
            file=sys.stderr,
        )
        return 2
    n = 60 if args.quick else args.questions
    ks = tuple(sorted({int(k) for k in args.ks.split(",")}))
    config = EvidenceConfig(max_length=args.max_length)
    wall = time.perf_counter()
    by_hop: dict[str, Any] = {}
    pooled: dict[int, list[dict[str, Any]]] = {k: [] for k in ks}
    read_s = 0.0
    for name, folder in folders.items():
        start = time.perf_counter()
        samples, bad = read_first(folder, n)
        read_s += time.perf_counter() - start
        rows = measure(samples, ks, config, args.repeat)
        summary = {k: summarise(rows[k]) for k in ks}
        by_hop[name] = {"questions": len(samples), "bad_rows": bad, "mean_subgraph_triples":
                        sum(len(s.triples) for s in samples) / max(len(samples), 1),
                        "by_k": summary, "growth": growth(summary)}
        for k in ks:
            pooled[k].extend(rows[k])
    overall = {k: summarise(pooled[k]) for k in ks}
    overall_growth = growth(overall)
    result = {
        "baseline": BASELINE,
        "ranker": RANKER,
        "input": str(args.input),
        "quick": args.quick,
        "questions_per_hop": n,
        "ks": list(ks),
        "config": config.model_dump(),
        "triples_in": {str(k): overall[k]["triples_in"] for k in ks},
        "chains_out": {str(k): overall[k]["chains_out"] for k in ks},
        "chains_per_ms": {str(k): overall[k]["chains_per_ms"] for k in ks},
        "triples_per_ms": {str(k): overall[k]["triples_per_ms"] for k in ks},
        "ms_per_question": {str(k): overall[k]["ms_per_question"] for k in ks},
        "compression": {str(k): overall[k]["compression"] for k in ks},
        "growth": overall_growth,
        "sublinear": all(g["sublinear"] is not False for g in overall_growth),
        "all": {str(k): v for k, v in overall.items()},
        "by_hop": {h: {**v, "by_k": {str(k): s for k, s in v["by_k"].items()}} for h, v in by_hop.items()},
        "read_seconds": read_s,
        "wall_seconds": time.perf_counter() - wall,
        "versions": {"python": platform.python_version()},
        "repeat": args.repeat,
        "timing": "best of `repeat` perf_counter timings per build_evidence call, gc disabled during the call",
    }
    write_report(args.out, result, record)
    first, last = ks[0], ks[-1]
    span = overall_growth[-1]
    print(
        f"evidence: K={first}: {overall[first]['triples_in']:.0f} triples -> {overall[first]['chains_out']:.0f} lines; "
        f"K={last}: {overall[last]['triples_in']:.0f} -> {overall[last]['chains_out']:.0f} "
        f"(triples x{span['triples_growth']:.2f}, chains x{span['chains_growth']:.2f}, "
        f"elasticity {span['elasticity']:.2f}); {overall[last]['chains_per_ms']:.1f} chains/ms -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
