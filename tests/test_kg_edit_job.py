"""``python -m jobs.kg_edit``: the same edits offline, on the serve config's KG and edit log."""

from __future__ import annotations

import json

import yaml

from jobs.kg_edit import main
from rg.kgedits import read_log
from tests.dualtower_world import TRIPLES


def serve_yaml(tmp_path) -> str:
    kb = tmp_path / "kg.tsv"
    kb.write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in TRIPLES), encoding="utf-8")
    args = {"kg": {"store": {"kind": "memory", "kb": {"path": str(kb), "format": "tsv"}}}, "auth": {"mode": "off"},
            "kg_edits": {"log_path": str(tmp_path / "kg.log")}}
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump({"applications": [{"name": "rg", "import_path": "serve.app:build_app",
                                                       "args": args}]}))
    return str(path)


def test_add_and_delete_files_make_one_version_each_run(tmp_path, capsys):
    config = serve_yaml(tmp_path)
    (tmp_path / "add.tsv").write_text("Casino\twritten_by\tAnn Newwriter\n# a comment\n")
    (tmp_path / "del.tsv").write_text("Casino\twritten_by\tNicholas Pileggi\n")
    assert main(["--config", config, "--add", str(tmp_path / "add.tsv"), "--delete", str(tmp_path / "del.tsv")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["version"] == 1 and out["added"] == 1 and out["deleted"] == 1
    assert list(out["new_entities"].values()) == ["Ann Newwriter"]
    (tmp_path / "more.tsv").write_text("Ann Newwriter\twritten_by\tAnn Newwriter\n")
    assert main(["--config", config, "--add", str(tmp_path / "more.tsv")]) == 0  # the replay knows Ann Newwriter
    out = json.loads(capsys.readouterr().out)
    assert out["version"] == 2 and out["replayed"] == 1 and out["new_entities"] == {}
    assert main(["--config", config, "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 2


def test_a_bad_batch_is_one_line_naming_the_triple_and_nothing_is_written(tmp_path, job_line):
    import subprocess
    import sys

    config = serve_yaml(tmp_path)
    (tmp_path / "bad.tsv").write_text("Heat\trelease_year\t1996\nHeat\tdirected_byy\tMichael Mann\n")
    proc = subprocess.run([sys.executable, "-m", "jobs.kg_edit", "--config", config, "--add", str(tmp_path / "bad.tsv")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    line = job_line(proc.stderr, "jobs.kg_edit")
    assert "edit 1: add (Heat, directed_byy, Michael Mann): unknown_relation" in line
    assert "allow_new_relations" in line
    assert read_log(tmp_path / "kg.log").records == []
