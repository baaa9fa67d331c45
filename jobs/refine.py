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

import argparse
import shutil
import sys
from pathlib import Path

from rg.config import ConfigError, load_config
from rg.supervision.job import RefineConfig, format_report, refine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.refine", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="YAML file with `kind: refine`")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set limit=100 (repeatable)")
    parser.add_argument("--fresh", action="store_true", help="delete output_dir first instead of resuming")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, RefineConfig, args.overrides)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 2
    if args.fresh and Path(cfg.output_dir).exists():
        shutil.rmtree(cfg.output_dir)
    print(format_report(refine(cfg, progress=not args.no_progress)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
