"""The whole workflow as one command: synthetic KG (or real data) → subgraphs → refined labels →
retriever trained on Ray Train → retrieval and QA evaluation → one results table.

Each stage is the job that also runs alone (:mod:`rg.jobs`; on the command line ``jobs.build_subgraphs``,
``jobs.refine``, ``jobs.train``, ``jobs.evaluate``) configured by a section of one :class:`PipelineConfig`;
:mod:`rg.pipeline.config` wires the sections together, :mod:`rg.pipeline.state` makes reruns
skip finished stages, :mod:`rg.pipeline.stages` calls the job functions and
:mod:`rg.pipeline.run` runs them in order and formats the results::

    report = run_pipeline(load_config("configs/demo.yaml", PipelineConfig))
    print(format_report(report))
"""

from rg.pipeline.config import PipelineConfig, fill_sections
from rg.pipeline.run import PipelineReport, StageOutcome, format_report, run_pipeline
from rg.pipeline.stages import Stage, StageResult, plan_stages
from rg.pipeline.state import PipelineState, fingerprint

__all__ = [
    "PipelineConfig",
    "PipelineReport",
    "PipelineState",
    "Stage",
    "StageOutcome",
    "StageResult",
    "fill_sections",
    "fingerprint",
    "format_report",
    "plan_stages",
    "run_pipeline",
]
