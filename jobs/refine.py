"""Refine weak retriever supervision with a path selector (ReG stage S(I)) on Ray Data.

    python -m jobs.refine --config configs/refine_synthetic.yaml
    python -m jobs.refine --config configs/refine_webqsp.yaml
    python -m jobs.refine --config configs/refine_webqsp_llm.yaml --set llm.llm.base_url=http://HOST:PORT/v1
    ray job submit --working-dir . -- python -m jobs.refine --config configs/refine_webqsp.yaml

Re-running resumes (ids already labelled are skipped, damaged label parts are redone, and
questions whose LLM call failed for a transient reason are asked again; ``--retry-fallbacks``
says which fallbacks to retry); ``--fresh`` starts over. A second job into the same
``output_dir`` exits 2 naming the one that holds it. An endpoint that does not answer the
preflight probe (``GET <base_url>/models``) stops the job before any Ray work. ``input`` and
``output_dir`` may be ``s3://`` / ``gs://`` URIs (staged in a local folder: rg.run.remote). Prints a
summary; the labels are ``<output_dir>/labels/*.parquet`` and the report
``<output_dir>/refine_report.json``.
"""

from __future__ import annotations

import sys
from typing import Sequence

from rg.cli import job_parser, load_job_config, run_job
from rg.run.remote import staged
from rg.jobs.refine import RefineConfig, format_report, refine


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("jobs.refine", __doc__, RefineConfig, resumable=True)
    parser.add_argument("--retry-fallbacks", choices=["transient", "all", "none"], default="transient",
                        help="earlier weak fallbacks to ask again: transient (connection, timeout, 429, 5xx; "
                        "default), all, or none")
    args = parser.parse_args(argv)
    cfg = load_job_config(args, RefineConfig)
    if cfg is None:
        return 2
    with staged(cfg, "jobs.refine", fresh=args.fresh) as cfg:  # URI inputs and outputs: local staging folders
        report = refine(cfg, progress=not args.no_progress, fresh=args.fresh, retry_fallbacks=args.retry_fallbacks)
    print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(run_job("jobs.refine", main))
