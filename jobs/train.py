"""Train a triple retriever (MLP-DDE or PNA) on Ray Train and export the best checkpoint.

    python -m jobs.train --config configs/train_synthetic_mlp.yaml
    python -m jobs.train --config configs/train_synthetic_pna.yaml --set train.epochs=10
    ray job submit --working-dir . -- python -m jobs.train --config configs/train_synthetic_mlp.yaml

Resubmitting with the same ``run_name`` and ``storage_path`` resumes from the run's latest
checkpoint (raise ``train.epochs`` to train further). Prints the best validation recall@K; the
retriever is ``<output_dir>/retriever`` and the report ``<output_dir>/train_report.json``.
"""

from __future__ import annotations

import sys

from rg.cli import job_parser, load_job_config
from rg.training.ray_train import TrainJobConfig, format_report, train_retriever


def main(argv: list[str] | None = None) -> int:
    args = job_parser("jobs.train", __doc__, TrainJobConfig).parse_args(argv)
    cfg = load_job_config(args, TrainJobConfig)
    if cfg is None:
        return 2
    print(format_report(train_retriever(cfg)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
