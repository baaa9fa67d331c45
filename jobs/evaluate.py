"""Evaluate retrieval: trained retrievers next to untrained baselines, recall@K against references.

    python -m jobs.evaluate --config configs/evaluate_synthetic.yaml
    ray job submit --working-dir . -- python -m jobs.evaluate --config configs/evaluate_synthetic.yaml

Writes ``retrieval.json``, ``retrieval.md`` (printed) and ``retrieval.png`` to ``output_dir``.
"""

from __future__ import annotations

import argparse
import sys

from rg.config import ConfigError, load_config
from rg.evaluation.job import EvaluateConfig, evaluate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.evaluate", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="YAML file with `kind: evaluate`")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set limit=100 (repeatable)")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, EvaluateConfig, args.overrides)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 2
    _, files = evaluate(cfg)
    print(files.markdown.read_text())
    print(f"results: {files.json}  plot: {files.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
