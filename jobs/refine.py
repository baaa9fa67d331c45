"""Refine weak retriever supervision with a path selector (ReG stage S(I)) on Ray Data.

    python -m jobs.refine --config configs/refine_synthetic.yaml
    python -m jobs.refine --config configs/refine_webqsp.yaml
    python -m jobs.refine --config configs/refine_webqsp_llm.yaml --set llm.llm.base_url=http://HOST:PORT/v1
    ray job submit --working-dir . -- python -m jobs.refine --config configs/refine_webqsp.yaml

Re-running resumes (ids already labelled are skipped); ``--fresh`` starts over. Prints a
summary; the labels are ``<output_dir>/labels/*.parquet`` and the report
``<output_dir>/refine_report.json``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from rg.cli import job_parser, load_job_config
from rg.supervision.job import RefineConfig, format_report, refine


def main(argv: list[str] | None = None) -> int:
    args = job_parser("jobs.refine", __doc__, RefineConfig, resumable=True).parse_args(argv)
    cfg = load_job_config(args, RefineConfig)
    if cfg is None:
        return 2
    if args.fresh and Path(cfg.output_dir).exists():
        shutil.rmtree(cfg.output_dir)
    print(format_report(refine(cfg, progress=not args.no_progress)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
