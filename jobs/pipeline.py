"""Run the whole workflow in one command: KG → subgraphs → refined labels → retriever (Ray Train)
→ retrieval and QA evaluation, ending with a results table that says where files and plots went.

    python -m jobs.pipeline --config configs/demo.yaml
    python -m jobs.pipeline --config configs/demo.yaml --fresh
    python -m jobs.pipeline --config configs/pipeline_webqsp.yaml --set qa.chains.limit=100

On a cluster, submit the same command as a Ray job; every stage then joins the cluster
(``RAY_ADDRESS`` is set by ``ray job submit``) and ``train.storage_path`` must be shared storage
(an NFS path or ``s3://`` / ``gs://`` URI) reachable from every node::

    ray job submit --working-dir . -- python -m jobs.pipeline --config configs/demo.yaml
    ray job submit --address http://HEAD:8265 --working-dir . -- \\
        python -m jobs.pipeline --config configs/pipeline_metaqa.yaml --set train.use_gpu=true

Rerunning resumes: stages that finished with the same config (and the same upstream stages) are
skipped, an interrupted stage resumes its own work, and a stage whose config changed is redone
with everything after it. ``--fresh`` redoes every stage. Each stage's section is the config of
its own job (see rg.pipeline.config for the keys filled in when left out); set a stage to
``null`` to skip it and give its output as a path instead.
"""

from __future__ import annotations

import sys
from typing import Sequence

from rg.cli import job_parser, load_job_config, run_job
from rg.run.remote import is_uri, staged
from rg.run.storage import StorageRootError
from rg.pipeline import PipelineConfig, format_report, run_pipeline


def main(argv: Sequence[str] | None = None) -> int:
    args = job_parser("jobs.pipeline", __doc__, PipelineConfig, resumable=True).parse_args(argv)
    cfg = load_job_config(args, PipelineConfig)
    if cfg is None:
        return 2
    if is_uri(cfg.output_dir):
        raise StorageRootError(
            f"`output_dir: {cfg.output_dir}` is a URI, and the pipeline derives its stages' folders from it as local "
            "paths. Fix: give the pipeline a local or mounted output_dir, or run the stage jobs (jobs.build_subgraphs, "
            "jobs.refine, jobs.train, jobs.evaluate) with URI output_dirs"
        )
    with staged(cfg, "jobs.pipeline", fresh=args.fresh) as cfg:  # URI inputs: local staging folders
        report = run_pipeline(cfg, fresh=args.fresh, progress=not args.no_progress)
    print()
    print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(run_job("jobs.pipeline", main))
