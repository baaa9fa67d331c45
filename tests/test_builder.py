"""The Ray Data subgraph builder and its job entry point, end to end on tiny inputs."""

from __future__ import annotations

import json

import pytest

from rg.config import ConfigError, load_config
from rg.jobs.build_subgraphs import BuildSubgraphsConfig, build_subgraphs
from rg.data.rog import read_rog
from jobs import build_subgraphs as job

KB = "\n".join(
    [
        "Film A|directed_by|Ann Lee",
        "Film A|written_by|Ann Lee",
        "Film A|starred_actors|Bo Chen",
        "Film B|starred_actors|Bo Chen",
        "Film B|release_year|1999",
        "Film C|directed_by|Ann Lee",
    ]
)
QUESTIONS = "\n".join(
    [
        "what did [Ann Lee] direct\tFilm A|Film C",  # covered
        "what year was [Film B] released\t1999",  # covered
        "no tab here [Film A]",  # malformed
        "who directed [Film Z]\tAnn Lee",  # topic absent from the KB
        "what did [Bo Chen] star in\tFilm A|Film B|Film Q",  # Film Q is not in the KB
    ]
)


def make_config(tmp_path, **extra) -> BuildSubgraphsConfig:
    (tmp_path / "kb.txt").write_text(KB + "\n")
    (tmp_path / "qs.txt").write_text(QUESTIONS + "\n")
    data = {
        "output_dir": str(tmp_path / "out"),
        "kb": {"path": str(tmp_path / "kb.txt"), "format": "metaqa"},
        "questions": [{"name": "hop1", "path": str(tmp_path / "qs.txt"), "format": "metaqa", "hops": 1}],
        "shard_size": 2,
        "num_actors": 2,
        **extra,
    }
    return BuildSubgraphsConfig.model_validate(data)


def test_build_counts_every_line_and_resumes(ray_local, tmp_path):
    cfg = make_config(tmp_path)
    report = build_subgraphs(cfg, progress=False)
    s = report["sources"]["hop1"]
    assert (s["lines"], s["built"], s["covered"], s["bad_total"]) == (5, 3, 2, 2)
    assert s["bad"] == {"no_tab": 1, "topic_not_in_kg": 1}
    assert s["shards"] == 3 and s["resumed_lines"] == 0
    first = {x.id: x for x in read_rog(tmp_path / "out" / "hop1")}
    assert sorted(first) == ["metaqa-1hop-test-0", "metaqa-1hop-test-1", "metaqa-1hop-test-4"]
    assert set(first["metaqa-1hop-test-0"].triples) == {
        ("Film A", "directed_by", "Ann Lee"),
        ("Film A", "written_by", "Ann Lee"),
        ("Film C", "directed_by", "Ann Lee"),
    }
    assert json.loads((tmp_path / "out" / "build_report.json").read_text())["sources"]["hop1"]["built"] == 3

    # simulate a crash after shard 0 and 2 were written: shard 1 lost its stats file
    (tmp_path / "out" / "hop1" / "shard-00001.stats.json").unlink()
    again = build_subgraphs(cfg, progress=False)["sources"]["hop1"]
    assert again["resumed_lines"] == 3 and again["lines"] == 5 and again["built"] == 3
    assert {x.id: x for x in read_rog(tmp_path / "out" / "hop1")} == first


def test_changed_config_refuses_to_mix_shards(ray_local, tmp_path):
    build_subgraphs(make_config(tmp_path), progress=False)
    changed = make_config(tmp_path, subgraph={"max_triples": 1})
    with pytest.raises(ValueError, match="different config.*--fresh"):
        build_subgraphs(changed, progress=False)
    report = build_subgraphs(changed, fresh=True, progress=False)
    assert report["sources"]["hop1"]["truncated"] >= 1


def test_job_runs_synthetic_default(ray_local, tmp_path, capsys):
    rc = job.main([
        "--config", "configs/build_synthetic.yaml", "--no-progress",
        "--set", f"output_dir={tmp_path / 'syn'}", "--set", "synthetic.questions=40",
    ])
    assert rc == 0
    out = capsys.readouterr().out
    assert "synthetic" in out and "covered" in out
    report = json.loads((tmp_path / "syn" / "build_report.json").read_text())
    assert report["sources"]["synthetic"]["lines"] == 40
    assert report["sources"]["synthetic"]["covered"] == 40  # gold answers lie within the hop radius
    samples = list(read_rog(tmp_path / "syn" / "synthetic"))
    assert len(samples) == 40 and all(s.relation_paths for s in samples)


def test_job_reports_bad_config(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: build_subgraphs\noutput_dir: o\nsynthetic: {}\nnum_actor: 2\n")
    assert job.main(["--config", str(bad)]) == 2
    assert "did you mean 'num_actors'" in capsys.readouterr().err
    with pytest.raises(ConfigError):
        load_config(bad, BuildSubgraphsConfig)
