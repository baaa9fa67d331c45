"""Hyperparameter sweeps on Ray Tune.

    python -m tune.sweep --config configs/sweep_qa_synthetic.yaml
    python -m tune.sweep --config configs/sweep_qa_metaqa.yaml --set name=metaqa_qa_v2

``kind: sweep_qa`` needs no training: the base evaluation's retrieval is scored once and cached,
and every grid point of evidence and reader settings is evaluated against the cached scores as a
plain Tune trial. Rerunning the same ``name`` resumes the sweep. Writes a CSV and Markdown
table, the metric against each parameter, the Pareto front of the metric against its cost, and
the best point as a config for ``python -m jobs.evaluate``.
"""

from __future__ import annotations

import sys

from rg.cli import job_parser, load_job_config
from rg.config import ConfigError
from rg.evaluation.sweep import SweepQAConfig
from tune.qa import format_sweep, run_qa_sweep


def main(argv: list[str] | None = None) -> int:
    parser = job_parser("tune.sweep", __doc__, SweepQAConfig)
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars and Tune's status table")
    args = parser.parse_args(argv)
    cfg = load_job_config(args, SweepQAConfig)
    if cfg is None:
        return 2
    try:
        result = run_qa_sweep(cfg, progress=not args.no_progress)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 2
    print(format_sweep(result, cfg.metric, cfg.cost))
    return 0


if __name__ == "__main__":
    sys.exit(main())
