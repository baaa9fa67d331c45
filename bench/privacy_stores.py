"""The served demo with its KG in a triple store against the same demo in memory: answers, leaks, latency.

    RAY_AUTH_MODE=disabled python -m bench.privacy_stores --quick
    RAY_AUTH_MODE=disabled python -m bench.privacy_stores [--questions N] [--planner PATH] [--out PATH]

Starts a Virtuoso of its own (Debian's ``virtuoso-opensource``) in a temp dir on free ports and loads the
demo's synthetic KG (seed 0) into it with ``jobs.load_kg``'s library (ids ``m.0<hex>``, names as literals,
the schema over those ids). Then, on local Ray Serve, the endpoint of ``configs/serve_demo.yaml`` (the KG in
memory: the baseline) and of ``configs/serve_demo_sparql.yaml`` (the KG read over SPARQL) are asked the same
questions through HTTP, without topics (the Hand links them), with two Brains in turn:

- **local**: the demo's planner (``--planner``, what ``python -m jobs.pipeline --config configs/demo.yaml``
  trains) in the BrainProxy, as the served demo runs; skipped, and said so, when it is absent;
- **llm**: an LLM Brain at a scripted 127.0.0.1 server that records every request (analysis: one hop;
  selection: the candidates whose relation paths sort first), so what left the Hand can be read.

Per Brain: ``same_answers`` (questions whose answers are equal, in order, on both stores), ``answered``,
p50 latency per store and ``sparql_vs_memory_p50`` (the ratio); for the LLM Brain also ``leaking_bodies``
(requests in which a checker written apart from the guard finds a name, an alias or a store id of the KG)
and ``exposure_matches`` (the replies' exposure totals equal the requests and characters the server got).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
import unicodedata
import urllib.request
from pathlib import Path
from typing import Any, Sequence

from bench.machine import RunRecord, machine, write_report
from rg.data.synthetic import SyntheticConfig, generate
from tests.scripted_server import Respond, Script, ScriptedServer

DEFAULT_OUT = Path("bench/results/privacy_stores.json")
GRAPH = "http://rg.local/synthetic"
NAMED_KINDS = ("person", "film", "city", "company", "university", "country")
"""Kinds whose names identify one entity (genre or profession names are ordinary words)."""


def payload_of(body: dict) -> dict:
    """The sealed payload JSON a Brain request carries."""
    user = body["messages"][-1]["content"]
    return json.loads(user.rsplit("Input: ", 1)[1].rsplit("\nReply:", 1)[0])


def relation_brain(body: dict) -> str:
    """A scripted Brain that reads the payload: one hop from TE_1; selection keeps the candidates whose relation
    paths sort first (deterministic whatever the session's pseudonyms)."""
    shown = payload_of(body)
    one_hop = {"text": "TE_1 -[link]-> ANSWER", "relations": [], "depth": 1}
    if shown["kind"] == "analysis":
        return json.dumps({"sub_questions": [shown["question"]], "depth": 1, "indicators": [one_hop]})
    if shown["kind"] != "selection":
        return json.dumps({"indicator": one_hop, "targets": []})
    ranked = sorted(shown["candidates"], key=lambda c: (json.dumps(c["branches"]), c["id"]))
    return json.dumps({"ids": [c["id"] for c in ranked][: shown["keep"]]})


def checker_form(text: str) -> str:
    """The checker's own normalisation (apart from rg.privacy): NFKC, case-folded, marks and invisible
    characters dropped, everything but letters and digits a space."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text))
    text = "".join(c for c in text if not unicodedata.combining(c) and unicodedata.category(c) != "Cf")
    return " " + re.sub(r"[^0-9a-z]+", " ", text.casefold()).strip() + " "


def app_args(config: Path, **kg) -> dict[str, Any]:
    """The ``args`` of a serve config file, its KG and linking index replaced, replicas on 0 CPUs."""
    import yaml

    [app] = yaml.safe_load(config.read_text())["applications"]
    args = dict(app["args"])
    args["kg"] = kg
    args.pop("kg_edits", None)  # two apps, one edit log each at most: this bench asks questions only
    hand = args["dualtower"].get("hand", {})
    if hand.get("kind") == "tuned" and not Path(hand.get("reader", "")).is_dir():  # no demo run here
        args["dualtower"] = {**args["dualtower"], "hand": {"kind": "local"}}
    small = {"num_cpus": 0, "min_replicas": 1, "max_replicas": 1}
    for name in ("ingress", "hand", "brain"):
        args[name] = {**args.get(name, {}), **small}
    return args


def post(url: str, body: dict) -> tuple[dict, float]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read()), time.perf_counter() - started


def compare(base: str, questions: Sequence[str], brain: dict, apps: dict[str, dict], folder: Path,
            server: ScriptedServer | None) -> tuple[dict[str, Any], dict[str, list[list[str]]]]:
    """Deploy both apps with ``brain``, ask every question of each, and compare; also the bodies the scripted
    Brain ``server`` received per app and question."""
    from ray import serve

    from serve.app import build_app

    replies: dict[str, list[dict]] = {}
    seconds: dict[str, list[float]] = {}
    sent: dict[str, list[list[str]]] = {}
    deploy: dict[str, float] = {}
    for name, args in apps.items():
        args = {**args, "dualtower": {**args["dualtower"], "brain": brain},
                "linking": {**args["linking"], "index_dir": str(folder / f"index-{name}")}}
        started = time.perf_counter()
        serve.run(build_app(args), name=name, route_prefix=f"/{name}")
        deploy[name] = round(time.perf_counter() - started, 1)
        replies[name], seconds[name], sent[name] = [], [], []
        for question in questions:
            before = len(server.chat_requests) if server else 0
            reply, took = post(f"{base}/{name}/v1/answer", {"question": question})
            replies[name].append(reply)
            seconds[name].append(took)
            sent[name].append([r.raw.decode() for r in server.chat_requests[before:]] if server else [])
        serve.delete(name)
    p50 = {name: statistics.median(s) * 1000 for name, s in seconds.items()}
    out: dict[str, Any] = {
        "questions": len(questions),
        "hand": {name: args["dualtower"].get("hand", {}).get("kind", "local") for name, args in apps.items()},
        "deploy_s": deploy,
        "same_answers": sum(a["answers"] == b["answers"] for a, b in zip(replies["memory"], replies["sparql"])),
        "answered": {name: sum(bool(r["answers"]) for r in rs) for name, rs in replies.items()},
        "unverified": {name: sum(r["fallback"] == "unverified" for r in rs) for name, rs in replies.items()},
        "p50_ms": {name: round(v, 1) for name, v in p50.items()},
        "sparql_vs_memory_p50": round(p50["sparql"] / p50["memory"], 3),
        "differing": [{"question": q, "memory": a["answers"], "sparql": b["answers"]}
                      for q, a, b in zip(questions, replies["memory"], replies["sparql"])
                      if a["answers"] != b["answers"]][:10],
    }
    if server is not None:
        out["requests"] = {name: sum(len(s) for s in per) for name, per in sent.items()}
        out["exposure_matches"] = {name: sum(
            (r["exposure_totals"]["brain"]["requests"], r["exposure_totals"]["brain"]["request_chars"])
            == (len(bodies), sum(len("\n".join(m["content"] for m in json.loads(b)["messages"])) for b in bodies))
            for r, bodies in zip(replies[name], sent[name])) for name in apps}
    return out, sent


def leaking(bodies: Sequence[str], strings: Sequence[str]) -> int:
    """Bodies holding any of ``strings`` as whole words, in the checker's normalisation."""
    forms = [form for form in map(checker_form, strings) if len(form.strip()) >= 3]
    folded = [checker_form(b) for b in bodies]
    return sum(any(f in body for f in forms) for body in folded)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.privacy_stores", description=__doc__.strip().split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 questions")
    parser.add_argument("--questions", type=int, default=200, help="synthetic questions asked (of 200)")
    parser.add_argument("--planner", type=Path, default=Path("outputs/demo/plan/planner"),
                        help="the demo's planner for the local Brain (skipped when absent)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    record = RunRecord("bench.privacy_stores", argv)
    n = 20 if args.quick else args.questions
    started = time.perf_counter()
    before = machine()
    import ray
    from ray import serve

    from rg.jobs.load_kg import LoadKGConfig, load_kg
    from rg.stores.ntriples import entity_ids
    from rg.graph import KnowledgeGraph
    from rg.run.ports import free_port, free_ports

    data = generate(SyntheticConfig(seed=0, questions=200))
    questions = [q.question for q in data.questions[:n]]
    root = Path(__file__).resolve().parents[1]
    result: dict[str, Any] = {"machine_before": before, "questions": n}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        http_port, isql_port = free_ports(2)
        cfg = LoadKGConfig(output_dir=str(folder / "kg"), synthetic=SyntheticConfig(seed=0), graph=GRAPH,
                           virtuoso={"data_dir": str(folder / "virtuoso"), "http_port": http_port,
                                     "isql_port": isql_port})
        report = load_kg(cfg)
        from rg.stores.virtuoso import VirtuosoServer

        virtuoso = VirtuosoServer(folder / "virtuoso", cfg.virtuoso.http_port, cfg.virtuoso.isql_port)
        try:
            apps = {"memory": app_args(root / "configs/serve_demo.yaml", synthetic={"seed": 0, "questions": 200}),
                    "sparql": app_args(root / "configs/serve_demo_sparql.yaml", store=report["store_config"],
                                       schema_dir=str(folder / "kg"))}
            owns_ray = not ray.is_initialized()  # a test session may have started one
            if owns_ray:
                ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            port = free_port()
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            base = f"http://127.0.0.1:{port}"
            if args.planner.exists():
                local = {"kind": "local", "planner": str(args.planner.resolve()), "beams": 3}
                result["local"], _ = compare(base, questions, local, apps, folder, None)
            else:
                result["local"] = {"skipped": f"no planner at {args.planner}: run python -m jobs.pipeline "
                                              "--config configs/demo.yaml"}
            with ScriptedServer(Script.always(Respond(relation_brain))) as brain_server:
                llm = {"kind": "llm", "reasks": 0, "llm": {"base_url": brain_server.base_url, "model": "scripted",
                                                          "side": "brain", "max_retries": 0, "timeout_s": 10.0}}
                result["llm"], sent = compare(base, questions, llm, apps, folder, brain_server)
            kg = KnowledgeGraph.from_triples(data.triples, dedup=True)
            named = [e for e, kind in data.entity_types.items() if kind in NAMED_KINDS]
            strings = named + [i for i in entity_ids(kg).tolist()]
            result["llm"]["leaking_bodies"] = {name: leaking([b for per in s for b in per], strings)
                                               for name, s in sent.items()}
            serve.shutdown()
            if owns_ray:
                ray.shutdown()
        finally:
            virtuoso.stop()
    result["machine_after"] = machine()
    result["seconds"] = round(time.perf_counter() - started, 1)
    write_report(args.out, result, record)
    llm = result["llm"]
    local = result["local"]
    print(f"privacy_stores: {n} questions; llm Brain same answers {llm['same_answers']}/{n}, leaking bodies "
          f"{llm['leaking_bodies']}, sparql/memory p50 {llm['sparql_vs_memory_p50']}; local Brain "
          + (f"same answers {local['same_answers']}/{n}" if "same_answers" in local else local["skipped"])
          + f"; {result['seconds']} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
