"""How fast is the LoRA path planner, and how often do its paths ground? Constrained vs RoG's decoding.

    python -m bench.planner --quick
    python -m bench.planner [--questions N] [--epochs E] [--repeats R] [--planner PATH] [--out PATH]

A tiny planner (LLaMA built from a config, word-level tokenizer, LoRA) is trained in-process on
weak relation paths of synthetic questions and read back from its checkpoint with the adapter
merged (or loaded from ``--planner``), then the held-out
questions are planned with beam search at k ∈ {1, 5, 10} in two modes: constrained by the trie
of relation paths in each question's graph (rg), and unconstrained (RoG's decoding, the
baseline). Each setting is timed over ``--repeats`` passes of the held-out questions after one
warm-up batch;
``questions_per_s`` includes building each question's graph, its trie (constrained) and the
grounding. ``groundable_fraction`` is the share of returned paths that ground from a topic
entity; path exact match is against the generator's gold paths. The JSON also holds each
setting's CPU seconds and the machine's load average, since on a shared machine wall time
includes waiting for a core.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench.machine import RunRecord, write_report
from rg.subgraphs import SubgraphConfig, Unbuildable, build_sample
from rg.data.synthetic import SyntheticConfig, generate
from rg.graph import KnowledgeGraph
from rg.retrievers.planner import DecodeConfig, PlannerConfig, PlannerModel, evaluate_planner, load_planner
from rg.data.splits import seeded_split
from rg.jobs.weak_labels import weak_rows
from rg.supervision.labels import LabelConfig
from rg.training.planner_data import plan_targets, target_rows
from rg.training.planner_loop import PlannerFitConfig, fit_planner

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "planner.json"
BEAM_WIDTHS = (1, 5, 10)


def synthetic_samples(questions: int, seed: int) -> list:
    """Synthetic questions with subgraphs capped at 300 triples (questions that cannot be built are skipped)."""
    data = generate(SyntheticConfig(questions=questions, seed=seed))
    kg = KnowledgeGraph.from_triples(data.triples)
    samples = []
    for question in data.questions:
        try:
            samples.append(build_sample(kg, question, SubgraphConfig(max_triples=300)).sample)
        except Unbuildable:
            continue
    return samples


def train_tiny(train: list, val: list, epochs: int) -> tuple[PlannerModel, dict[str, Any]]:
    """A tiny planner fitted on weak relation paths; returns it with the training summary."""
    config = PlannerConfig(tiny={"layers": 2, "hidden": 64, "heads": 4, "max_positions": 64},
                           lora={"rank": 8, "alpha": 16, "dropout": 0.0}, max_prompt_tokens=40)
    rows = weak_rows(train + val, LabelConfig())
    train_targets, stats = plan_targets(train, rows, max_len=config.max_path_len)
    val_targets, _ = plan_targets(val, rows, max_len=config.max_path_len)
    torch.manual_seed(0)
    planner = PlannerModel.build(config, [t.question for t in train_targets],
                                 {r for s in train + val for _, r, _ in s.triples})
    started = time.perf_counter()
    result = fit_planner(planner, planner.examples(target_rows(train_targets)), planner.examples(target_rows(val_targets)),
                         PlannerFitConfig(epochs=epochs, batch_size=16, lr=0.005))
    planner.load_trainable_state(result.best_state)
    summary = {"train_questions": len(train_targets), "epochs": epochs, "best_epoch": result.best_epoch,
               "val_teacher_forced_exact_match": result.best_metric, "train_seconds": time.perf_counter() - started,
               "targets": stats.to_dict(), "adapter_parameters": planner.adapter_parameters}
    return planner.eval(), summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.planner", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="120 questions, 12 epochs, 2 timed passes")
    parser.add_argument("--questions", type=int, default=400, help="synthetic questions generated (80%% train)")
    parser.add_argument("--epochs", type=int, default=10, help="training epochs of the tiny planner")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes over the held-out questions")
    parser.add_argument("--planner", type=Path, default=None, help="load this planner checkpoint instead of training")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    record = RunRecord("bench.planner", argv)
    questions, epochs, repeats = (120, 12, 2) if args.quick else (args.questions, args.epochs, args.repeats)
    started = time.perf_counter()
    load_before = list(os.getloadavg())
    samples = synthetic_samples(questions, args.seed)
    train_ids, test_ids = seeded_split([s.id for s in samples], 0.2, args.seed)
    train = [s for s in samples if s.id in train_ids]
    test = [s for s in samples if s.id in test_ids]
    if args.planner is not None:
        planner, training = load_planner(args.planner), {"loaded_from": str(args.planner)}
    else:
        trained, training = train_tiny(train, test, epochs)
        with tempfile.TemporaryDirectory(prefix="rg-bench-planner-") as tmp:
            planner = load_planner(trained.save(tmp))  # as served: read back, LoRA merged into the base
    gold = {s.id: s.relation_paths for s in test}
    decode = DecodeConfig(questions_per_batch=16)
    evaluate_planner(planner, test[:decode.questions_per_batch], gold, (1,), decode=decode)  # warm-up
    rows = [r.to_dict() for r in evaluate_planner(planner, test * repeats, gold, BEAM_WIDTHS, decode=decode)]
    by = {(r["mode"], r["beam_width"]): r for r in rows}
    ratios = {f"k={k}": by[("constrained", k)]["questions_per_s"] / by[("unconstrained", k)]["questions_per_s"]
              for k in BEAM_WIDTHS}
    result = {
        "baseline": "unconstrained beam search (RoG's decoding)",
        "quick": args.quick,
        "test_questions": len(test),
        "timed_passes": repeats,
        "training": training,
        "settings": rows,
        "speed_ratio_constrained_over_unconstrained": ratios,
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_before_after": [load_before, list(os.getloadavg())],
        "wall_seconds": time.perf_counter() - started,
    }
    write_report(args.out, result, record)
    print("planner: " + ", ".join(
        f"k={k}: {by[('constrained', k)]['questions_per_s']:.0f} vs {by[('unconstrained', k)]['questions_per_s']:.0f} q/s, "
        f"groundable {by[('constrained', k)]['groundable_fraction']:.2f} vs {by[('unconstrained', k)]['groundable_fraction']:.2f}"
        for k in BEAM_WIDTHS
    ) + f" (constrained vs unconstrained) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
