"""Where the main command's time goes: ``jobs.pipeline`` on the embedded default, stage by stage.

    RAY_AUTH_MODE=disabled python -m bench.demo --quick              # 60 questions, 1-2 epochs per trained model
    RAY_AUTH_MODE=disabled python -m bench.demo [--isa avx2]         # the README's main command (195 s / 239 s on a 2-core EPYC)
    RAY_AUTH_MODE=disabled python -m bench.demo --checkout DIR       # also the same run from another checkout
    RAY_AUTH_MODE=disabled python -m bench.demo --fresh-models       # a first run: SmolLM2 converted from its wheel

The pipeline runs in a child process exactly as the README runs it (``python -m jobs.pipeline --config
configs/demo.yaml``), on a fresh output folder and a fresh encoder cache in a temporary directory, so nothing is
resumed; ``--fresh-models`` also gives it an empty models cache (``RG_MODELS_DIR``), so the reader's base is
converted from its wheel as on a new user's first run. The JSON records each stage's seconds and result line,
the QA stages' Hits@1 and Macro-F1, the whole wall time, the machine (CPU model and flags, cores, torch
threads, load before and after) and the commit, and what the console showed: its line count and the lines a user
should not meet on a successful run (:data:`NOISE`: Ray's log format, ``core_worker`` messages, Python warnings,
tracebacks).

``--isa avx2`` runs the child with torch's AVX2 kernels (``ATEN_CPU_CAPABILITY=avx2``, MKL and oneDNN capped at
AVX2): the code path of a CPU without AVX-512 and without native bf16 (most laptops and CI runners), where the
tuned reader's ``precision: auto`` picks fp32. On such a CPU it measures the same path; on an AVX-512 CPU it is
the closest stand-in (the fp32 matmuls still run at this CPU's clock and memory bandwidth).

The named baseline is ``--checkout DIR`` (another rg checkout, e.g. ``git worktree add /tmp/base <commit>``) run
in the same command on the same machine, with that checkout's own copy of ``--config`` (its README command):
each stage's ``seconds_ratio`` is this run's seconds over the baseline's (QA stages that one actor pool
answered together each carry the pool's seconds; ``qa_seconds`` counts each pool once, ``qa_over_baseline``
compares those). Without it the ratio is to the issue's budget (``budget_seconds``, 600 s for the whole command
including the ~100 s install, so 500 s for the pipeline).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from bench.machine import RunRecord, cpu_facts, write_report

NOISE = re.compile(r"\b(INFO|WARNING|DEBUG)\b|Warning:|Traceback|core_worker|streaming_executor|\(pid=\d+|"
                   r"Progress bars disabled")
"""Console lines a user should not meet on a successful run: Ray's log format, C++ core messages, Python warnings,
tracebacks, worker-prefixed output (the issue's list)."""

ROOT = Path(__file__).resolve().parents[1]
NAME = "demo"
BUDGET_SECONDS = 500.0
"""The pipeline's share of the 10-minute budget for the README's main command (install ~100 s)."""

AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
"""What ``--isa avx2`` sets: torch's, MKL's and oneDNN's kernels as a CPU with AVX2 and no AVX-512 runs them."""

QUICK_SETS = (
    "build.synthetic.questions=60", "train.train.epochs=2", "plan.train.epochs=2", "read.train.epochs=1",
    "read.max_train_questions=16",
)
"""``--quick``: the demo on 60 questions with one or two epochs per trained model."""


def _commit(checkout: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def run_pipeline(config: Path, overrides: Sequence[str], checkout: Path, scratch: Path, isa: str,
                 fresh_models: bool = False) -> dict[str, Any]:
    """One fresh ``jobs.pipeline`` run from ``checkout`` in a child process; its stages, QA scores and wall time
    (``fresh_models``: with an empty models cache of its own).

    Raises:
        RuntimeError: when the pipeline exits non-zero (its last output lines are in the message).
    """
    out, cache = scratch / "out", scratch / "encoder_cache"
    sets = [*overrides, f"output_dir={out}", f"encoder.cache_dir={cache}"]
    command = [sys.executable, "-m", "jobs.pipeline", "--config", str(config.resolve()), "--fresh", "--no-progress",
               *(x for s in sets for x in ("--set", s))]
    env = {**os.environ, "PYTHONPATH": str(checkout), "RG_LOG_DIR": str(scratch / "logs"),
           **(AVX2_ENV if isa == "avx2" else {}),
           **({"RG_MODELS_DIR": str(scratch / "models")} if fresh_models else {})}
    load_before = round(os.getloadavg()[0], 2)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"jobs.pipeline exited {done.returncode} in {checkout}:\n{tail}")
    console = (done.stdout + done.stderr).splitlines()
    noise = [line for line in console if NOISE.search(line)]
    logged = [line for log in sorted((scratch / "logs").glob("*.log")) for line in log.read_text().splitlines()
              if NOISE.search(line)]  # where the quiet console put them
    report = json.loads((out / "pipeline_report.json").read_text())
    stages = {s["name"]: {"seconds": round(s["seconds"], 1), "result": s["result"],
                          **({"pool": s["pool"]} if s.get("pool") else {})} for s in report["stages"]}
    qa = {}
    for stage in report["stages"]:
        overall = stage.get("metrics", {}).get("overall", {})
        if stage["name"].startswith("qa/") and "hits_at_1" in overall:
            qa[stage["name"]] = {k: round(overall[k], 3) for k in ("hits_at_1", "macro_f1", "micro_f1") if k in overall}
    return {"checkout": str(checkout), "commit": _commit(checkout), "command": command[1:],
            "wall_seconds": round(wall, 1), "pipeline_seconds": round(report["seconds"], 1),
            "qa_seconds": qa_seconds(stages),
            "load_before": load_before, "load_after": round(os.getloadavg()[0], 2), "stages": stages, "qa": qa,
            "console_lines": len(console), "console_noise_lines": len(noise), "console_noise": noise[:20],
            "console_has_stage_table": any(line.startswith("| stage | status |") for line in console),
            "log_noise_lines": len(logged)}


def qa_seconds(stages: dict[str, dict[str, Any]]) -> float:
    """The QA stages' time: a stage answered alone counts its seconds, an actor pool (``pool``, whose seconds each
    of its stages carries) counts once."""
    pools: dict[tuple[str, ...], float] = {}
    for name, stage in stages.items():
        if name.startswith("qa/"):
            pools[tuple(stage.get("pool") or (name,))] = stage["seconds"]
    return round(sum(pools.values()), 1)


def config_in(checkout: Path, config: Path) -> Path:
    """``config`` as ``checkout`` has it (its own ``configs/demo.yaml``, so each side runs its own README command);
    a config outside this checkout is used as given."""
    try:
        return checkout / config.resolve().relative_to(ROOT)
    except ValueError:
        return config


def compare(run: dict[str, Any], baseline: dict[str, Any] | None) -> dict[str, Any]:
    """Per-stage and total ratios of ``run`` to ``baseline`` (or to :data:`BUDGET_SECONDS` without one)."""
    if baseline is None:
        return {"baseline": f"the pipeline's budget of {BUDGET_SECONDS:.0f} s",
                "pipeline_over_budget": round(run["pipeline_seconds"] / BUDGET_SECONDS, 3)}
    ratios = {name: round(stage["seconds"] / max(baseline["stages"][name]["seconds"], 0.1), 3)
              for name, stage in run["stages"].items() if name in baseline["stages"]}
    return {"baseline": f"the same pipeline from {baseline['checkout']} at {baseline['commit']}",
            "pipeline_over_baseline": round(run["pipeline_seconds"] / baseline["pipeline_seconds"], 3),
            "qa_over_baseline": round(run["qa_seconds"] / max(qa_seconds(baseline["stages"]), 0.1), 3),
            "stage_seconds_ratio": ratios,
            "pipeline_over_budget": round(run["pipeline_seconds"] / BUDGET_SECONDS, 3)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.demo", description=__doc__.strip().split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "demo.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--quick", action="store_true", help="60 questions, one or two epochs per model")
    parser.add_argument("--isa", choices=("native", "avx2"), default="native",
                        help="avx2: run torch, MKL and oneDNN as on a CPU without AVX-512 and native bf16")
    parser.add_argument("--checkout", type=Path, default=None, help="a second rg checkout to run as the baseline")
    parser.add_argument("--fresh-models", action="store_true",
                        help="an empty models cache per run: the base model is converted as on a first run")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"{NAME}.json")
    args = parser.parse_args(argv)
    record = RunRecord("bench.demo", argv)
    overrides = [*(QUICK_SETS if args.quick else ()), *args.overrides]
    result: dict[str, Any] = {"isa": args.isa, "config": str(args.config), "quick": args.quick,
                              "fresh_models": args.fresh_models, "overrides": overrides,
                              "isa_env": AVX2_ENV if args.isa == "avx2" else {}}
    with tempfile.TemporaryDirectory(prefix="rg-bench-demo-") as tmp:
        baseline = None
        if args.checkout is not None:
            checkout = args.checkout.resolve()
            baseline = run_pipeline(config_in(checkout, args.config), overrides, checkout, Path(tmp) / "baseline",
                                    args.isa, args.fresh_models)
        run = run_pipeline(args.config, overrides, ROOT, Path(tmp) / "rg", args.isa, args.fresh_models)
    result.update({"run": run, **({"baseline_run": baseline} if baseline else {}), **compare(run, baseline)})
    write_report(args.out, result, record)
    slowest = sorted(run["stages"].items(), key=lambda kv: -kv[1]["seconds"])[:3]
    cpu = cpu_facts()["cpu_flags"]
    print(f"pipeline {run['pipeline_seconds']:.0f} s (wall {run['wall_seconds']:.0f} s, isa {args.isa}, "
          f"avx512_bf16={cpu['avx512_bf16']}); slowest: "
          + ", ".join(f"{name} {stage['seconds']:.0f} s" for name, stage in slowest)
          + (f"; {result['pipeline_over_baseline']:.2f}x the baseline" if baseline else
             f"; {result['pipeline_over_budget']:.2f}x the budget") + f" -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
