"""Build per-question subgraph shards from a global KG (or the synthetic default) on Ray Data.

    python -m jobs.build_subgraphs --config configs/build_synthetic.yaml
    python -m jobs.build_subgraphs --config configs/build_metaqa.yaml --set subgraph.max_triples=null
    ray job submit --working-dir . -- python -m jobs.build_subgraphs --config configs/build_metaqa.yaml

Re-running with the same config resumes: shards already written are skipped, and shards with
questions a KG store failed to serve (``kg: {kind: sparql}`` with the endpoint down) are built
again; the job exits 1 while any remain. ``--fresh`` starts over. ``output_dir`` may be an
``s3://`` / ``gs://`` URI (staged in a local folder and pushed as shards finish: rg.run.remote). Prints a coverage table; the full report is ``<output_dir>/build_report.json``.
"""

from __future__ import annotations

import sys
from typing import Sequence
import time

from rg.cli import job_parser, load_job_config, run_job
from rg.jobs.build_subgraphs import BuildSubgraphsConfig, build_subgraphs, format_report
from rg.run.remote import staged


def main(argv: Sequence[str] | None = None) -> int:
    args = job_parser("jobs.build_subgraphs", __doc__, BuildSubgraphsConfig, resumable=True).parse_args(argv)
    cfg = load_job_config(args, BuildSubgraphsConfig)
    if cfg is None:
        return 2
    start = time.perf_counter()
    with staged(cfg, "jobs.build_subgraphs", fresh=args.fresh) as cfg:  # URI outputs: a local staging folder
        report = build_subgraphs(cfg, fresh=args.fresh, progress=not args.no_progress)
    print(format_report(report))
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 1 if report["unfinished"] else 0


if __name__ == "__main__":
    sys.exit(run_job("jobs.build_subgraphs", main))
