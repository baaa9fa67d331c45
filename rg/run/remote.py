"""Job outputs and inputs at pyarrow-filesystem URIs (``s3://``, ``gs://``, ``file://``) via a local staging folder.

rg's jobs write with file I/O (atomic renames, ``fsync``, OS locks), which object stores do not
offer. So a job whose ``output_dir`` is a URI works in a local *staging folder* and mirrors it:

1. **Before it starts**, the staging folder is made a copy of what the URI holds (files missing
   or different locally are downloaded; local files the URI does not hold are removed), so a
   rerun finds the finished shards, label parts and reports and resumes. Every parquet file
   with a stats file is verified as it arrives (footer reads, row count as recorded); a damaged
   one stops the job naming its URI and the fix.
2. **While it runs**, a background thread pushes every ``$RG_PUSH_INTERVAL_S`` seconds (default 5)
   each new or changed file that has not changed since the previous scan (so a file written in
   place is not pushed halfway): a shard or labels part before its stats file, so the URI never
   holds stats without their file. Temporary files are never pushed.
3. **At the end** (also after an error or Ctrl-C) it pushes once more.

Pushes write to a temporary name and move it into place where the filesystem can (a local or
mounted ``file://`` path); an object store's PUT is already all-or-nothing. Nothing at the URI
is ever deleted but the lock object this job wrote. Inputs at a URI (a later job reading an
earlier job's output) are pulled into a staging folder of their own, read-only, and verified the
same way.

Object stores have no OS lock. One writer per output is kept by a **lock object**
``<uri>/.rg-lock.json`` holding the job, host, pid, a random id and a heartbeat the push thread
renews; a second job exits at once naming the holder, unless the heartbeat is older than
``$RG_LOCK_STALE_S`` (default 120) seconds or the holder is a dead process on this host. The
holder checks before each push that the object still names it and stops pushing otherwise. Two
jobs starting within the same moment can both write the object (object stores offer no
create-if-absent here); the later write wins and the other job stops at its next push.

The staging folder is ``$RG_STAGING_DIR/out/<sha256 of the URI>`` (``in/`` for inputs), with
``~/.cache/rg/staging`` as the default root.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, TypeVar

from pydantic import BaseModel

from rg.console import user_stream
from rg.run.integrity import DamagedFileError, check_parquet, parquet_rows
from rg.run.storage import PATH_KEYS, StorageRootError, staging_root
from rg.run.locks import OutputLockedError

PUSH_INTERVAL_ENV = "RG_PUSH_INTERVAL_S"
LOCK_STALE_ENV = "RG_LOCK_STALE_S"
LOCK_OBJECT = ".rg-lock.json"
OUTPUT_KEYS = frozenset({"output_dir"})
"""Config keys whose URI values are outputs (staged and pushed); other path keys are inputs."""
NATIVE_KEYS = frozenset({"storage_path"})
"""Keys whose URIs rg hands to Ray as they are (Ray Train writes checkpoints to a URI itself)."""
STATS_SUFFIX = ".stats.json"

M = TypeVar("M", bound=BaseModel)


def is_uri(path: str) -> bool:
    """Whether ``path`` is a filesystem URI (``scheme://...``) rather than a local path."""
    return "://" in path


def staging_dir(uri: str, role: str = "out") -> Path:
    """The local staging folder of ``uri``: deterministic per URI and role (``out`` or ``in``)."""
    return Path(staging_root()) / role / hashlib.sha256(uri.rstrip("/").encode()).hexdigest()[:24]


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise StorageRootError(f"${name}={raw!r} is not a number of seconds. Fix: set it to e.g. {default:g}") from None
    if value <= 0:
        raise StorageRootError(f"${name}={raw!r} must be > 0 seconds. Fix: set it to e.g. {default:g}")
    return value


def _skipped(rel: str) -> bool:
    """Files never mirrored: temporary files of atomic writes, lock files and the lock object."""
    name = rel.rsplit("/", 1)[-1]
    return name.endswith(".tmp") or ".rg-lock" in name or ".rg-tmp-" in name


def _expected_rows(stats: Path) -> int | None:
    try:
        data = json.loads(stats.read_text())
    except (OSError, ValueError):
        return None
    value = data.get("rows", data.get("built"))
    return int(value) if isinstance(value, int) else None


class RemoteDir:
    """A folder at a filesystem URI mirrored by a local staging folder.

    Args:
        uri: The folder's URI, e.g. ``s3://bucket/rg/refined`` or ``file:///mnt/out``.
        role: ``out`` (pulled, pushed, locked) or ``in`` (pulled read-only).
        local: The staging folder (default :func:`staging_dir`; a Ray actor passes the driver's).
    """

    def __init__(self, uri: str, role: str = "out", local: Path | None = None) -> None:
        import pyarrow.fs as pafs

        self.uri = uri.rstrip("/")
        self.fs, base = pafs.FileSystem.from_uri(self.uri)
        self.base = base.rstrip("/")
        self.local = local if local is not None else staging_dir(self.uri, role)
        self.read_only = role == "in"
        self.lock_id = uuid.uuid4().hex
        self._pushed: dict[str, tuple[int, int]] = {}
        self._seen: dict[str, tuple[int, int]] = {}
        self._atomic_move = self.fs.type_name == "local"

    def _remote(self, rel: str) -> str:
        return f"{self.base}/{rel}" if rel else self.base

    def _name(self, rel: str) -> str:
        return f"{self.uri}/{rel}" if rel else self.uri

    def remote_files(self) -> dict[str, tuple[int, int]]:
        """Relative path → (size, mtime in ns) of every file under the URI (none when it does not exist)."""
        import pyarrow.fs as pafs

        info = self.fs.get_file_info(self.base)
        if info.type == pafs.FileType.File:
            return {"": (int(info.size), int(info.mtime_ns or 0))}
        if info.type == pafs.FileType.NotFound:
            return {}
        selector = pafs.FileSelector(self.base, recursive=True, allow_not_found=True)
        cut = len(self.base) + 1
        return {i.path[cut:]: (int(i.size), int(i.mtime_ns or 0)) for i in self.fs.get_file_info(selector)
                if i.type == pafs.FileType.File and not _skipped(i.path[cut:])}

    def pull(self, verify_all: bool = False) -> Path:
        """Make the staging folder a verified copy of the URI; return the local path (a file for a file URI).

        Args:
            verify_all: Also check the footer of parquet files without a stats file (inputs).

        Raises:
            DamagedFileError: naming the URI of a parquet file whose footer does not read or whose
                row count differs from its stats.
        """
        files = self.remote_files()
        if "" in files:  # a single file
            target = self.local / self.uri.rsplit("/", 1)[-1]
            self._download("", target, files[""])
            self._verify(target, "", verify_all)
            return target
        self.local.mkdir(parents=True, exist_ok=True)
        for path in sorted(p for p in self.local.rglob("*") if p.is_file()):
            rel = path.relative_to(self.local).as_posix()
            if rel not in files:
                path.unlink()  # the URI is the truth: an unpushed file of a killed run is redone
        for rel, stamp in sorted(files.items()):
            self._download(rel, self.local / rel, stamp)
        for rel in files:
            self._verify(self.local / rel, rel, verify_all)
        return self.local

    def _download(self, rel: str, target: Path, stamp: tuple[int, int]) -> None:
        """Copy one file from the URI unless the local copy has its size and modification time."""
        if target.is_file() and self._stamp(target) == stamp:
            self._pushed[rel] = stamp
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            with self.fs.open_input_stream(self._remote(rel)) as source, open(temporary, "wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
            os.utime(temporary, ns=(stamp[1], stamp[1]))  # the URI's time: unchanged files are not fetched again
            if self.read_only:
                os.chmod(temporary, 0o444)  # an input's copy: a job that writes to it fails instead of diverging
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)
        self._pushed[rel] = self._stamp(target)  # in step with the URI: not pushed back

    def _verify(self, path: Path, rel: str, verify_all: bool) -> None:
        if path.suffix != ".parquet":
            return
        stats = path.with_name(path.name[: -len(".parquet")] + STATS_SUFFIX)
        fix = (f"Fix: delete {self._name(rel)} and its stats file (rg never deletes remote files it did not "
               "write) and rerun the job that wrote it; it redoes that work")
        if stats.is_file():
            why = check_parquet(path, _expected_rows(stats))
            if why is not None:
                raise DamagedFileError(f"{self._name(rel)}: {why}. {fix}")
        elif verify_all:
            try:
                parquet_rows(path)
            except DamagedFileError as err:
                raise DamagedFileError(f"{self._name(rel)}: {str(err).split(': ', 1)[1]}. {fix}") from None

    @staticmethod
    def _stamp(path: Path) -> tuple[int, int]:
        st = path.stat()
        return st.st_size, st.st_mtime_ns

    def changed(self, settled: bool = False) -> list[str]:
        """Relative paths of local files not pushed in their current state, stats files last.

        Args:
            settled: Only files whose size and modification time are those of the previous
                ``settled`` scan, so a file written in place is not pushed halfway (the push
                thread's scans; the final push takes every file).
        """
        out, seen = [], {}
        for path in self.local.rglob("*"):
            rel = path.relative_to(self.local).as_posix()
            if not path.is_file() or _skipped(rel):
                continue
            try:
                stamp = self._stamp(path)
            except FileNotFoundError:
                continue  # renamed away while scanning
            seen[rel] = stamp
            if self._pushed.get(rel) != stamp and (not settled or self._seen.get(rel) == stamp):
                out.append(rel)
        if settled:
            self._seen = seen
        return sorted(out, key=lambda r: (r.endswith(STATS_SUFFIX), r))

    def push(self, rels: list[str] | None = None, settled: bool = False) -> list[str]:
        """Upload the given (default: every changed) local files to the URI; return what was pushed."""
        pushed = []
        for rel in self.changed(settled) if rels is None else rels:
            path = self.local / rel
            try:
                stamp = self._stamp(path)
                self._upload(path, rel)
            except FileNotFoundError:
                continue  # a file moved aside (a damaged part) between the scan and the upload
            self._pushed[rel] = stamp
            pushed.append(rel)
        return pushed

    def _upload(self, path: Path, rel: str) -> None:
        final = self._remote(rel)
        parent = final.rsplit("/", 1)[0]
        if self._atomic_move:  # a local or mounted path: folders exist, renames are atomic (object stores need neither)
            self.fs.create_dir(parent, recursive=True)
        target = f"{parent}/.{rel.rsplit('/', 1)[-1]}.rg-tmp-{uuid.uuid4().hex}" if self._atomic_move else final
        with open(path, "rb") as source, self.fs.open_output_stream(target) as sink:
            shutil.copyfileobj(source, sink, 1 << 20)
        if target != final:
            self.fs.move(target, final)

    # the lock object -------------------------------------------------------------------------

    def _read_lock(self) -> dict[str, Any] | None:
        try:
            with self.fs.open_input_stream(self._remote(LOCK_OBJECT)) as source:
                return json.loads(source.read())
        except (FileNotFoundError, ValueError):
            return None
        except OSError as err:  # pyarrow reports a missing object as OSError on some filesystems
            if "not found" in str(err).lower() or "no such file" in str(err).lower():
                return None
            raise

    def _write_lock(self, job: str, since: float) -> None:
        record = {"id": self.lock_id, "job": job, "command": f"{job} {' '.join(sys.argv[1:])}".strip(),
                  "host": socket.gethostname(), "pid": os.getpid(), "since": since, "beat": time.time()}
        if self._atomic_move:
            self.fs.create_dir(self.base, recursive=True)
        with self.fs.open_output_stream(self._remote(LOCK_OBJECT)) as sink:
            sink.write(json.dumps(record).encode())

    def acquire(self, job: str) -> None:
        """Write the lock object, or raise OutputLockedError naming a live holder.

        Raises:
            OutputLockedError: another job's lock object has a fresh heartbeat.
        """
        held = self._read_lock()
        if held is not None and held.get("id") != self.lock_id and not _stale(held):
            age = time.time() - float(held.get("beat", 0))
            raise OutputLockedError(
                f"output_dir {self.uri} is in use by pid {held.get('pid')} on {held.get('host')} "
                f"({held.get('command')}; "
                f"lock object {self._name(LOCK_OBJECT)}, last heartbeat {age:.0f} s ago). Fix: wait for that job to "
                f"finish (or stop it; its lock is taken over {_env_float(LOCK_STALE_ENV, 120.0):g} s after its last "
                "heartbeat), or set another `output_dir`"
            )
        self._since = time.time()
        self._job = job
        self._write_lock(job, self._since)

    def renew(self) -> None:
        """Renew the heartbeat; raise OutputLockedError when another job has taken the lock object."""
        held = self._read_lock()
        if held is not None and held.get("id") != self.lock_id:
            raise OutputLockedError(
                f"output_dir {self.uri}: another job (pid {held.get('pid')} on {held.get('host')}) took the lock "
                f"object {self._name(LOCK_OBJECT)}; this job stopped pushing. Fix: run one job per output_dir"
            )
        self._write_lock(self._job, self._since)

    def release(self) -> None:
        """Delete the lock object if it is still this job's."""
        held = self._read_lock()
        if held is not None and held.get("id") == self.lock_id:
            self.fs.delete_file(self._remote(LOCK_OBJECT))


def _marker(local: Path) -> Path:
    return local.with_name(f"{local.name}.uri")


def remote_output_of(local: str | Path) -> str | None:
    """The URI the staging folder ``local`` mirrors, or None when ``local`` is not a staging folder."""
    marker = _marker(Path(local))
    return marker.read_text() if marker.is_file() else None


class ShardPusher:
    """Pushes the files a Ray actor wrote under the driver's staging folder, when it runs on another node.

    The driver's push thread sees only its own node's disk; an actor elsewhere (the subgraph
    builder's) pushes each finished shard itself, its data file before its stats file.

    Args:
        uri: The output URI.
        local: The driver's staging folder (the same absolute path on every node).
        driver_node: The driver's Ray node id; on that node the driver's thread pushes.
    """

    def __init__(self, uri: str, local: str, driver_node: str) -> None:
        self.uri, self.local, self.driver_node = uri, local, driver_node

    def __call__(self, *paths: str | Path) -> None:
        import ray

        if ray.get_runtime_context().get_node_id() == self.driver_node:
            return
        remote = RemoteDir(self.uri, local=Path(self.local))
        remote.push([Path(p).relative_to(self.local).as_posix() for p in paths])


def _stale(held: dict[str, Any]) -> bool:
    """A lock object whose holder is gone: its heartbeat is old, or it was a now-dead process on this host."""
    if time.time() - float(held.get("beat", 0)) > _env_float(LOCK_STALE_ENV, 120.0):
        return True
    if held.get("host") == socket.gethostname() and isinstance(held.get("pid"), int):
        try:
            os.kill(held["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
    return False


class _Pusher:
    """The background thread that renews the lock and pushes changed files every interval."""

    def __init__(self, outputs: list[RemoteDir], interval: float) -> None:
        self.outputs = outputs
        self.interval = interval
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="rg-remote-push", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                for remote in self.outputs:
                    remote.renew()
                    remote.push(settled=True)
            except OutputLockedError as err:  # another job took the output: push nothing more
                self.error = err
                return
            except OSError as err:  # the store is unreachable: try again next interval; the final push reports it
                print(f"rg: pushing to {remote.uri} failed ({err}); trying again in {self.interval:g} s",
                      file=user_stream())


@contextmanager
def staged(cfg: M, job: str, fresh: bool = False) -> Iterator[M]:
    """``cfg`` with its URI paths replaced by local staging folders, for the duration of the job.

    Every ``output_dir`` at a URI is locked (lock object), pulled, pushed while the job runs and
    at its end; every other URI path but ``storage_path`` is an input, pulled read-only. A config
    without URIs is yielded as it is.

    Args:
        cfg: The job's validated config.
        job: The job's name for the lock object, e.g. ``jobs.refine``.
        fresh: The job was asked to start over: refused for a URI output (rg deletes no remote file).

    Raises:
        StorageRootError: ``fresh`` with a URI output, or a bad ``$RG_PUSH_INTERVAL_S``.
        OutputLockedError: another live job holds a URI output's lock object.
        DamagedFileError: a pulled parquet file is damaged (named by its URI).
        FileNotFoundError: an input URI holds nothing.
    """
    outputs: list[RemoteDir] = []
    inputs: dict[str, RemoteDir] = {}
    local_paths: dict[str, str] = {}

    def local_of(value: str, key: str) -> str:
        if key in NATIVE_KEYS or not is_uri(value):
            return value
        if key in OUTPUT_KEYS:
            if fresh:
                raise StorageRootError(f"--fresh with `{key}: {value}`: rg deletes no remote file. Fix: delete what "
                                       f"is under {value} yourself and rerun without --fresh, or choose another `{key}`")
            remote = RemoteDir(value, "out")
            outputs.append(remote)
            remote.local.mkdir(parents=True, exist_ok=True)
            _marker(remote.local).write_text(remote.uri)  # for actors on other nodes (ShardPusher)
            return str(remote.local)
        if value not in inputs:
            remote = RemoteDir(value, "in")
            files = remote.remote_files()
            if not files:
                raise FileNotFoundError(f"`{key}: {value}` holds no file. Fix: check `{key}` (run the job that "
                                        "writes it first)")
            inputs[value] = remote
            local_paths[value] = str(remote.local / remote.uri.rsplit("/", 1)[-1] if "" in files else remote.local)
        return local_paths[value]

    def walk(node: Any, key: str) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, k) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(x, key) for x in node]
        return local_of(node, key) if isinstance(node, str) and key in PATH_KEYS else node

    local = walk(cfg.model_dump(), "")
    if not outputs and not inputs:
        yield cfg
        return
    pusher = _Pusher(outputs, _env_float(PUSH_INTERVAL_ENV, 5.0))
    held: list[RemoteDir] = []
    started = False
    try:
        for remote in outputs:
            remote.acquire(job)
            held.append(remote)
        for uri, remote in inputs.items():
            remote.pull(verify_all=True)
            print(f"input {uri}: pulled to {local_paths[uri]} (read-only)", file=user_stream())
        for remote in outputs:
            remote.pull()
            print(f"output_dir {remote.uri}: staged in {remote.local} (pushed as work finishes)", file=user_stream())
        pusher.thread.start()
        started = True
        yield type(cfg).model_validate(local)
    finally:
        pusher.stop.set()
        if pusher.thread.is_alive():
            pusher.thread.join()
        try:
            for remote in held if started and pusher.error is None else []:  # never after a failed pull
                remote.push()
                print(f"output_dir {remote.uri}: pushed", file=user_stream())
        finally:
            for remote in held:
                remote.release()
    if pusher.error is not None:
        raise pusher.error
