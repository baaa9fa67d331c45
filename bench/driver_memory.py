"""How much memory does a training job's driver hold? Peak RSS of ``jobs.train``'s driver process.

    python -m bench.driver_memory --quick [--kind train_planner --before examples_on=driver]
    python -m bench.driver_memory --config configs/train_metaqa_mlp.yaml --set train.epochs=1 [--checkout DIR] [--out PATH]
    python -m bench.driver_memory --config configs/train_planner_metaqa.yaml --before examples_on=driver --set ...

The job runs in a child Python process whose own peak resident set size is read with
``resource.getrusage(RUSAGE_SELF)`` when the job returns: the driver alone, not the Ray
processes it starts (GCS, raylet, workers; ``RUSAGE_CHILDREN`` or ``/usr/bin/time`` would fold
those in). The baseline, measured in the same run, is the **floor** every driver pays: a child
that imports ``jobs.train`` and starts and stops Ray with the job's ``ray`` section. The data the
driver holds is the difference (``driver_data_mb``).

``--checkout DIR`` runs the job's code from another checkout of rg (the child gets ``cwd=DIR``
and ``PYTHONPATH=DIR``), so one command compares two commits; the JSON names the commit and the
path ``rg`` was imported from. ``--before KEY=VALUE`` compares two code paths of one checkout
instead: the job runs twice, once with those overrides (the named baseline, e.g.
``examples_on=driver``: the planner's or reader's former path, every sample on the driver and
``from_items``) and once without; each of the two runs gets ``storage_path`` and ``output_dir``
in a fresh temporary folder, so neither resumes the other. The JSON then holds both runs and
``before_over_after`` (the ratio of their peaks). ``--quick`` trains one epoch on synthetic
questions (~1 minute); ``--kind train_planner`` makes it a planner run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from bench.machine import RunRecord, write_report

ROOT = Path(__file__).resolve().parents[1]
NAME = "driver_memory"

JOB_CHILD = """
import json, resource, sys
import rg
from jobs.train import main
code = main(sys.argv[2:])
json.dump({"rc": code, "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
           "rg_path": rg.__file__}, open(sys.argv[1], "w"))
"""

FLOOR_CHILD = """
import json, resource, sys
import ray
import jobs.train
from rg.config import load_config, read_yaml
from rg.runtime import init_ray
from rg.jobs.train_planner import PlannerTrainConfig
from rg.jobs.train_retriever import TrainJobConfig
from rg.jobs.train_reader import ReaderTrainConfig
kinds = {c.KIND: c for c in (TrainJobConfig, PlannerTrainConfig, ReaderTrainConfig)}
cfg = load_config(sys.argv[2], kinds[read_yaml(sys.argv[2]).get("kind", TrainJobConfig.KIND)], sys.argv[3:])
init_ray(cfg.ray)
ray.shutdown()
json.dump({"rc": 0, "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}, open(sys.argv[1], "w"))
"""


def _run_child(source: str, args: list[str], checkout: Path) -> dict[str, Any]:
    """Run ``source`` in a fresh interpreter in ``checkout``; its JSON result (``rc``, ``peak_rss_kb``...)."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        done = subprocess.run([sys.executable, "-c", source, str(result), *args], cwd=checkout, env=env, check=False)
        if done.returncode != 0 or not result.is_file():
            raise RuntimeError(f"the measured child exited {done.returncode}: {' '.join(args)}")
        return json.loads(result.read_text())


def _commit(checkout: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def _quick_config(folder: Path, kind: str = "train", questions: int = 60) -> Path:
    """A one-epoch training config (MLP retriever, or planner for ``kind: train_planner``) on ``questions`` synthetic
    questions."""
    from rg.data.rog import write_rog_parquet
    from rg.subgraphs import SubgraphConfig, Unbuildable, build_sample
    from rg.data.synthetic import SyntheticConfig, generate
    from rg.graph.kg import KnowledgeGraph

    syn = generate(SyntheticConfig(questions=questions))
    kg = KnowledgeGraph.from_triples(syn.triples)
    samples = []
    for question in syn.questions:
        try:
            samples.append(build_sample(kg, question, SubgraphConfig(max_triples=200)).sample)
        except Unbuildable:
            continue
    write_rog_parquet(samples, folder / "synthetic.parquet")
    common = {
        "kind": kind,
        "input": str(folder / "synthetic.parquet"),
        "num_workers": 2,
        "run_name": "driver_memory_quick",
        "storage_path": str(folder / "ray_results"),
        "output_dir": str(folder / "out"),
        "ray": {"num_cpus": 2},
    }
    if kind == "train_planner":
        config = {
            **common,
            "planner": {"tiny": {"layers": 1, "hidden": 32, "heads": 4, "max_positions": 48}, "max_prompt_tokens": 32},
            "labels": {"source": "weak", "weak": {"rule": "answer_f1"}},
            "train": {"epochs": 1, "batch_size": 8},
            "evaluation": {"side": None},
        }
    else:
        config = {
            **common,
            "retriever": {"kind": "mlp", "hidden": 16},
            "train": {"epochs": 1, "questions_per_batch": 4, "eval_ks": [10, 100]},
        }
    path = folder / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _job(config: Path, overrides: list[str], checkout: Path) -> dict[str, Any]:
    """Peak driver RSS (MB) of ``jobs.train --config config --set ...``, with the command and where ``rg`` came from."""
    sets = [x for o in overrides for x in ("--set", o)]
    job = _run_child(JOB_CHILD, ["--config", str(config.resolve()), *sets], checkout)
    if job["rc"] != 0:
        raise RuntimeError(f"jobs.train exited {job['rc']}")
    return {"command": ["python", "-m", "jobs.train", "--config", str(config), *sets], "rg_path": job["rg_path"],
            "driver_peak_rss_mb": round(job["peak_rss_kb"] / 1024, 1)}


def _over_floor(run: dict[str, Any], floor_mb: float) -> dict[str, Any]:
    peak = run["driver_peak_rss_mb"]
    return {**run, "driver_data_mb": round(peak - floor_mb, 1), "peak_over_floor": round(peak / floor_mb, 3)}


def measure(config: Path, overrides: list[str], checkout: Path, before: list[str] | None = None,
            scratch: Path | None = None) -> dict[str, Any]:
    """Peak driver RSS of ``jobs.train --config config --set ...`` and of the floor, in MB.

    With ``before`` (overrides that select the baseline code path), the job also runs with
    them first; each run then writes its checkpoints and outputs under ``scratch``.
    """
    commit = _commit(checkout)  # before the run: the code that runs, not what is checked out afterwards
    floor = _run_child(FLOOR_CHILD, [str(config.resolve()), *overrides], checkout)
    base = round(floor["peak_rss_kb"] / 1024, 1)
    result: dict[str, Any] = {"checkout": str(checkout), "commit": commit, "floor_peak_rss_mb": base}
    if before is None:
        return {**result, **_over_floor(_job(config, overrides, checkout), base)}
    if scratch is None:
        raise ValueError("measure(before=...) needs a scratch folder for the two runs' outputs")
    runs = {}
    for name, extra in (("before", list(before)), ("after", [])):
        own = [f"storage_path={scratch / name / 'ray_results'}", f"output_dir={scratch / name / 'out'}"]
        runs[name] = _over_floor(_job(config, [*overrides, *extra, *own], checkout), base)
    after = runs["after"]
    return {
        **result,
        **{k: after[k] for k in ("command", "rg_path", "driver_peak_rss_mb", "driver_data_mb", "peak_over_floor")},
        "baseline": f"the same job with {' '.join(before)} (the former code path)",
        "before": runs["before"],
        "after": after,
        "before_over_after": round(runs["before"]["driver_peak_rss_mb"] / after["driver_peak_rss_mb"], 3),
        "data_before_over_after": round(runs["before"]["driver_data_mb"] / max(after["driver_data_mb"], 1.0), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.driver_memory", description=__doc__.strip().split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one epoch on 60 synthetic questions")
    parser.add_argument("--questions", type=int, default=60, help="synthetic questions of the --quick job")
    parser.add_argument("--kind", choices=("train", "train_planner"), default="train", help="the --quick job's kind")
    parser.add_argument("--config", type=Path, help="a jobs.train config (not with --quick)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--before", action="append", default=None, metavar="KEY=VALUE",
                        help="also run the job with this override as the named baseline (e.g. examples_on=driver)")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the rg checkout whose code runs (default: this one)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"{NAME}.json")
    args = parser.parse_args(argv)
    record = RunRecord("bench.driver_memory", argv)
    if args.quick == (args.config is not None):
        parser.error("give exactly one of --quick and --config")
    if args.kind != "train" and not args.quick:
        parser.error("--kind names the --quick job; a --config names its own kind")
    with tempfile.TemporaryDirectory() as tmp:
        config = _quick_config(Path(tmp), args.kind, args.questions) if args.quick else args.config
        result = measure(config, args.overrides, args.checkout.resolve(), args.before, Path(tmp) / "runs")
    result["quick"] = args.quick
    write_report(args.out, result, record)
    summary = (f"driver peak RSS {result['driver_peak_rss_mb']:.0f} MB (floor {result['floor_peak_rss_mb']:.0f} MB, "
               f"{result['peak_over_floor']:.2f}x)")
    if "before" in result:
        summary += (f"; before ({' '.join(args.before)}) {result['before']['driver_peak_rss_mb']:.0f} MB, "
                    f"{result['before_over_after']:.2f}x the after run")
    print(f"{summary} at {result['commit']} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
