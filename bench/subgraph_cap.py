"""What a subgraph size cap costs: answer coverage and size on MetaQA at several caps.

    python -m bench.subgraph_cap --quick
    python -m bench.subgraph_cap [--questions N] [--caps 1000,5000,20000] [--seed S] [--out PATH]

For a seeded sample of MetaQA test questions per hop whose topic and answers are all in the
KB, each question's subgraph is cut exactly as the builder does (``KnowledgeGraph.k_hop`` from
the topic, ``hops`` rounds, both directions) with each cap and each order of cutting the
overflowing round (``walk``, the builder's default, and ``scramble``), and with no cap (the
baseline). Reported per hop, cut order and cap: coverage (share of questions whose answers all
lie inside the subgraph), coverage retained relative to the uncapped baseline, *path reach*
(share of the answers that the question's best answer-F1 relation paths on the whole KB still
reach inside the capped subgraph, i.e. whether the evidence survived and not only the answer
entity), mean and 90th-percentile triples, and the share of subgraphs truncated. Writes JSON
and a PNG plot beside it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from bench.machine import RunRecord, write_report
from rg.data.metaqa import read_metaqa_kb, read_metaqa_questions
from rg.run.paths import require_shared_data
from rg.data.sample import Question, Sample
from rg.graph import KnowledgeGraph
from rg.graph.path import split_relation
from rg.graph.search import CutOrder
from rg.supervision.answer_paths import answer_f1_paths

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "subgraph_cap.json"
DEFAULT_CAPS = (1000, 2000, 5000, 10000, 20000, 40000)
CUTS: tuple[CutOrder, ...] = ("walk", "scramble")


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


def path_reach(kg: KnowledgeGraph, triple_ids: np.ndarray, topics: np.ndarray, answers: np.ndarray, paths) -> float:
    """Share of ``answers`` the relation ``paths`` reach from ``topics`` over ``triple_ids`` only."""
    head, rel, tail = kg.head[triple_ids], kg.rel[triple_ids], kg.tail[triple_ids]
    reached: set[int] = set()
    for path in paths:
        frontier = topics
        for step in path:
            name, forward = split_relation(step)
            on = rel == kg.relation_id(name)
            near, far = (head, tail) if forward else (tail, head)
            frontier = np.unique(far[on & np.isin(near, frontier)])
        reached.update(frontier.tolist())
    return len(reached & set(answers.tolist())) / len(answers)


def sweep(
    kg: KnowledgeGraph, questions: list[Question], hops: int, caps: list[int | None], cuts: tuple[CutOrder, ...] = CUTS
) -> dict[str, Any]:
    """Coverage, path reach and size per cut order and cap for one hop set (cap ``None`` = baseline)."""
    runs = [(cut, cap) for cut in cuts for cap in caps]
    covered = dict.fromkeys(runs, 0)
    reach: dict[tuple[str, int | None], list[float]] = {run: [] for run in runs}
    sizes: dict[tuple[str, int | None], list[int]] = {run: [] for run in runs}
    truncated = dict.fromkeys(runs, 0)
    for q in tqdm(questions, desc=f"{hops}-hop", unit="q", leave=False):
        answers, topics = kg.entity_ids(q.answers), kg.entity_ids(q.q_entities)
        sample = Sample(id=q.id, question=q.question, answers=q.answers, q_entities=q.q_entities, a_entities=q.answers, triples=())
        paths = answer_f1_paths(sample, max_len=hops, kb=kg)
        for cut, cap in runs:
            sub = kg.k_hop(list(q.q_entities), hops, cap, cut=cut)
            covered[cut, cap] += bool(np.isin(answers, sub.entity_ids).all())
            reach[cut, cap].append(path_reach(kg, sub.triple_ids, topics, answers, paths))
            sizes[cut, cap].append(len(sub))
            truncated[cut, cap] += sub.truncated
    return {
        "questions": len(questions),
        "by_cut": {
            cut: {
                str(cap): {
                    "coverage": covered[cut, cap] / len(questions),
                    "coverage_retained": covered[cut, cap] / (covered[cut, None] or 1),
                    "path_reach": float(np.mean(reach[cut, cap])),
                    "mean_triples": float(np.mean(sizes[cut, cap])),
                    "p90_triples": float(np.percentile(sizes[cut, cap], 90)),
                    "truncated_share": truncated[cut, cap] / len(questions),
                }
                for cap in caps
            }
            for cut in cuts
        },
    }


def plot(result: dict[str, Any], path: Path) -> None:
    """Coverage retained against cap, one line per hop count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for (hops, res), color in zip(result["hops"].items(), ("tab:blue", "tab:orange", "tab:green")):
        for cut, style in zip(res["by_cut"], ("-", "--")):
            by_cap = res["by_cut"][cut]
            caps = [c for c in by_cap if c != "None"]
            for ax, key in zip(axes, ("coverage_retained", "path_reach")):
                ax.plot(
                    [int(c) for c in caps], [by_cap[c][key] for c in caps],
                    style, color=color, marker="o", label=f"{hops}-hop, cut={cut}",
                )
    for ax, label in zip(axes, ("coverage retained vs. no cap", "answers the best answer-F1 path reaches")):
        ax.set_xscale("log")
        ax.set_xlabel("max_triples (cap)")
        ax.set_ylabel(label)
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("MetaQA: what the subgraph cap costs, by the order the last round is cut")
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
    record = RunRecord("bench.subgraph_cap", argv)
    n = 60 if args.quick else args.questions
    caps: list[int | None] = [int(c) for c in args.caps.split(",")] + [None]
    start = time.perf_counter()
    kg = KnowledgeGraph.from_triples(read_metaqa_kb(require_shared_data("metaqa/kb_reconstructed.txt.gz")))
    result: dict[str, Any] = {"baseline": "no cap (per cut order)", "seed": args.seed, "quick": args.quick, "hops": {}}
    for hops in (1, 2, 3):
        result["hops"][str(hops)] = sweep(kg, sample_questions(kg, hops, n, args.seed), hops, caps)
    result["seconds"] = time.perf_counter() - start
    write_report(args.out, result, record)
    plot(result, args.out.with_suffix(".png"))
    for cut in CUTS:
        three = result["hops"]["3"]["by_cut"][cut]
        print(
            f"subgraph_cap: cut={cut}: 3-hop coverage retained / path reach "
            + ", ".join(f"{c}: {three[str(c)]['coverage_retained']:.2f} / {three[str(c)]['path_reach']:.2f}" for c in caps[:-1])
        )
    print(f"subgraph_cap: baseline no cap; {n} questions per hop; {result['seconds']:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
