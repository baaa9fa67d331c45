"""Build per-question subgraph shards from a global KG (or the synthetic default) on Ray Data.

    python -m jobs.build_subgraphs --config configs/build_synthetic.yaml
    python -m jobs.build_subgraphs --config configs/build_metaqa.yaml --set subgraph.max_triples=null
    ray job submit --working-dir . -- python -m jobs.build_subgraphs --config configs/build_metaqa.yaml

Re-running with the same config resumes: shards already written are skipped. ``--fresh``
starts over. Prints a coverage table; the full report is ``<output_dir>/build_report.json``.
"""

from __future__ import annotations

import argparse
import sys
import time

from rg.config import ConfigError, load_config
from rg.data.builder import BuildSubgraphsConfig, build_subgraphs, format_report


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m jobs.build_subgraphs", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="YAML file with `kind: build_subgraphs`")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set subgraph.max_triples=2000 (repeatable)")
    parser.add_argument("--fresh", action="store_true", help="delete output_dir first instead of resuming")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, BuildSubgraphsConfig, args.overrides)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 2
    start = time.perf_counter()
    report = build_subgraphs(cfg, fresh=args.fresh, progress=not args.no_progress)
    print(format_report(report))
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
