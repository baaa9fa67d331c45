"""jobs.privacy_report on a tiny synthetic build: every mode and budget measured, files written, bad configs named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rg.config import ConfigError, validate_config
from rg.data.rog import write_rog_parquet
from rg.jobs.privacy_report import GROUPED, UNSANITISED, PrivacyReportConfig, privacy_report


def test_report_measures_every_mode_and_budget(tmp_path: Path, ray_local) -> None:
    from bench.planner import synthetic_samples

    write_rog_parquet(synthetic_samples(12, seed=0)[:8], tmp_path / "in" / "part-00000.parquet")
    cfg = PrivacyReportConfig(
        inputs=[{"name": "tiny", "input": str(tmp_path / "in")}], limit=6, output_dir=str(tmp_path / "out"),
        modes=["plaintext", "privacy"], budgets=[10, 30], num_actors=1, batch_size=2,
    )
    report = privacy_report(cfg, progress=False)
    settings = [(r["mode"], r["setting"]) for r in report.table]
    views = (UNSANITISED, GROUPED, "≤ 30 nodes", "≤ 10 nodes")
    assert settings == [(m, s) for m in ("plaintext", "privacy") for s in views]
    assert all(r["questions"] == 6 for r in report.table)
    by = {(r["mode"], r["setting"]): r for r in report.table}
    assert by[("plaintext", UNSANITISED)]["unique_share"] == 1.0  # names are shown: every entity is itself
    assert by[("privacy", "≤ 10 nodes")]["nodes"] <= 10 <= by[("privacy", UNSANITISED)]["nodes"]
    assert by[("privacy", GROUPED)]["unique_share"] < by[("privacy", UNSANITISED)]["unique_share"]
    assert by[("privacy", UNSANITISED)]["answer_reachable"] >= by[("privacy", "≤ 10 nodes")]["answer_reachable"]
    assert {p.name for p in Path(cfg.output_dir).iterdir()} >= {
        "privacy_report.json", "privacy_report.md", "privacy_report.png", "privacy_rows.jsonl", "privacy_schema.json"}
    rows = [json.loads(line) for line in (Path(cfg.output_dir) / "privacy_rows.jsonl").read_text().splitlines()]
    assert len(rows) == 6 * 2 * 4 and not any("bad_row" in r for r in rows)
    assert report.markdown.startswith("## Privacy report: tiny (6 questions)")
    names = {e for s in synthetic_samples(12, seed=0)[:6] for t in s.triples for e in (t[0], t[2])
             if len(e) >= 4 and not e.isdigit()}
    written = " ".join((Path(cfg.output_dir) / f).read_text() for f in
                       ("privacy_report.json", "privacy_report.md", "privacy_rows.jsonl"))
    assert len(names) > 50 and not [n for n in names if n in written]  # counts only, no raw name


def test_config_errors_name_the_key() -> None:
    base = {"kind": "privacy_report", "output_dir": "out", "inputs": [{"name": "a", "input": "x"}]}
    with pytest.raises(ConfigError, match="inputs.*repeat"):
        twice = [{"name": "a", "input": "x"}, {"name": "a", "input": "y"}]
        validate_config({**base, "inputs": twice}, PrivacyReportConfig)
    with pytest.raises(ConfigError, match="budgets"):
        validate_config({**base, "budgets": [0]}, PrivacyReportConfig)
    with pytest.raises(ConfigError, match="modes"):
        validate_config({**base, "modes": ["secret"]}, PrivacyReportConfig)
