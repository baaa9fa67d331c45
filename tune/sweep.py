"""Hyperparameter sweeps on Ray Tune.

    python -m tune.sweep --config configs/sweep_qa_synthetic.yaml
    python -m tune.sweep --config configs/sweep_train_synthetic.yaml
    python -m tune.sweep --config configs/sweep_train_metaqa.yaml --set name=metaqa_mlp_v2

``kind: sweep_qa`` needs no training: the base evaluation's retrieval is scored once and cached,
and every grid point of evidence and reader settings is answered from the cached scores as a
plain Tune trial. ``kind: sweep_train`` runs one Ray Train job per grid point of a training
config (the base config first), reporting every epoch to Tune, with ASHA stopping weak trials.
Rerunning the same ``name`` resumes either. Both write a CSV and Markdown table, the metric
against each parameter, the Pareto front of the metric against its cost, and the best point as
a config the jobs accept (``best.yaml``).

Relative paths of the sweep and of its base config resolve against the folder the sweep starts
in (Tune runs each trial in a folder of its own), or, under ``ray job submit``, against the
storage root (``$RG_STORAGE_ROOT`` or ``storage_root:``), as every job's do (:mod:`rg.run.storage`).
"""

from __future__ import annotations

import sys

from rg.cli import config_kind, config_storage_root, job_parser, load_job_config, run_job
from rg.config import ConfigError
from rg.console import user_stream
from rg.run.storage import StorageRootError, paths_root
from rg.jobs.sweep_qa import SweepQAConfig
from rg.jobs.sweep_train import SweepTrainConfig, selection_metric


def main(argv: list[str] | None = None) -> int:
    parser = job_parser("tune.sweep", __doc__, SweepQAConfig)
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars and Tune's status table")
    args = parser.parse_args(argv)
    kind = config_kind(args, SweepQAConfig.KIND)
    if kind not in (SweepQAConfig.KIND, SweepTrainConfig.KIND, None):
        print(f"{args.config}: kind {kind!r} is not a sweep. Fix: use `kind: sweep_qa` or `kind: sweep_train`",
              file=user_stream())
        return 2
    cfg = load_job_config(args, SweepTrainConfig if kind == SweepTrainConfig.KIND else SweepQAConfig)
    if cfg is None:
        return 2
    try:
        root = paths_root(config_storage_root(args))
        if "://" in (root or "") or "://" in cfg.output_dir:
            raise StorageRootError(
                f"a sweep writes its trials with file I/O and is not staged; the storage root {root} or `output_dir: "
                f"{cfg.output_dir}` is a URI. Fix: mount the bucket and use the mount point, or a shared path"
            )
        if isinstance(cfg, SweepTrainConfig):
            from tune.train import format_train_sweep, run_train_sweep

            base, cls = cfg.load_base(root)
            metric = selection_metric(cfg.trial_config(base, cls, {}, root))
            print(format_train_sweep(run_train_sweep(cfg, progress=not args.no_progress, root=root), metric))
        else:
            from tune.qa import format_sweep, run_qa_sweep

            print(format_sweep(run_qa_sweep(cfg, progress=not args.no_progress, root=root), cfg.metric, cfg.cost))
    except ConfigError as err:
        print(err, file=user_stream())
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(run_job("tune.sweep", main))
