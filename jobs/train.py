"""Train a triple retriever (MLP-DDE or PNA) on Ray Train and export the best checkpoint.

    python -m jobs.train --config configs/train_synthetic_mlp.yaml
    python -m jobs.train --config configs/train_synthetic_pna.yaml --set train.epochs=10
    ray job submit --working-dir . -- python -m jobs.train --config configs/train_synthetic_mlp.yaml

Resubmitting with the same ``run_name`` and ``storage_path`` resumes from the run's latest
checkpoint (raise ``train.epochs`` to train further). Prints the best validation recall@K; the
retriever is ``<output_dir>/retriever`` and the report ``<output_dir>/train_report.json``.
"""

from __future__ import annotations

import argparse
import sys

from rg.config import ConfigError, load_config
from rg.training.ray_train import TrainJobConfig, format_report, train_retriever


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.train", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="YAML file with `kind: train`")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set train.epochs=10 (repeatable)")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, TrainJobConfig, args.overrides)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 2
    print(format_report(train_retriever(cfg)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
