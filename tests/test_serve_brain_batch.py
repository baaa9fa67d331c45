"""The BrainProxy batches concurrent local-Brain analyses (``@serve.batch``) without changing them.

The tiny planner of tests/dualtower_world.py, saved to a folder, is the BrainProxy's local Brain;
five sealed analysis payloads are sent at once through the deployment's handle. They must come back
exactly as the planner analyses each alone, and the proxy must have decoded them in batches.
"""

from __future__ import annotations

import asyncio

import pytest

from rg.privacy import PrivacyConfig, PrivacySession
from rg.reasoning.dualtower.local_brain import LocalBrain
from tests.dualtower_world import schema, shared_planner
from tests.test_dualtower import analysis_payloads
from tests.test_serve_app import free_port


@pytest.fixture(scope="module")
def planner_dir(tmp_path_factory):
    planner = shared_planner()
    folder = tmp_path_factory.mktemp("planner")
    planner.save(folder)
    return folder, planner


@pytest.mark.slow  # its own Serve start (~25 s); tests/test_dualtower.py pins the batch's equality by default
def test_concurrent_analyses_are_decoded_together_and_unchanged(ray_local, planner_dir):
    from ray import serve

    from serve.brain_proxy import BrainProxy

    folder, planner = planner_dir
    config = {"brain": {"kind": "local", "planner": str(folder), "beams": 3, "indicators": 2},
              "privacy": {"mode": "utility"}}
    with PrivacySession(PrivacyConfig(mode="utility"), schema()) as session:
        payloads = analysis_payloads(session)
    alone = [asyncio.run(LocalBrain(planner, 3, 2).analyse(p)) for p in payloads]
    serve.start(http_options={"host": "127.0.0.1", "port": free_port()})  # this module's own Serve, shut down after
    handle = serve.run(BrainProxy.options(ray_actor_options={"num_cpus": 0}).bind(config, None, 8, 0.5),
                       name="brain-batch", route_prefix=None)
    try:
        replies = [r.result(timeout_s=120) for r in [handle.call.remote("analysis", p.text) for p in payloads]]
        sizes = handle.batch_sizes.remote().result(timeout_s=30)
    finally:
        serve.shutdown()
    assert [r.reason for r in replies] == [None] * len(payloads)
    assert [r.result.indicators for r in replies] == [a.indicators for a in alone]
    assert sum(sizes) == len(payloads) and max(sizes) > 1
    assert all(r.usage["stages"]["brain_analyse"]["brain"]["calls"] == 1 for r in replies)
