"""Apply KG edits offline: the same validation, edit log and versions as POST /v1/kg/edits.

    python -m jobs.kg_edit --config configs/serve_demo.yaml --add facts.tsv --delete old.tsv
    python -m jobs.kg_edit --config configs/serve_demo.yaml --check      # the log: records, version, torn tail

``--config`` is a serve config (its application's ``args``; ``--app`` picks one of several) with
``kg_edits`` set. The files hold ``head<TAB>relation<TAB>tail`` lines by name (``id:`` before an
end gives it by id); all of them form one batch, applied all or none as the next KG version. The
served app's edit owner holds the log while it runs: stop it first, or POST the batch to it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

from rg.cli import job_parser, run_job
from rg.config import ConfigError, apply_overrides, read_yaml, validate_config
from rg.kgedits import EditBatch, EditLog, parse_tsv, read_log
from rg.kgedits.editor import KGEditor, editable_store
from serve.config import ServeConfig


def serve_config(path: str, app: str | None, overrides: Sequence[str]) -> ServeConfig:
    """The ServeConfig of ``path``: a serve config's application ``args`` (or the file itself)."""
    data = read_yaml(path)
    if "applications" in data:
        apps = {a.get("name"): a for a in data["applications"]}
        if app is None and len(apps) != 1:
            raise ConfigError(f"{path} has applications {sorted(apps)}. Fix: pick one with --app")
        chosen = apps.get(app) if app is not None else next(iter(apps.values()))
        if chosen is None:
            raise ConfigError(f"{path} has no application {app!r}. Fix: one of {sorted(apps)}")
        data = dict(chosen.get("args", {}))
    cfg = validate_config(apply_overrides(data, overrides), ServeConfig, source=path)
    if cfg.kg_edits is None:
        raise ConfigError(f"{path} does not set kg_edits. Fix: add kg_edits: {{log_path: ...}} to the app's args")
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("jobs.kg_edit", __doc__, ServeConfig)
    parser.add_argument("--app", help="the application of a serve config with several")
    parser.add_argument("--add", action="append", default=[], metavar="TSV", help="triples to add (repeatable)")
    parser.add_argument("--delete", action="append", default=[], metavar="TSV", help="triples to delete (repeatable)")
    parser.add_argument("--check", action="store_true", help="print the log's state and change nothing")
    args = parser.parse_args(argv)
    cfg = serve_config(args.config, args.app, args.overrides)
    assert cfg.kg_edits is not None  # checked by serve_config
    if args.check:
        report = read_log(cfg.kg_edits.log_path)
        print(json.dumps({"log": cfg.kg_edits.log_path, "version": len(report.records),
                          "torn": None if report.torn is None else
                          f"torn last record at byte {report.torn.offset} ({report.torn.size} bytes, "
                          f"{report.torn.reason}); the writer cuts it on open"}))
        return 0
    edits = [e for op, files in (("delete", args.delete), ("add", args.add)) for f in files
             for e in parse_tsv(Path(f).read_text(encoding="utf-8"), op, f)]
    if not edits:
        raise ConfigError("no edits given. Fix: pass --add FILE and/or --delete FILE (or --check)")
    from serve.kg_source import load_kg

    store, _ = load_kg(cfg)
    with EditLog.open(cfg.kg_edits.log_path) as log:
        if log.report.torn is not None:
            print(f"jobs.kg_edit: {log.report.torn.describe()}", file=sys.stderr)
        editor = KGEditor(editable_store(store), log, cfg.kg_edits)
        record = editor.edit(EditBatch.model_validate({"edits": edits}))
    print(json.dumps({"version": record.version, "added": len(record.adds), "deleted": len(record.deletes),
                      "new_entities": record.new_entities, "new_relations": list(record.new_relations),
                      "unchanged": list(record.unchanged), "replayed": editor.replayed}))
    return 0


if __name__ == "__main__":
    sys.exit(run_job("jobs.kg_edit", main))
