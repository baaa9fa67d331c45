"""Chaos: a Hand replica's process killed under load (serve/hand_call.py, serve/app.py).

The cheap tests drive :func:`serve.hand_call.ask_hand` with Ray's own exception classes: a dead
replica is retried within the deadline, then a 503 with ``Retry-After``; overload → 503; a late
Hand → 504 and the call cancelled; a Hand that raised → 500. The slow test runs the endpoint on
local Serve over the hand-made film graph with a scripted LLM Brain that takes 1 s per reply, keeps
four clients asking, SIGKILLs the Hand replica's worker process while questions are in flight, and
counts: every request sent gets a right answer or a clear 5xx (none hangs, none is lost), the
questions in flight at the kill are retried or answered 5xx, and a new Hand process answers within
a bounded wait.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
from fastapi import HTTPException
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayTaskError
from ray.serve.exceptions import BackPressureError

from serve.hand_call import ask_hand


@dataclass
class Call:
    """One scripted handle call: returns ``value`` or raises ``error`` after ``delay_s``; records cancel()."""

    value: object = None
    error: BaseException | None = None
    delay_s: float = 0.0
    cancelled: bool = False

    async def _run(self) -> object:
        await asyncio.sleep(self.delay_s)
        if self.error is not None:
            raise self.error
        return self.value

    def __await__(self):
        return self._run().__await__()

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class Calls:
    """``call`` for :func:`ask_hand`: hands out the scripted calls in order."""

    script: list[Call]
    made: list[Call] = field(default_factory=list)

    def __call__(self) -> Call:
        self.made.append(self.script[len(self.made)])
        return self.made[-1]


def ask(calls: Calls, timeout_s: float = 5.0, retries: int = 1):
    return asyncio.run(ask_hand(calls, timeout_s=timeout_s, retries=retries, retry_after_s=2))


def unavailable() -> ActorUnavailableError:
    return ActorUnavailableError("connection lost", None)


def test_a_dead_replica_is_retried_and_the_answer_says_it_took_two_calls():
    calls = Calls([Call(error=ActorDiedError()), Call(value={"answers": ["x"]})])
    assert ask(calls) == ({"answers": ["x"]}, 2)
    calls = Calls([Call(error=unavailable()), Call(value="y")])
    assert ask(calls) == ("y", 2)


def test_a_dead_replica_past_the_retries_is_a_503_with_retry_after():
    calls = Calls([Call(error=ActorDiedError()), Call(error=ActorDiedError())])
    with pytest.raises(HTTPException) as raised:
        ask(calls, retries=1)
    assert len(calls.made) == 2
    assert raised.value.status_code == 503 and raised.value.headers == {"Retry-After": "2"}
    assert "died (ActorDiedError; 2 attempt(s), hand_retries=1)" in raised.value.detail
    with pytest.raises(HTTPException) as raised:
        ask(Calls([Call(error=ActorDiedError())]), retries=0)
    assert raised.value.status_code == 503 and "1 attempt(s), hand_retries=0" in raised.value.detail


def test_overload_is_a_503_and_not_retried():
    calls = Calls([Call(error=BackPressureError(num_queued_requests=4, max_queued_requests=4)), Call(value="x")])
    with pytest.raises(HTTPException) as raised:
        ask(calls)
    assert len(calls.made) == 1
    assert raised.value.status_code == 503 and raised.value.headers == {"Retry-After": "2"}
    assert "overloaded or starting (BackPressureError)" in raised.value.detail


def test_the_deadline_covers_every_attempt_then_504_and_the_call_is_cancelled():
    calls = Calls([Call(error=ActorDiedError(), delay_s=0.1), Call(value="late", delay_s=5.0)])
    started = time.monotonic()
    with pytest.raises(HTTPException) as raised:
        ask(calls, timeout_s=0.3, retries=3)
    assert time.monotonic() - started < 2.0
    assert raised.value.status_code == 504 and raised.value.detail == "no answer within 0.3 s (request_timeout_s)"
    assert [c.cancelled for c in calls.made] == [False, True]


def test_a_hand_that_raised_is_a_500_naming_the_error_and_not_retried():
    error = RayTaskError("answer", "Traceback ...", ValueError("no topic entity"))
    calls = Calls([Call(error=error), Call(value="x")])
    with pytest.raises(HTTPException) as raised:
        ask(calls)
    assert len(calls.made) == 1
    assert raised.value.status_code == 500 and raised.value.detail == "the Hand failed: ValueError: no topic entity"


@dataclass
class Outcome:
    started: float
    ended: float
    status: int | None
    attempts: int
    body: dict | str | None
    retry_after: str | None


def hand_pid(app: str) -> int:
    """The PID of the app's one running Hand replica (asked of the replica's actor itself)."""
    import ray

    [name] = [a for a in ray.util.list_named_actors(all_namespaces=True)
              if f"{app}#HandServer" in a["name"] or f"{app}:HandServer" in a["name"]]
    actor = ray.get_actor(name["name"], namespace=name["namespace"])
    return ray.get(actor.__ray_call__.remote(lambda _self: os.getpid()), timeout=30)


@pytest.mark.mission  # nothing lost when a replica dies
@pytest.mark.slow  # starts its own Serve app (~40 s here) and waits for the replacement replica
def test_killing_the_hand_under_load_loses_nothing_and_service_recovers(ray_local, tmp_path):
    from ray import serve

    from tests.scripted_server import Respond, Script, ScriptedServer
    from serve.app import ATTEMPTS_HEADER, build_app
    from rg.run.ports import free_port
    from tests.test_serve_app import Http, app_config, reading_brain

    question = {"question": "who directed Casino", "topics": ["Casino"]}
    with ScriptedServer(Script.always(Respond(reading_brain), latency_s=1.0)) as brain:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        try:
            hand = {"num_cpus": 0, "min_replicas": 1, "max_replicas": 1, "max_ongoing_requests": 8,
                    "max_queued_requests": 32}
            config = app_config(tmp_path, brain.base_url, hand=hand, request_timeout_s=30.0, brain_timeout_s=10.0,
                                hand_retries=1)
            serve.run(build_app(config), name="chaos", route_prefix="/chaos")
            client = Http(f"http://127.0.0.1:{port}")
            assert client.post("/chaos/v1/answer", json=question).status_code == 200
            old_pid = hand_pid("chaos")

            clock = time.monotonic
            origin = clock()

            def one(_: int) -> Outcome:
                started = clock() - origin
                try:
                    reply = client.post("/chaos/v1/answer", json=question)
                except OSError as err:  # no HTTP response at all (a hang ends in the client's 60 s timeout)
                    return Outcome(started, clock() - origin, None, 0, repr(err), None)
                try:
                    body = reply.json()
                except ValueError:
                    body = reply.text
                headers = {k.lower(): v for k, v in reply.headers.items()}
                return Outcome(started, clock() - origin, reply.status_code,
                               int(headers.get(ATTEMPTS_HEADER.lower(), 0)), body, headers.get("retry-after"))

            sent = 16
            killed = threading.Event()

            def kill_when_in_flight() -> float:
                time.sleep(3.0)  # four questions are in the Hand, each waiting on a 1 s Brain reply
                os.kill(old_pid, signal.SIGKILL)
                killed.set()
                return clock() - origin

            with ThreadPoolExecutor(max_workers=1) as killer, ThreadPoolExecutor(max_workers=4) as clients:
                kill = killer.submit(kill_when_in_flight)
                outcomes = list(clients.map(one, range(sent)))
                kill_at = kill.result()
            assert killed.is_set()
            print(f"kill at {kill_at:.1f} s; (started, ended, status, attempts): "
                  f"{[(round(o.started, 1), round(o.ended, 1), o.status, o.attempts) for o in outcomes]}")

            # counted: every request sent got an HTTP response, and each is a right answer or a clear 5xx
            assert len(outcomes) == sent
            assert [o for o in outcomes if o.status is None] == []
            answered = [o for o in outcomes if o.status == 200]
            clear = [o for o in outcomes if o.status in (500, 503, 504) and isinstance(o.body, dict)
                     and o.body.get("detail") and (o.status != 503 or o.retry_after == "1")]
            assert len(answered) + len(clear) == sent, [(o.status, o.body) for o in outcomes]
            assert all(o.body["answers"] == ["Martin Scorsese"] for o in answered)
            # the kill hit questions in flight: they were sent again to a new replica, or answered with a clear 5xx
            in_flight = [o for o in outcomes if o.started < kill_at < o.ended]
            assert in_flight
            assert any(o.attempts >= 2 or o.status != 200 for o in in_flight), in_flight

            # the replica comes back (Serve starts a new process) and answers within a bounded wait
            deadline = clock() + 90
            reply = client.post("/chaos/v1/answer", json=question)
            while reply.status_code != 200 and clock() < deadline:
                time.sleep(1.0)
                reply = client.post("/chaos/v1/answer", json=question)
            assert reply.status_code == 200, f"no answer within 90 s of the kill: {reply.status_code} {reply.text}"
            assert reply.json()["answers"] == ["Martin Scorsese"]
            assert hand_pid("chaos") != old_pid
            assert client.get("/chaos/readyz").status_code == 200
        finally:
            serve.shutdown()
