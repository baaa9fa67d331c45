"""Measure the privacy/utility trade-off of the Brain's view (PrivGemo §4.1) over a set of questions.

    python -m jobs.privacy_report --config configs/privacy_synthetic.yaml
    python -m jobs.privacy_report --config configs/privacy_metaqa.yaml
    python -m jobs.privacy_report --config configs/privacy_webqsp.yaml

For every question and privacy mode, the anonymised working subgraph is measured as it is and
after the structure sanitiser at each node budget: the share of exposed entities whose 2-hop
signature is unique, the smallest signature class k, nodes and edges exposed, and whether an
answer is still reachable. Writes privacy_report.json, .md (printed), .png and the per-question
rows (privacy_rows.jsonl) to ``output_dir``.
"""

from __future__ import annotations

import sys
from typing import Sequence

from rg.cli import job_parser, load_job_config, run_job
from rg.run.locks import output_lock
from rg.jobs.privacy_report import PrivacyReportConfig, privacy_report


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("jobs.privacy_report", __doc__, PrivacyReportConfig)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    cfg = load_job_config(args, PrivacyReportConfig)
    if cfg is None:
        return 2
    with output_lock(cfg.output_dir, "jobs.privacy_report"):
        report = privacy_report(cfg, progress=not args.no_progress)
    print(report.markdown)
    print("  ".join(f"{kind}: {path.resolve()}" for kind, path in report.files.items()))
    return 0


if __name__ == "__main__":
    sys.exit(run_job("jobs.privacy_report", main))
