"""Outputs and inputs at filesystem URIs (issue 28), with real ``file://`` URIs: a local staging
folder pulled before the job and pushed as work finishes; a damaged remote file refused naming it;
the lock object; build → refine → train under a URI storage root; a killed job resumed from what
it pushed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from jobs import build_subgraphs as build_job
from jobs import refine as refine_job
from jobs import train as train_job
from rg.cli import run_job
from rg.run.integrity import DamagedFileError, write_json_atomic
from rg.run.remote import LOCK_OBJECT, RemoteDir, staged
from rg.run.storage import JOB_ENV, StorageRootError
from rg.run.locks import OutputLockedError
from rg.jobs.refine import RefineConfig
from rg.data.labels import read_labels
from tests.scripted_server import Reply, Respond, Script, ScriptedServer
from tests.synthetic_data import write_synthetic_parquet
from tests.test_refine_job import samples_file, slow_llm_config  # noqa: F401 — fixture

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def staging(tmp_path, monkeypatch) -> Path:
    """A staging root of the test's own and a fast push interval."""
    monkeypatch.setenv("RG_STAGING_DIR", str(tmp_path / "staging"))
    monkeypatch.setenv("RG_PUSH_INTERVAL_S", "0.2")
    return tmp_path / "staging"


def shard(folder: Path, name: str, n: int) -> None:
    """A parquet shard of ``n`` synthetic samples with its stats file, as the builder writes them."""
    write_synthetic_parquet(folder / f"{name}.parquet", questions=n, max_triples=50)
    write_json_atomic({"built": n}, folder / f"{name}.stats.json")


def test_push_then_pull_mirrors_verifies_and_skips_temporary_files(tmp_path, staging, monkeypatch):
    uri = f"file://{tmp_path / 'bucket' / 'out'}"
    out = RemoteDir(uri)
    shard(out.local / "src", "shard-00000", 3)
    (out.local / "report.json").write_text("{}")
    (out.local / ".report.json.123.abc.tmp").write_text("half")
    assert out.changed() == ["report.json", "src/shard-00000.parquet", "src/shard-00000.stats.json"]  # stats last
    assert out.push() == ["report.json", "src/shard-00000.parquet", "src/shard-00000.stats.json"]
    remote = tmp_path / "bucket" / "out"
    assert sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*") if p.is_file()) == [
        "report.json", "src/shard-00000.parquet", "src/shard-00000.stats.json"]
    assert out.changed() == []
    (out.local / "report.json").write_text('{"a": 1}')
    assert out.changed() == ["report.json"]
    assert out.changed(settled=True) == []  # the push thread waits until a file stops changing
    assert out.changed(settled=True) == ["report.json"]

    monkeypatch.setenv("RG_STAGING_DIR", str(tmp_path / "other-machine"))
    fresh = RemoteDir(uri)
    (fresh.local / "stale").mkdir(parents=True)
    (fresh.local / "stale" / "unpushed.parquet").write_text("x")  # a killed run's file the URI never got
    assert fresh.pull() == fresh.local
    assert sorted(p.relative_to(fresh.local).as_posix() for p in fresh.local.rglob("*") if p.is_file()) == [
        "report.json", "src/shard-00000.parquet", "src/shard-00000.stats.json"]
    assert fresh.changed() == []  # what was pulled is not pushed back

    os.truncate(remote / "src" / "shard-00000.parquet", 100)
    with pytest.raises(DamagedFileError, match=rf"{uri}/src/shard-00000\.parquet: not a readable parquet file .*"
                                               r"Fix: delete .* and rerun the job that wrote it"):
        fresh.pull()
    write_json_atomic({"built": 5}, remote / "src" / "shard-00000.stats.json")
    shard(tmp_path / "again", "shard-00000", 3)
    (remote / "src" / "shard-00000.parquet").write_bytes((tmp_path / "again" / "shard-00000.parquet").read_bytes())
    with pytest.raises(DamagedFileError, match=r"shard-00000\.parquet: holds 3 rows, its stats recorded 5"):
        RemoteDir(uri, "in").pull()
    write_json_atomic({"built": 3}, remote / "src" / "shard-00000.stats.json")
    pulled = RemoteDir(uri, "in").pull(verify_all=True)
    assert pulled == tmp_path / "other-machine" / "in" / pulled.name
    assert (pulled / "report.json").stat().st_mode & 0o777 == 0o444  # an input's copy is read-only


def test_lock_object_refuses_a_live_holder_and_takes_over_a_dead_one(tmp_path, staging, monkeypatch):
    uri = f"file://{tmp_path / 'bucket' / 'out'}"
    first, second = RemoteDir(uri), RemoteDir(uri)
    first.acquire("jobs.refine")
    record = json.loads((tmp_path / "bucket" / "out" / LOCK_OBJECT).read_text())
    assert (record["pid"], record["job"], record["id"]) == (os.getpid(), "jobs.refine", first.lock_id)
    with pytest.raises(OutputLockedError, match=rf"output_dir {uri} is in use by pid {os.getpid()} on .*"
                                                r"last heartbeat \d+ s ago\)\. Fix: wait"):
        second.acquire("jobs.refine")
    first.renew()
    monkeypatch.setenv("RG_LOCK_STALE_S", "0.01")  # a holder whose heartbeat stopped is taken over
    time.sleep(0.05)
    second.acquire("jobs.refine")
    with pytest.raises(OutputLockedError, match="took the lock object"):
        first.renew()
    first.release()  # not its lock any more: left alone
    assert json.loads((tmp_path / "bucket" / "out" / LOCK_OBJECT).read_text())["id"] == second.lock_id
    second.release()
    assert not (tmp_path / "bucket" / "out" / LOCK_OBJECT).exists()

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    monkeypatch.setenv("RG_LOCK_STALE_S", "600")
    first.acquire("jobs.refine")
    held = json.loads((tmp_path / "bucket" / "out" / LOCK_OBJECT).read_text())
    (tmp_path / "bucket" / "out" / LOCK_OBJECT).write_text(json.dumps({**held, "id": "x", "pid": int(dead.stdout)}))
    second.acquire("jobs.refine")  # a dead process on this host: taken over at once

    shard(tmp_path / "bucket" / "in", "shard-00000", 2)
    cfg = RefineConfig(input=f"file://{tmp_path / 'bucket' / 'in'}", output_dir=uri)
    with pytest.raises(OutputLockedError, match=f"output_dir {uri} is in use by pid {os.getpid()}"):
        with staged(cfg, "jobs.refine"):
            pass
    assert not (staging / "in").exists()  # refused before any input was pulled


def test_an_actor_on_another_node_pushes_its_shard_itself(ray_local, tmp_path, staging):
    from rg.run.remote import ShardPusher, remote_output_of

    uri = f"file://{tmp_path / 'bucket' / 'subgraphs'}"
    cfg = RefineConfig(input=str(tmp_path / "in.parquet"), output_dir=uri)
    with staged(cfg, "jobs.build_subgraphs") as local:
        out = Path(local.output_dir)
        assert remote_output_of(out) == uri and remote_output_of(tmp_path) is None
        shard(out / "src", "shard-00000", 2)
        files = (out / "src" / "shard-00000.parquet", out / "src" / "shard-00000.stats.json")
        here = ray_local.get_runtime_context().get_node_id()
        ShardPusher(uri, str(out), here)(*files)  # on the driver's node: the driver's thread pushes
        assert not (tmp_path / "bucket" / "subgraphs" / "src").exists()
        ShardPusher(uri, str(out), "another-node")(*files)
        assert (tmp_path / "bucket" / "subgraphs" / "src" / "shard-00000.stats.json").is_file()


def test_fresh_is_refused_for_a_uri_output_and_paths_without_uris_pass(tmp_path, staging):
    cfg = RefineConfig(input=str(tmp_path / "in.parquet"), output_dir=f"file://{tmp_path / 'out'}")
    with pytest.raises(StorageRootError, match=r"--fresh with `output_dir: file://.*rg deletes no remote file"):
        with staged(cfg, "jobs.refine", fresh=True):
            pass
    local = RefineConfig(input=str(tmp_path / "in.parquet"), output_dir=str(tmp_path / "out"))
    with staged(local, "jobs.refine", fresh=True) as same:
        assert same is local
    with pytest.raises(FileNotFoundError, match=r"`input: file://.*/nothing` holds no file"):
        with staged(RefineConfig(input=f"file://{tmp_path / 'nothing'}", output_dir=str(tmp_path)), "jobs.refine"):
            pass


def test_pipeline_refuses_a_uri_output_dir_in_one_line(tmp_path, capsys, job_line):
    from jobs import pipeline as pipeline_job

    argv = ["--config", str(ROOT / "configs" / "demo.yaml"), "--set", f"output_dir=file://{tmp_path / 'demo'}"]
    assert run_job("jobs.pipeline", pipeline_job.main, argv) == 2
    line = job_line(capsys.readouterr().err, "jobs.pipeline")
    assert f"`output_dir: file://{tmp_path / 'demo'}` is a URI" in line and "Fix: give the pipeline a local" in line
    assert not (tmp_path / "demo").exists()


def test_a_sweep_refuses_a_uri_root_in_one_line(tmp_path, monkeypatch, capsys, job_line):
    from tune import sweep as sweep_job

    monkeypatch.setenv(JOB_ENV, json.dumps({"metadata": {"job_submission_id": "raysubmit_sweep"}}))
    monkeypatch.setenv("RG_STORAGE_ROOT", f"file://{tmp_path / 'bucket'}")
    argv = ["--config", str(ROOT / "configs" / "sweep_train_synthetic.yaml"), "--no-progress"]
    assert run_job("tune.sweep", sweep_job.main, argv) == 2
    assert f"the storage root file://{tmp_path / 'bucket'}" in job_line(capsys.readouterr().err, "tune.sweep")


@pytest.mark.slow
def test_build_refine_train_under_a_uri_storage_root(ray_local, tmp_path, staging, monkeypatch, capsys, job_line):
    """The shipped configs' relative paths in a submitted job resolve to file:// URIs; each job stages,
    pulls its URI inputs and pushes its outputs; training resumes from checkpoints at the URI."""
    root = tmp_path / "bucket"
    monkeypatch.setenv(JOB_ENV, json.dumps({"metadata": {"job_submission_id": "raysubmit_uri"}}))
    monkeypatch.setenv("RG_STORAGE_ROOT", f"file://{root}")
    build = ["--config", "configs/build_synthetic.yaml", "--set", "synthetic.questions=40", "--set", "shard_size=10",
             "--no-progress"]
    assert run_job("jobs.build_subgraphs", build_job.main, build) == 0
    shards = root / "outputs" / "synthetic" / "synthetic"
    assert sorted(p.name for p in shards.glob("*.parquet")) == [f"shard-0000{i}.parquet" for i in range(4)]
    assert not (root / "outputs" / "synthetic" / LOCK_OBJECT).exists()  # released at the end
    refine = ["--config", "configs/refine_synthetic.yaml", "--set", "num_actors=1", "--no-progress"]
    assert run_job("jobs.refine", refine_job.main, refine) == 0
    labels = root / "outputs" / "refine_synthetic" / "labels"
    assert len(read_labels(labels)) == 40 and len(list(labels.glob("part-*.stats.json"))) >= 1
    train = ["--config", "configs/train_synthetic_mlp.yaml", "--set", "num_workers=1", "--set", "labels.source=refined",
             "--set", "labels.path=outputs/refine_synthetic/labels", "--set", "train.epochs="]
    assert run_job("jobs.train", train_job.main, [*train[:-1], train[-1] + "1"]) == 0
    model = root / "outputs" / "train_synthetic_mlp"
    assert (model / "retriever").is_dir() and json.loads((model / "train_report.json").read_text())["start_epoch"] == 0
    assert list((root / "outputs" / "ray_results" / "train_synthetic_mlp").glob("checkpoint_*"))
    capsys.readouterr()
    assert run_job("jobs.train", train_job.main, [*train[:-1], train[-1] + "2"]) == 0
    report = json.loads((model / "train_report.json").read_text())
    assert report["resumed"] is True and report["start_epoch"] == 1
    assert [h["epoch"] for h in report["history"]] == [0, 1]

    os.truncate(shards / "shard-00002.parquet", 200)  # damaged at the URI: refused, named by its URI
    assert run_job("jobs.refine", refine_job.main, refine) == 2
    line = job_line(capsys.readouterr().err, "jobs.refine")
    assert f"file://{shards}/shard-00002.parquet: not a readable parquet file" in line and "Fix: delete" in line
    assert run_job("jobs.build_subgraphs", build_job.main, build) == 2
    assert f"file://{shards}/shard-00002.parquet" in job_line(capsys.readouterr().err, "jobs.build_subgraphs")


@pytest.mark.slow
def test_killed_refine_resumes_from_what_it_pushed(
    ray_local, samples_file, tmp_path, staging, monkeypatch  # noqa: F811
):
    """SIGKILL during an LLM refine into a file:// URI; the rerun (another staging folder, as on
    another machine) finds the pushed parts, asks only the rest, and ends with every question once."""

    def answer(body: dict) -> Reply:  # deterministic per prompt, slow enough to be killed midway (as test_refine_job)
        n = body["messages"][-1]["content"].split("Task:", 1)[1].count("\nPath ")
        return Reply(f"ans: Path {1 + len(body['messages'][-1]['content']) % max(n, 1)}", delay_s=0.15)

    uri = f"file://{tmp_path / 'bucket' / 'refined'}"
    remote = tmp_path / "bucket" / "refined" / "labels"
    with ScriptedServer(Script.always(Respond(answer))) as srv:
        config = tmp_path / "job.yaml"
        config.write_text(yaml.safe_dump({"kind": "refine", **slow_llm_config(samples_file, uri, srv.base_url)}))
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-m", "jobs.refine", "--config", str(config), "--no-progress"],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        deadline = time.monotonic() + 600
        while not list(remote.glob("part-*.stats.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert list(remote.glob("part-*.stats.json")), "no label part reached the URI within 600 s"
        assert (tmp_path / "bucket" / "refined" / LOCK_OBJECT).exists()  # the killed job's lock object
        pushed = {p.with_suffix("").with_suffix(".parquet") for p in remote.glob("part-*.stats.json")}
        partial = {x.id for part in pushed for x in read_labels(part)}
        assert 0 < len(partial) < 40, "the job should have been killed halfway"

        monkeypatch.setenv("RG_STAGING_DIR", str(tmp_path / "another-machine"))
        asked = len(srv.chat_requests)
        code = run_job("jobs.refine", refine_job.main, ["--config", str(config), "--no-progress"])
        assert code == 0
        assert len(srv.chat_requests) - asked <= 40 - len(partial)  # the pushed questions are not asked again
    report = json.loads((tmp_path / "bucket" / "refined" / "refine_report.json").read_text())
    assert report["resumed"] == len(partial) and report["this_run"] == 40 - len(partial)
    labels = read_labels(remote)
    assert len(labels) == len({x.id for x in labels}) == 40  # every question once, none doubled
    assert not (tmp_path / "bucket" / "refined" / LOCK_OBJECT).exists()


@pytest.fixture
def s3_server(tmp_path, monkeypatch):
    """A moto S3 server on 127.0.0.1 (a real S3 protocol endpoint), stopped by its PID; bucket ``rg-test``."""
    import shutil
    import socket

    from rg.run.ports import free_port

    server = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which("moto_server")
    if server is None:
        pytest.skip("moto_server not installed: pip install 'moto[server]' (in the `test` extra)")
    port = free_port()
    proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for name, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                            "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}.items():
            monkeypatch.setenv(name, value)
        import pyarrow.fs as pafs

        deadline, listening = time.monotonic() + 60, False
        while not listening and time.monotonic() < deadline and proc.poll() is None:  # until the server listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                listening = True
            except OSError:
                time.sleep(0.2)
        assert listening, "moto_server did not start within 60 s"
        s3 = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", allow_bucket_creation=True)
        s3.create_dir("rg-test")
        yield s3
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_refine_against_an_s3_server(ray_local, samples_file, tmp_path, staging, s3_server, monkeypatch):  # noqa: F811
    """Input and output at s3:// URIs of a moto server: the labels and report land in the bucket, a
    rerun from another staging folder resumes every question from them."""
    with s3_server.open_output_stream("rg-test/in/samples.parquet") as sink:
        sink.write(samples_file.read_bytes())
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({"kind": "refine", "input": "s3://rg-test/in/samples.parquet",
                                      "output_dir": "s3://rg-test/out/refined", "num_actors": 1, "actor_cpus": 0.5}))
    assert run_job("jobs.refine", refine_job.main, ["--config", str(config), "--no-progress"]) == 0
    import pyarrow.fs as pafs

    names = sorted(i.path for i in s3_server.get_file_info(pafs.FileSelector("rg-test/out/refined", recursive=True))
                   if i.type == pafs.FileType.File)
    assert "rg-test/out/refined/refine_report.json" in names and LOCK_OBJECT not in " ".join(names)
    assert any(n.endswith(".stats.json") for n in names) and any(n.endswith(".parquet") for n in names)
    monkeypatch.setenv("RG_STAGING_DIR", str(tmp_path / "another-machine"))
    assert run_job("jobs.refine", refine_job.main, ["--config", str(config), "--no-progress"]) == 0
    with s3_server.open_input_stream("rg-test/out/refined/refine_report.json") as source:
        report = json.loads(source.read())
    assert (report["questions"], report["resumed"], report["this_run"]) == (40, 40, 0)
