"""Export a KG to N-Triples (Freebase layout) and bulk-load it into a local Virtuoso.

    python -m jobs.load_kg --config configs/load_kg_synthetic.yaml
    python -m jobs.load_kg --config configs/load_kg_metaqa.yaml
    python -m jobs.load_kg --config configs/load_kg_metaqa.yaml --set virtuoso.http_port=18890

Starts the server from ``virtuoso.data_dir`` when it is not running (stop it with
``python -m rg.stores.virtuoso stop --data-dir <data_dir>``). Prints the load report and the
``kg: {kind: sparql, ...}`` block that reads the loaded graph.
"""

from __future__ import annotations

import json
import sys
from typing import Sequence

from rg.cli import job_parser, load_job_config, run_job
from rg.jobs.load_kg import LoadKGConfig, load_kg


def main(argv: Sequence[str] | None = None) -> int:
    args = job_parser("jobs.load_kg", __doc__, LoadKGConfig).parse_args(argv)
    cfg = load_job_config(args, LoadKGConfig)
    if cfg is None:
        return 2
    report = load_kg(cfg)
    store = report.pop("store_config")
    print(json.dumps(report, indent=1))
    print("read it with:  kg: " + json.dumps({k: store[k] for k in ("kind", "endpoint", "graph")}))
    return 0


if __name__ == "__main__":
    sys.exit(run_job("jobs.load_kg", main))
