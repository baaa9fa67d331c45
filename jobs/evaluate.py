"""Evaluate retrieval (recall@K of retrievers and baselines) or question answering (Hit, F1, cost).

    python -m jobs.evaluate --config configs/evaluate_synthetic.yaml
    python -m jobs.evaluate --config configs/evaluate_qa_synthetic.yaml --set chains=false
    ray job submit --working-dir . -- python -m jobs.evaluate --config configs/evaluate_qa_synthetic.yaml

The config's ``kind`` picks the mode. ``evaluate``: writes ``retrieval.json``, ``retrieval.md``
(printed) and ``retrieval.png`` to ``output_dir``. ``evaluate_qa``: answers the questions with
Ray Data batch inference (retriever → evidence chains → reader) and writes ``qa.json``,
``qa.md`` (printed), ``qa.png`` and ``predictions.jsonl`` to ``output_dir``.
"""

from __future__ import annotations

import sys
from typing import Sequence

from rg.cli import config_kind, job_parser, load_job_config, run_job
from rg.run.remote import staged
from rg.jobs.evaluate import EvaluateConfig, evaluate
from rg.jobs.evaluate_qa import QAEvaluateConfig, evaluate_qa, format_qa
from rg.run.locks import output_lock


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("jobs.evaluate", __doc__, EvaluateConfig)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar (QA mode)")
    args = parser.parse_args(argv)
    kind = config_kind(args, EvaluateConfig.KIND)
    if kind is None:
        return 2
    if kind == QAEvaluateConfig.KIND:
        qa_cfg = load_job_config(args, QAEvaluateConfig)
        if qa_cfg is None:
            return 2
        with staged(qa_cfg, "jobs.evaluate") as qa_cfg, output_lock(qa_cfg.output_dir, "jobs.evaluate"):
            print(format_qa(evaluate_qa(qa_cfg, progress=not args.no_progress)))
        return 0
    cfg = load_job_config(args, EvaluateConfig)
    if cfg is None:
        return 2
    with staged(cfg, "jobs.evaluate") as cfg, output_lock(cfg.output_dir, "jobs.evaluate"):
        _, files = evaluate(cfg)
    print(files.markdown.read_text())
    print(f"results: {files.json.resolve()}  plot: {files.plot.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(run_job("jobs.evaluate", main))
