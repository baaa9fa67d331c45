"""What a subgraph size cap costs: answer coverage and size on MetaQA at several caps.

    python -m bench.subgraph_cap --quick
    python -m bench.subgraph_cap [--questions N] [--caps 1000,5000,20000] [--seed S] [--out PATH]

For a seeded sample of MetaQA test questions per hop whose topic and answers are all in the
KB, each question's subgraph is cut exactly as the builder does (``KnowledgeGraph.k_hop`` from
the topic, ``hops`` rounds, both directions) with each cap, and with no cap (the baseline).
Reported per hop and cap: coverage (share of questions whose answers all lie inside the
subgraph), coverage retained relative to the uncapped baseline, mean and 90th-percentile
triples, and the share of subgraphs truncated. Writes JSON and a PNG plot beside it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from rg.data.metaqa import read_metaqa_kb, read_metaqa_questions
from rg.data.paths import require_shared_data
from rg.data.sample import Question
from rg.graph import KnowledgeGraph

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "subgraph_cap.json"
DEFAULT_CAPS = (1000, 2000, 5000, 10000, 20000, 40000)


def sample_questions(kg: KnowledgeGraph, hops: int, n: int, seed: int) -> list[Question]:
    """``n`` seeded test questions of one hop file whose topic and answers are in the KB."""
    path = require_shared_data(f"metaqa/qa_test_{hops}hop.txt.gz")
    usable = [
        q
        for q in read_metaqa_questions(path, hops, "test")
        if isinstance(q, Question) and all(kg.has_entity(e) for e in q.q_entities + q.answers)
    ]
    rng = np.random.default_rng(seed)
    return [usable[i] for i in sorted(rng.choice(len(usable), min(n, len(usable)), replace=False))]


def sweep(kg: KnowledgeGraph, questions: list[Question], hops: int, caps: list[int | None]) -> dict[str, Any]:
    """Coverage and size per cap for one hop set (``None`` = uncapped baseline)."""
    covered = {c: 0 for c in caps}
    sizes: dict[int | None, list[int]] = {c: [] for c in caps}
    truncated = {c: 0 for c in caps}
    for q in tqdm(questions, desc=f"{hops}-hop", unit="q", leave=False):
        answers = kg.entity_ids(q.answers)
        for cap in caps:
            sub = kg.k_hop(list(q.q_entities), hops, cap)
            covered[cap] += bool(np.isin(answers, sub.entity_ids).all())
            sizes[cap].append(len(sub))
            truncated[cap] += sub.truncated
    base = covered[None] or 1
    return {
        "questions": len(questions),
        "by_cap": {
            str(cap): {
                "coverage": covered[cap] / len(questions),
                "coverage_retained": covered[cap] / base,
                "mean_triples": float(np.mean(sizes[cap])),
                "p90_triples": float(np.percentile(sizes[cap], 90)),
                "truncated_share": truncated[cap] / len(questions),
            }
            for cap in caps
        },
    }


def plot(result: dict[str, Any], path: Path) -> None:
    """Coverage retained against cap, one line per hop count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for hops, res in result["hops"].items():
        caps = [c for c in res["by_cap"] if c != "None"]
        ax.plot([int(c) for c in caps], [res["by_cap"][c]["coverage_retained"] for c in caps], marker="o", label=f"{hops}-hop")
    ax.set_xscale("log")
    ax.set_xlabel("max_triples (cap)")
    ax.set_ylabel("coverage retained vs. no cap")
    ax.set_ylim(0, 1.05)
    ax.set_title("MetaQA: what the subgraph cap costs")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.subgraph_cap", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 questions per hop (under a minute)")
    parser.add_argument("--questions", type=int, default=500, help="questions per hop")
    parser.add_argument("--caps", default=",".join(map(str, DEFAULT_CAPS)), help="comma-separated caps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    n = 60 if args.quick else args.questions
    caps: list[int | None] = [int(c) for c in args.caps.split(",")] + [None]
    start = time.perf_counter()
    kg = KnowledgeGraph.from_triples(read_metaqa_kb(require_shared_data("metaqa/kb_reconstructed.txt.gz")))
    result: dict[str, Any] = {"baseline": "no cap", "seed": args.seed, "quick": args.quick, "hops": {}}
    for hops in (1, 2, 3):
        result["hops"][str(hops)] = sweep(kg, sample_questions(kg, hops, n, args.seed), hops, caps)
    result["seconds"] = time.perf_counter() - start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    plot(result, args.out.with_suffix(".png"))
    three = result["hops"]["3"]["by_cap"]
    print(
        "subgraph_cap: 3-hop coverage retained "
        + ", ".join(f"{c}: {three[str(c)]['coverage_retained']:.2f}" for c in caps[:-1])
        + f" (vs no cap; {n} questions per hop; {result['seconds']:.0f} s) -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
