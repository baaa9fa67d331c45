"""Train a retriever (MLP-DDE, PNA, or the LoRA path planner) on Ray Train and export the best checkpoint.

    python -m jobs.train --config configs/train_synthetic_mlp.yaml
    python -m jobs.train --config configs/train_synthetic_pna.yaml --set train.epochs=10
    python -m jobs.train --config configs/train_planner_synthetic.yaml
    python -m jobs.train --config configs/train_reader_synthetic.yaml
    ray job submit --working-dir . -- python -m jobs.train --config configs/train_synthetic_mlp.yaml

The config's ``kind`` picks the trainer: ``train`` (triple retrievers), ``train_planner`` or
``train_reader`` (the LoRA-tuned local reader).
Resubmitting with the same ``run_name`` and ``storage_path`` resumes from the run's latest
checkpoint (raise the epochs to train further). Planner and reader runs draw each epoch's steps on
the driver (``--no-progress`` hides them). Prints the best validation metrics; the model is
under ``<output_dir>`` with ``<output_dir>/train_report.json``.
"""

from __future__ import annotations

import sys
from typing import Sequence

from rg.cli import config_kind, job_parser, load_job_config, run_job
from rg.run.remote import staged
from rg.jobs.train_planner import PlannerTrainConfig, format_planner_report, train_planner
from rg.jobs.train_retriever import TrainJobConfig, format_report, train_retriever
from rg.jobs.train_reader import ReaderTrainConfig, format_reader_report, train_reader


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("jobs.train", __doc__, TrainJobConfig)
    parser.add_argument("--no-progress", action="store_true", help="hide the step bar of planner and reader runs")
    args = parser.parse_args(argv)
    kind = config_kind(args, TrainJobConfig.KIND)
    if kind is None:
        return 2
    if kind == PlannerTrainConfig.KIND:
        planner_cfg = load_job_config(args, PlannerTrainConfig)
        if planner_cfg is None:
            return 2
        with staged(planner_cfg, "jobs.train") as planner_cfg:
            report = format_planner_report(train_planner(planner_cfg, progress=not args.no_progress))
        print(report)
        return 0
    if kind == ReaderTrainConfig.KIND:
        reader_cfg = load_job_config(args, ReaderTrainConfig)
        if reader_cfg is None:
            return 2
        with staged(reader_cfg, "jobs.train") as reader_cfg:
            report = format_reader_report(train_reader(reader_cfg, progress=not args.no_progress))
        print(report)
        return 0
    cfg = load_job_config(args, TrainJobConfig)
    if cfg is None:
        return 2
    with staged(cfg, "jobs.train") as cfg:  # URI inputs and output_dir: local staging folders
        report = format_report(train_retriever(cfg))
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(run_job("jobs.train", main))
