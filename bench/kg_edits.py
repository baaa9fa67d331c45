"""Live KG edits on the served endpoint: visibility, stale answers, latency under edits, edits/s, kills.

    RAY_AUTH_MODE=disabled python -m bench.kg_edits --quick
    RAY_AUTH_MODE=disabled python -m bench.kg_edits [--seconds 30] [--out PATH]

The endpoint of ``serve/app.py`` on local Ray (2 CPUs): the hand-made film graph, an LLM Brain at a
scripted 127.0.0.1 server that reads the anonymised payloads, both memories, two Hand replicas, the
KGEditOwner with its edit log, and bearer tokens. Measured in one run:

- **baseline**: one closed-loop client asks "who wrote <film>" / "who directed <film>" questions for
  ``--seconds`` with no edits → ``p50_no_edits_ms``;
- **under edits**: the same client while a steady stream changes the films' writers (each batch deletes
  the old writer and adds a new, uniquely named one) → ``p50_under_edits_ms`` and
  ``latency_ratio_under_edits`` (the same run's baseline is the denominator);
- **visibility**: a third phase: after each edit's reply, the writer thread asks about the film until two
  answers in a row (Serve spreads them over the two Hand replicas) name the new writer → ``visible_p95_s``
  (so it includes two question round trips: ``question_p50_during_visibility_ms``);
- **stale answers**: every answer of the run about a film's writer is checked against the edit history: one
  naming a writer whose deletion was acknowledged before the question was sent is stale → ``stale_answers``
  (the questions repeat, so most are answered from memory);
- **edits/s**: single-edit batches back to back from 1 and 4 clients (each acknowledged after its fsync);
- **kills**: while 2 clients stream edits, the KGEditOwner's worker process is SIGKILLed, then every replica
  process of the app at once; after Serve restarts them, every acknowledged version must be in the log with
  its triples and answered → ``lost_edits`` (summed over both kills).

The JSON (``--out``, default ``bench/results/kg_edits.json``) carries the machine facts (``bench.machine``).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.machine import machine
from rg.run.ports import free_port
from rg.kgedits import read_log
from tests.scripted_server import Respond, Script, ScriptedServer

FILMS = ("Heat", "Collateral", "The Irishman", "Casino", "Top Gun")
TOKEN_ENV = "RG_BENCH_KG_TOKEN"


def p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Client:
    """A loopback HTTP client with the bench's token (requests, one session per thread)."""

    def __init__(self, base: str, token: str) -> None:
        import requests

        self.base, self.local = base, threading.local()
        self.headers = {"Authorization": f"Bearer {token}"}
        self._requests = requests

    def _session(self):
        if not hasattr(self.local, "session"):
            self.local.session = self._requests.Session()
        return self.local.session

    def ask(self, question: str, topics: list[str]) -> tuple[int, dict]:
        r = self._session().post(self.base + "/v1/answer", json={"question": question, "topics": topics},
                                 headers=self.headers, timeout=60)
        return r.status_code, (r.json() if r.headers.get("content-type", "").startswith("application/json") else {})

    def edit(self, edits: list[tuple[str, str, str, str]]) -> tuple[int, dict]:
        body = {"edits": [{"op": o, "head": h, "relation": r, "tail": t} for o, h, r, t in edits]}
        r = self._session().post(self.base + "/v1/kg/edits", json=body, headers=self.headers, timeout=60)
        return r.status_code, (r.json() if r.headers.get("content-type", "").startswith("application/json") else {})

    def version(self) -> tuple[int, dict]:
        r = self._session().get(self.base + "/v1/kg/version", headers=self.headers, timeout=30)
        return r.status_code, (r.json() if r.status_code == 200 else {})


class History:
    """Who wrote each film at each version, and when each deletion was acknowledged."""

    def __init__(self, writers: dict[str, set[str]]) -> None:
        self.lock = threading.Lock()
        self.current = {f: set(w) for f, w in writers.items()}
        self.deleted_at: dict[tuple[str, str], float] = {}

    def change(self, client: Client, film: str, new: str) -> tuple[int, float, int | None]:
        with self.lock:
            old = sorted(self.current[film])
        edits = [("delete", film, "written_by", w) for w in old] + [("add", film, "written_by", new)]
        status, reply = client.edit(edits)
        acked = time.perf_counter()
        if status == 200:
            with self.lock:
                for w in old:
                    self.deleted_at[(film, w)] = acked
                self.current[film] = {new}
        return status, acked, reply.get("version")

    def stale(self, film: str, answers: list[str], sent: float) -> bool:
        with self.lock:
            return any(self.deleted_at.get((film, a), float("inf")) < sent for a in answers)


def ask_loop(client: Client, history: History, stop: threading.Event, out: list[dict]) -> None:
    i = 0
    while not stop.is_set():
        film = FILMS[i % len(FILMS)]
        question = f"who wrote {film}" if i % 2 == 0 else f"who directed {film}"
        sent = time.perf_counter()
        status, reply = client.ask(question, [film])
        out.append({"ms": (time.perf_counter() - sent) * 1000, "status": status,
                    "stale": status == 200 and question.startswith("who wrote")
                    and history.stale(film, reply.get("answers", []), sent)})
        i += 1


def edit_loop(client: Client, history: History, stop: threading.Event, period_s: float, tag: str,
              statuses: list[int], visible: list[float] | None = None) -> None:
    """A steady stream of writer changes; with ``visible``, after each reply ask about the film until two answers
    in a row (Serve spreads them over the Hand replicas) name the new writer, and record how long that took."""
    n = 0
    while not stop.is_set():
        started = time.perf_counter()
        film = FILMS[n % len(FILMS)]
        new = f"Writer {tag}{n}"
        status, acked, _ = history.change(client, film, new)
        statuses.append(status)
        if status == 200 and visible is not None:
            streak, deadline = 0, acked + 30.0
            while streak < 2 and time.perf_counter() < deadline:
                code, reply = client.ask(f"who wrote {film}", [film])
                streak = streak + 1 if code == 200 and reply.get("answers") == [new] else 0
            visible.append(time.perf_counter() - acked if streak >= 2 else float("inf"))
        n += 1
        time.sleep(max(0.0, period_s - (time.perf_counter() - started)))


def edits_per_s(client: Client, count: int, clients: int) -> float:
    def one(worker: int) -> None:
        for i in range(count // clients):
            status, _ = client.edit([("add", "Heat", "release_year", f"y{worker}-{i}-{secrets.token_hex(3)}")])
            assert status == 200, status

    threads = [threading.Thread(target=one, args=(w,)) for w in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (count // clients) * clients / (time.perf_counter() - started)


def app_pids(app: str, only: str | None = None) -> list[int]:
    """PIDs of the app's replica processes (``only``: one deployment's), each asked of the replica's actor."""
    import ray

    named = [a for a in ray.util.list_named_actors(all_namespaces=True)
             if "SERVE_REPLICA" in a["name"] and f"{app}#" in a["name"] and (only is None or f"#{only}#" in a["name"])]
    actors = [ray.get_actor(a["name"], namespace=a["namespace"]) for a in named]
    return ray.get([actor.__ray_call__.remote(lambda _self: os.getpid()) for actor in actors], timeout=60)


def kill_during_stream(client: Client, log_path: str, app: str, only: str | None, seconds: float) -> dict[str, Any]:
    """Two clients stream unique adds; SIGKILL the app's replica processes (``only``: one deployment's) halfway;
    wait until an edit is acknowledged again; count acknowledged edits missing from the log or the answers."""
    import requests

    acked: list[tuple[int, str, float, str]] = []  # version, film name, time, film id
    failed: list[str] = []
    stop = threading.Event()

    def stream(worker: int) -> None:
        i = 0
        while not stop.is_set():
            film = f"Kill Film {worker}-{i}-{secrets.token_hex(3)}"
            try:
                status, reply = client.edit([("add", film, "written_by", "Nicholas Pileggi")])
            except requests.RequestException as err:  # a connection the kill cut: an unacknowledged edit
                status, reply = type(err).__name__, {}
            if status == 200:
                acked.append((reply["version"], film, time.perf_counter(), next(iter(reply["new_entities"]))))
            else:
                failed.append(str(status))
                time.sleep(0.2)
            i += 1

    threads = [threading.Thread(target=stream, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    time.sleep(seconds / 2)
    pids = app_pids(app, only)
    killed_at = time.perf_counter()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    deadline = killed_at + 240
    while time.perf_counter() < deadline and not any(a[2] > killed_at + 0.5 for a in acked):
        time.sleep(0.5)
    recovered = [a[2] - killed_at for a in acked if a[2] > killed_at + 0.5]
    time.sleep(seconds / 2)
    stop.set()
    for t in threads:
        t.join()
    records = {r.version: r for r in read_log(log_path).records}

    def logged(version: int, film: str, film_id: str) -> bool:
        record = records.get(version)
        return record is not None and record.new_entities.get(film_id) == film and \
            any(t[0] == film_id for t in record.adds)

    lost_in_log = {a[0] for a in acked if not logged(a[0], a[1], a[3])}
    before = [a for a in acked if a[2] <= killed_at][-8:]  # the acknowledged edits most at risk, and the first after
    after = [a for a in acked if a[2] > killed_at][:8]
    lost_in_answers = set()
    for version, film, _, film_id in before + after:
        code, reply = client.ask(f"who wrote {film}", [film_id])
        if code != 200 or reply.get("answers") != ["Nicholas Pileggi"]:
            lost_in_answers.add(version)
    return {"killed_processes": len(pids), "acknowledged": len(acked), "unacknowledged": len(failed),
            "recovered_s": round(min(recovered), 1) if recovered else None, "lost_in_log": len(lost_in_log),
            "answers_checked": len(before) + len(after), "lost_in_answers": len(lost_in_answers),
            "lost_edits": len(lost_in_log | lost_in_answers)}


def run(seconds: float, edit_period_s: float, edit_count: int, out: Path) -> dict[str, Any]:
    import ray
    from ray import serve

    from serve.app import build_app
    from tests.dualtower_world import TRIPLES, schema
    from tests.test_serve_app import reading_brain

    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    result: dict[str, Any] = {"machine_before": machine(), "seconds": seconds, "edit_period_s": edit_period_s}
    folder = Path(tempfile.mkdtemp(prefix="bench_kg_edits_"))
    kb = folder / "kg.tsv"
    kb.write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in TRIPLES), encoding="utf-8")
    (folder / "schema").mkdir()
    schema().save(folder / "schema")
    token = secrets.token_urlsafe(24)
    os.environ[TOKEN_ENV] = token  # read by the Ingress replica (a child of this process's Ray)
    zero = {"num_cpus": 0, "min_replicas": 1, "max_replicas": 1}
    log_path = str(folder / "kg_edits.log")
    with ScriptedServer(Script.always(Respond(reading_brain))) as brain:
        args = {
            "kg": {"store": {"kind": "memory", "kb": {"path": str(kb), "format": "tsv"}}, "schema_dir": str(folder / "schema")},
            "dualtower": {"privacy": {"mode": "utility"}, "similarity": "lexical",
                          "brain": {"kind": "llm", "reasks": 1, "llm": {"base_url": brain.base_url, "model": "scripted",
                                                                        "side": "brain", "max_retries": 0, "timeout_s": 10.0}}},
            "auth": {"tokens": [{"name": "bench", "scopes": ["ask", "edit"], "env": TOKEN_ENV}]},
            "kg_edits": {"log_path": log_path}, "memory": {"experience": {"embedder": "hashing"}, "edges": {}},
            "memory_owner": {"num_cpus": 0}, "kg_edit_owner": {"num_cpus": 0},
            "request_timeout_s": 60.0, "brain_timeout_s": 30.0, "ingress": {**zero, "max_ongoing_requests": 64},
            "hand": {**zero, "min_replicas": 2, "max_replicas": 2, "max_queued_requests": 64}, "brain": zero,
        }
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {TOKEN_ENV: token}})
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(build_app(args), name="kg", route_prefix="/")
        phases["start"] = time.perf_counter() - t0
        client = Client(f"http://127.0.0.1:{port}", token)
        writers = {f: {t for h, r, t in TRIPLES if h == f and r == "written_by"} for f in FILMS}
        history = History(writers)
        for film in FILMS:  # warm both replicas and the memories
            for q in (f"who wrote {film}", f"who directed {film}"):
                client.ask(q, [film])

        t = time.perf_counter()
        base: list[dict] = []
        stop = threading.Event()
        asker = threading.Thread(target=ask_loop, args=(client, history, stop, base))
        asker.start()
        time.sleep(seconds)
        stop.set()
        asker.join()
        phases["baseline"] = time.perf_counter() - t

        t = time.perf_counter()
        under: list[dict] = []
        statuses: list[int] = []
        stop = threading.Event()
        threads = [threading.Thread(target=ask_loop, args=(client, history, stop, under)),
                   threading.Thread(target=edit_loop, args=(client, history, stop, edit_period_s, "s", statuses))]
        for th in threads:
            th.start()
        time.sleep(seconds)
        stop.set()
        for th in threads:
            th.join()
        phases["under_edits"] = time.perf_counter() - t

        t = time.perf_counter()  # visibility: edits, each followed by questions until both replicas show it
        visible: list[float] = []
        seen: list[dict] = []
        stop = threading.Event()
        threads = [threading.Thread(target=ask_loop, args=(client, history, stop, seen)),
                   threading.Thread(target=edit_loop, args=(client, history, stop, edit_period_s, "v", statuses,
                                                            visible))]
        for th in threads:
            th.start()
        time.sleep(seconds)
        stop.set()
        for th in threads:
            th.join()
        phases["visibility"] = time.perf_counter() - t
        p50_base = statistics.median(r["ms"] for r in base if r["status"] == 200)
        p50_under = statistics.median(r["ms"] for r in under if r["status"] == 200)
        result.update({
            "questions_no_edits": len(base), "questions_under_edits": len(under),
            "p50_no_edits_ms": round(p50_base, 1), "p50_under_edits_ms": round(p50_under, 1),
            "latency_ratio_under_edits": round(p50_under / p50_base, 3),
            "edits_in_stream": len(statuses), "edit_statuses": {str(s): statuses.count(s) for s in set(statuses)},
            "visible_p50_s": p(visible, 0.5), "visible_p95_s": p(visible, 0.95), "visible_max_s": max(visible, default=None),
            "visibility_edits": len(visible),
            "question_p50_during_visibility_ms": round(statistics.median(r["ms"] for r in seen), 1) if seen else None,
            "stale_answers": sum(r["stale"] for r in base + under + seen),
            "answers_checked_for_staleness": len(base + under + seen),
            "non_200_answers": sum(r["status"] != 200 for r in base + under + seen),
        })

        t = time.perf_counter()
        result["edits_per_s"] = round(edits_per_s(client, edit_count, 1), 1)
        result["edits_per_s_4_clients"] = round(edits_per_s(client, edit_count, 4), 1)
        phases["edits_per_s"] = time.perf_counter() - t

        t = time.perf_counter()
        owner = kill_during_stream(client, log_path, "kg", "KGEditOwner", max(6.0, seconds / 2))
        whole = kill_during_stream(client, log_path, "kg", None, max(6.0, seconds / 2))
        result["kill_owner"], result["kill_all_replicas"] = owner, whole
        result["lost_edits"] = owner["lost_edits"] + whole["lost_edits"]
        phases["kills"] = time.perf_counter() - t
        result["log_version"] = len(read_log(log_path).records)
        serve.shutdown()
        ray.shutdown()
    result["machine_after"] = machine()
    result["phases_s"] = {k: round(v, 1) for k, v in phases.items()}
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.kg_edits", description=__doc__.strip().split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 s phases, 40 edits for edits/s")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the baseline and under-edits phases")
    parser.add_argument("--edit-period", type=float, default=0.5, help="seconds between edit batches in the stream")
    parser.add_argument("--edits", type=int, default=200, help="edits for the edits/s phase")
    parser.add_argument("--out", type=Path, default=Path("bench/results/kg_edits.json"))
    args = parser.parse_args(argv)
    seconds, edits = (8.0, 40) if args.quick else (args.seconds, args.edits)
    r = run(seconds, args.edit_period, edits, args.out)
    print(f"kg_edits: visible p95 {r['visible_p95_s']} s, stale {r['stale_answers']}, lost {r['lost_edits']}, "
          f"latency ratio {r['latency_ratio_under_edits']} (p50 {r['p50_under_edits_ms']} vs {r['p50_no_edits_ms']} ms), "
          f"{r['edits_per_s']} edits/s (4 clients {r['edits_per_s_4_clients']}), wall {r['wall_s']} s -> {args.out}")


if __name__ == "__main__":
    main()
