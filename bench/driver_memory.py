"""How much memory does a training job's driver hold? Peak RSS of ``jobs.train``'s driver process.

    python -m bench.driver_memory --quick
    python -m bench.driver_memory --config configs/train_metaqa_mlp.yaml --set train.epochs=1 [--checkout DIR] [--out PATH]

The job runs in a child Python process whose own peak resident set size is read with
``resource.getrusage(RUSAGE_SELF)`` when the job returns: the driver alone, not the Ray
processes it starts (GCS, raylet, workers; ``RUSAGE_CHILDREN`` or ``/usr/bin/time`` would fold
those in). The baseline, measured in the same run, is the **floor** every driver pays: a child
that imports ``jobs.train`` and starts and stops Ray with the job's ``ray`` section. The data the
driver holds is the difference (``driver_data_mb``).

``--checkout DIR`` runs the job's code from another checkout of rg (the child gets ``cwd=DIR``
and ``PYTHONPATH=DIR``), so one command compares two commits; the JSON names the commit and the
path ``rg`` was imported from. ``--quick`` trains one epoch on synthetic questions (~1 minute).
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
from rg.config import load_config
from rg.runtime import init_ray
from rg.training.ray_train import TrainJobConfig
cfg = load_config(sys.argv[2], TrainJobConfig, sys.argv[3:])
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


def _quick_config(folder: Path) -> Path:
    """A one-epoch MLP training config on 60 synthetic questions, written into ``folder``."""
    from rg.data.rog import write_rog_parquet
    from rg.data.subgraphs import SubgraphConfig, Unbuildable, build_sample
    from rg.data.synthetic import SyntheticConfig, generate
    from rg.graph.kg import KnowledgeGraph

    syn = generate(SyntheticConfig(questions=60))
    kg = KnowledgeGraph.from_triples(syn.triples)
    samples = []
    for question in syn.questions:
        try:
            samples.append(build_sample(kg, question, SubgraphConfig(max_triples=200)).sample)
        except Unbuildable:
            continue
    write_rog_parquet(samples, folder / "synthetic.parquet")
    config = {
        "kind": "train",
        "input": str(folder / "synthetic.parquet"),
        "retriever": {"kind": "mlp", "hidden": 16},
        "train": {"epochs": 1, "questions_per_batch": 4, "eval_ks": [10, 100]},
        "num_workers": 2,
        "run_name": "driver_memory_quick",
        "storage_path": str(folder / "ray_results"),
        "output_dir": str(folder / "out"),
        "ray": {"num_cpus": 2},
    }
    path = folder / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def measure(config: Path, overrides: list[str], checkout: Path) -> dict[str, Any]:
    """Peak driver RSS of ``jobs.train --config config --set ...`` and of the floor, in MB."""
    sets = [x for o in overrides for x in ("--set", o)]
    commit = _commit(checkout)  # before the run: the code that runs, not what is checked out afterwards
    floor = _run_child(FLOOR_CHILD, [str(config.resolve()), *overrides], checkout)
    job = _run_child(JOB_CHILD, ["--config", str(config.resolve()), *sets], checkout)
    if job["rc"] != 0:
        raise RuntimeError(f"jobs.train exited {job['rc']}")
    peak, base = job["peak_rss_kb"] / 1024, floor["peak_rss_kb"] / 1024
    return {
        "command": ["python", "-m", "jobs.train", "--config", str(config), *sets],
        "checkout": str(checkout),
        "commit": commit,
        "rg_path": job["rg_path"],
        "driver_peak_rss_mb": round(peak, 1),
        "floor_peak_rss_mb": round(base, 1),
        "driver_data_mb": round(peak - base, 1),
        "peak_over_floor": round(peak / base, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.driver_memory", description=__doc__.strip().split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one epoch on 60 synthetic questions")
    parser.add_argument("--config", type=Path, help="a jobs.train config (not with --quick)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the rg checkout whose code runs (default: this one)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"{NAME}.json")
    args = parser.parse_args(argv)
    if args.quick == (args.config is not None):
        parser.error("give exactly one of --quick and --config")
    with tempfile.TemporaryDirectory() as tmp:
        config = _quick_config(Path(tmp)) if args.quick else args.config
        result = measure(config, args.overrides, args.checkout.resolve())
    result["quick"] = args.quick
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"driver peak RSS {result['driver_peak_rss_mb']:.0f} MB (floor {result['floor_peak_rss_mb']:.0f} MB, "
        f"{result['peak_over_floor']:.2f}x) at {result['commit']} -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
