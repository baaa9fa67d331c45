"""A local Virtuoso for users and tests: write a minimal ``virtuoso.ini``, start Debian's
``virtuoso-t +foreground`` bound to 127.0.0.1, wait until it answers, bulk-load N-Triples and
stop it by its PID.

    python -m rg.stores.virtuoso start --data-dir outputs/virtuoso --http-port 8890 --isql-port 1111
    python -m rg.stores.virtuoso load --data-dir outputs/virtuoso --file kg.nt --graph http://rg.local/kg
    python -m rg.stores.virtuoso status --data-dir outputs/virtuoso
    python -m rg.stores.virtuoso stop --data-dir outputs/virtuoso

The server is the Debian package ``virtuoso-opensource`` (7.2); install it with
``apt-get install -y virtuoso-opensource``. Everything the server writes (database, log, PID
file, the files it may bulk-load) lives in the data directory; ``DirsAllowed`` names only that
directory, so ``ld_dir`` can read nothing else. The ports are recorded in ``server.json`` beside
the ini, so ``load``/``status``/``stop`` need only the data directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import requests

from rg.console import user_stream

PACKAGE = "virtuoso-opensource"
"""The Debian package that provides ``virtuoso-t`` and ``isql-vt``."""
SERVER_BINARY = "virtuoso-t"
ISQL_BINARY = "isql-vt"
STATE_FILE = "server.json"
LOAD_DIR = "load"
"""Sub-directory of the data dir that bulk loads copy their files into (the only DirsAllowed)."""

INI_TEMPLATE = """\
[Database]
DatabaseFile       = {d}/virtuoso.db
ErrorLogFile       = {d}/virtuoso.log
LockFile           = {d}/virtuoso.lck
TransactionFile    = {d}/virtuoso.trx
xa_persistent_file = {d}/virtuoso.pxa
ErrorLogLevel      = 7
FileExtend         = 200
MaxCheckpointRemap = 2000
Striping           = 0
TempStorage        = TempDatabase

[TempDatabase]
DatabaseFile       = {d}/virtuoso-temp.db
TransactionFile    = {d}/virtuoso-temp.trx
MaxCheckpointRemap = 2000
Striping           = 0

[Parameters]
ServerPort               = 127.0.0.1:{isql_port}
LiteMode                 = 0
DisableUnixSocket        = 1
DisableTcpSocket         = 0
MaxClientConnections     = 20
CheckpointInterval       = 60
O_DIRECT                 = 0
CaseMode                 = 2
AllowOSCalls             = 0
DirsAllowed              = {d}/{load_dir}
ThreadsPerQuery          = {threads}
NumberOfBuffers          = {buffers}
MaxDirtyBuffers          = {dirty}
MaxQueryMem              = 1G

[HTTPServer]
ServerPort                  = 127.0.0.1:{http_port}
ServerRoot                  = {d}
MaxClientConnections        = 20
ServerThreads               = 20
MaxKeepAlives               = 20
KeepAliveTimeout            = 30
EnabledDavVSP               = 0
Charset                     = UTF-8

[SPARQL]
ResultSetMaxRows           = {max_rows}
MaxQueryCostEstimationTime = 400
MaxQueryExecutionTime      = {max_seconds}
"""


class VirtuosoError(RuntimeError):
    """The server could not be started, reached, loaded or stopped; the message says why."""


@dataclass(frozen=True)
class VirtuosoServer:
    """Where a local Virtuoso runs and how to reach it.

    Attributes:
        data_dir: Folder with ``virtuoso.ini``, the database, its log and ``server.json``.
        http_port: Port of the HTTP server (SPARQL endpoint at ``/sparql``).
        isql_port: Port of the SQL server that ``isql-vt`` talks to.
        password: The ``dba`` password (a fresh database has ``dba``).
        max_rows: ``ResultSetMaxRows``: the most rows one SPARQL answer may hold.
    """

    data_dir: Path
    http_port: int
    isql_port: int
    password: str = "dba"
    max_rows: int = 1_000_000

    @property
    def endpoint(self) -> str:
        """The SPARQL 1.1 protocol endpoint of this server."""
        return f"http://127.0.0.1:{self.http_port}/sparql"

    @property
    def ini_path(self) -> Path:
        return self.data_dir / "virtuoso.ini"

    @property
    def pid_path(self) -> Path:
        return self.data_dir / "virtuoso.pid"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "virtuoso.log"

    # ------------------------------------------------------------------------- set-up
    def write_ini(self, threads: int = 2, buffers: int = 100_000, max_seconds: int = 120) -> Path:
        """Write the minimal ``virtuoso.ini`` and ``server.json`` into ``data_dir``.

        Args:
            threads: ``ThreadsPerQuery``.
            buffers: ``NumberOfBuffers`` (8 KiB pages; 100 000 is about 800 MiB at most).
            max_seconds: ``MaxQueryExecutionTime`` of a SPARQL query on the server side.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / LOAD_DIR).mkdir(exist_ok=True)
        d = str(self.data_dir.resolve())
        self.ini_path.write_text(INI_TEMPLATE.format(
            d=d, load_dir=LOAD_DIR, isql_port=self.isql_port, http_port=self.http_port, threads=threads,
            buffers=buffers, dirty=buffers * 3 // 4, max_rows=self.max_rows, max_seconds=max_seconds))
        state = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items() if k != "password"}
        (self.data_dir / STATE_FILE).write_text(json.dumps(state, indent=1))
        return self.ini_path

    @classmethod
    def from_data_dir(cls, data_dir: str | Path, password: str = "dba") -> "VirtuosoServer":
        """The server described by ``data_dir/server.json`` (written by :meth:`write_ini`)."""
        path = Path(data_dir) / STATE_FILE
        if not path.is_file():
            raise VirtuosoError(f"{path} does not exist. Fix: run `python -m rg.stores.virtuoso start --data-dir {data_dir}` first")
        state = json.loads(path.read_text())
        return cls(Path(state["data_dir"]), int(state["http_port"]), int(state["isql_port"]), password,
                   int(state.get("max_rows", 1_000_000)))

    # ------------------------------------------------------------------------ process
    def pid(self) -> int | None:
        """PID of the running server started from this data dir, or None."""
        try:
            pid = int(self.pid_path.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        try:  # a PID reused by an unrelated process is not ours
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if not cmdline or not cmdline[0].endswith(SERVER_BINARY.encode()):
            return None
        state = Path(f"/proc/{pid}/stat").read_text().split()
        return None if len(state) > 2 and state[2] == "Z" else pid

    def start(self, timeout: float = 60.0, threads: int = 2, buffers: int = 100_000) -> int:
        """Write the ini, start ``virtuoso-t +foreground`` and wait until SPARQL answers.

        Returns:
            The server's PID (also written to ``virtuoso.pid``).

        Raises:
            VirtuosoError: the binary is missing, the server exited, or it did not answer in time.
        """
        binary = shutil.which(SERVER_BINARY)
        if binary is None:
            raise VirtuosoError(f"{SERVER_BINARY} not found. Fix: apt-get install -y {PACKAGE}")
        running = self.pid()
        if running is not None:
            self.wait_ready(timeout)
            return running
        self.write_ini(threads=threads, buffers=buffers)
        # No server runs from this dir (checked above): a lock file is left from one that was
        # killed, and virtuoso-t refuses to start while it exists.
        (self.data_dir / "virtuoso.lck").unlink(missing_ok=True)
        with open(self.data_dir / "stdout.log", "ab") as out:
            proc = subprocess.Popen(
                [binary, "+foreground", "+configfile", str(self.ini_path.resolve())],
                cwd=self.data_dir, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self.pid_path.write_text(str(proc.pid))
        try:
            self.wait_ready(timeout, proc)
        except VirtuosoError:
            self.stop()
            raise
        return proc.pid

    def wait_ready(self, timeout: float, proc: subprocess.Popen | None = None) -> None:
        """Poll the SPARQL endpoint until it answers ``ASK {}``; raise VirtuosoError on timeout or exit."""
        deadline = time.monotonic() + timeout
        with requests.Session() as client:
            while True:
                if proc is not None and proc.poll() is not None:
                    raise VirtuosoError(f"virtuoso-t exited with status {proc.returncode}; see {self.log_path}"
                                        f" and {self.data_dir / 'stdout.log'}")
                try:
                    r = client.get(self.endpoint, params={"query": "ASK {}"}, timeout=2.0,
                                   headers={"Accept": "application/sparql-results+json"})
                    if r.status_code == 200:
                        return
                except requests.RequestException:
                    pass
                if time.monotonic() > deadline:
                    raise VirtuosoError(f"Virtuoso did not answer on {self.endpoint} within {timeout:.0f} s; see {self.log_path}")
                time.sleep(0.2)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the server started from this data dir (SIGTERM to its PID, SIGKILL after ``timeout``).

        Returns:
            True when a running server was stopped, False when none was running.
        """
        pid = self.pid()
        if pid is None:
            self.pid_path.unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.pid() is not None and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.1)
        if self.pid() is not None:
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
            _reap(pid)
        self.pid_path.unlink(missing_ok=True)
        return True

    # --------------------------------------------------------------------------- load
    def isql(self, sql: str, timeout: float = 3600.0) -> str:
        """Run SQL statements through ``isql-vt``; return its output, raise VirtuosoError on an error."""
        binary = shutil.which(ISQL_BINARY)
        if binary is None:
            raise VirtuosoError(f"{ISQL_BINARY} not found. Fix: apt-get install -y {PACKAGE}")
        proc = subprocess.run([binary, f"127.0.0.1:{self.isql_port}", "dba", self.password],
                              input=sql, capture_output=True, text=True, timeout=timeout)
        text = proc.stdout + proc.stderr
        if proc.returncode != 0 or "*** Error" in text:
            raise VirtuosoError(f"isql failed (status {proc.returncode}): {text.strip()[-600:]}")
        return text

    def load(self, files: Sequence[str | Path], graph: str, replace: bool = True) -> int:
        """Bulk-load N-Triples files into named graph ``graph`` (``ld_dir`` + ``rdf_loader_run``).

        The files are copied into ``data_dir/load/`` (the only directory DirsAllowed opens).

        Args:
            files: ``.nt`` (or ``.nt.gz``) files.
            graph: The named graph IRI to load into.
            replace: Clear the graph first.

        Returns:
            The number of triples in ``graph`` after loading.
        """
        from rg.stores.sparql_text import iri

        if "'" in graph or not graph:
            raise VirtuosoError(f"graph IRI {graph!r} must be non-empty and hold no quote")
        folder = (self.data_dir / LOAD_DIR).resolve()
        for old in folder.iterdir():
            old.unlink()
        for i, f in enumerate(files):
            f = Path(f)
            suffix = ".nt.gz" if f.name.endswith(".gz") else ".nt"
            shutil.copyfile(f, folder / f"part-{i:04d}{suffix}")
        sql = []
        if replace:
            sql.append(f"SPARQL CLEAR GRAPH {iri(graph)};")
        sql += ["DELETE FROM DB.DBA.load_list;",
                f"ld_dir('{folder}', '*.nt*', '{graph}');",
                "rdf_loader_run();",
                "checkpoint;",
                "SELECT ll_file, ll_error FROM DB.DBA.load_list WHERE ll_error IS NOT NULL;"]
        out = self.isql("\n".join(sql) + "\n")
        if "0 Rows." not in out.split("ll_error")[-1]:
            raise VirtuosoError(f"bulk load reported errors: {out.strip()[-600:]}")
        for f in folder.iterdir():
            f.unlink()
        return self.count(graph)

    def count(self, graph: str) -> int:
        """Number of triples in ``graph``, asked over SPARQL."""
        from rg.stores.sparql_text import iri

        query = f"SELECT (COUNT(*) AS ?n) WHERE {{ GRAPH {iri(graph)} {{ ?s ?p ?o }} }}"
        r = requests.post(self.endpoint, data={"query": query}, headers={"Accept": "application/sparql-results+json"},
                       timeout=300.0)
        r.raise_for_status()
        return int(r.json()["results"]["bindings"][0]["n"]["value"])


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit status when it is our child (so it does not linger as a zombie)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rg.stores.virtuoso", description=__doc__.strip().split("\n")[0])
    parser.add_argument("command", choices=["start", "stop", "status", "load"])
    parser.add_argument("--data-dir", required=True, help="folder for the ini, database, log and PID file")
    parser.add_argument("--http-port", type=int, default=None, help="HTTP/SPARQL port (start; required there)")
    parser.add_argument("--isql-port", type=int, default=None, help="SQL port for isql (start; required there)")
    parser.add_argument("--password", default=os.environ.get("RG_VIRTUOSO_PASSWORD", "dba"),
                        help="dba password (default: $RG_VIRTUOSO_PASSWORD or dba)")
    parser.add_argument("--file", action="append", default=[], help="N-Triples file to load (repeatable)")
    parser.add_argument("--graph", help="named graph IRI to load into")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the server")
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            if args.http_port is None or args.isql_port is None:
                parser.error("start needs --http-port and --isql-port")
            server = VirtuosoServer(Path(args.data_dir), args.http_port, args.isql_port, args.password)
            pid = server.start(args.timeout)
            print(f"virtuoso running: pid {pid}, SPARQL endpoint {server.endpoint}")
            return 0
        server = VirtuosoServer.from_data_dir(args.data_dir, args.password)
        if args.command == "status":
            pid = server.pid()
            print(f"running: pid {pid}, {server.endpoint}" if pid else f"not running ({server.data_dir})")
            return 0 if pid else 1
        if args.command == "stop":
            print("stopped" if server.stop() else "was not running")
            return 0
        if not args.file or not args.graph:
            parser.error("load needs --file and --graph")
        n = server.load(args.file, args.graph)
        print(f"graph {args.graph}: {n} triples")
        return 0
    except VirtuosoError as err:
        print(f"rg.stores.virtuoso: {err}", file=user_stream())
        return 2


if __name__ == "__main__":
    sys.exit(main())
