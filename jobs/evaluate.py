"""Evaluate retrieval: trained retrievers next to untrained baselines, recall@K against references.

    python -m jobs.evaluate --config configs/evaluate_synthetic.yaml
    ray job submit --working-dir . -- python -m jobs.evaluate --config configs/evaluate_synthetic.yaml

Writes ``retrieval.json``, ``retrieval.md`` (printed) and ``retrieval.png`` to ``output_dir``.
"""

from __future__ import annotations

import sys

from rg.cli import job_parser, load_job_config
from rg.evaluation.job import EvaluateConfig, evaluate


def main(argv: list[str] | None = None) -> int:
    args = job_parser("jobs.evaluate", __doc__, EvaluateConfig).parse_args(argv)
    cfg = load_job_config(args, EvaluateConfig)
    if cfg is None:
        return 2
    _, files = evaluate(cfg)
    print(files.markdown.read_text())
    print(f"results: {files.json}  plot: {files.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
