"""What the served endpoint answers, through HTTP, against what the pipeline's QA stages scored on the same questions.

    RAY_AUTH_MODE=disabled python -m bench.serve_quality --quick
    RAY_AUTH_MODE=disabled python -m bench.serve_quality [--pipeline-dir outputs/demo] [--config configs/serve_demo.yaml]

After ``python -m jobs.pipeline --config configs/demo.yaml``: the app of ``--config`` (the demo's endpoint) runs on
local Ray Serve and is asked, over HTTP and without topics (the Hand links them), every question the pipeline's
``qa/dualtower`` stage scored (the demo's 40 validation questions), once as written and once lower-cased without
its question mark, as users type. Hits@1, Macro-F1 and Micro-F1 (``rg.metrics``, exact match) of each are set
against the pipeline's ``qa/dualtower`` (the same controller on the dataset's topics) and ``qa/tuned`` (the tuned
reader on the MLP's evidence: the baseline), each a ratio to the baseline.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bench.machine import RunRecord, machine, write_report
from bench.privacy_stores import post
from rg.metrics import hits_at_1, precision_recall_f1

DEFAULT_OUT = Path("bench/results/serve_quality.json")


def scores(answers: Sequence[Sequence[str]], golds: Sequence[Sequence[str]]) -> dict[str, float]:
    """Hits@1, Macro-F1 and Micro-F1 (exact match) of answer lists against gold lists."""
    prf = [precision_recall_f1(list(a), list(g)) for a, g in zip(answers, golds)]
    hit = sum(hits_at_1(list(a), list(g)) for a, g in zip(answers, golds))
    tp = sum(len({x.lower() for x in a} & {x.lower() for x in g}) for a, g in zip(answers, golds))
    predicted, gold = sum(len(set(a)) for a in answers), sum(len(set(g)) for g in golds)
    micro_p, micro_r = tp / max(predicted, 1), tp / max(gold, 1)
    return {"hits_at_1": round(hit / max(len(golds), 1), 3),
            "macro_f1": round(sum(p.f1 for p in prf) / max(len(prf), 1), 3),
            "micro_f1": round(2 * micro_p * micro_r / (micro_p + micro_r) if micro_p + micro_r else 0.0, 3)}


def typed(question: str) -> str:
    """The question as users often type it: lower case, no question mark."""
    return question.lower().rstrip("?").strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serve_quality", description=__doc__.strip().split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the first 10 questions")
    parser.add_argument("--pipeline-dir", type=Path, default=Path("outputs/demo"))
    parser.add_argument("--config", type=Path, default=Path("configs/serve_demo.yaml"))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    record = RunRecord("bench.serve_quality", argv)
    started = time.perf_counter()
    rows = {stage: [json.loads(line) for line in (args.pipeline_dir / "qa" / stage / "predictions.jsonl").open()]
            for stage in ("dualtower", "tuned")}
    questions = rows["dualtower"][: 10 if args.quick else None]
    golds = [r["gold"] for r in questions]
    by_id = {stage: {r["id"]: r["answers"] for r in rs} for stage, rs in rows.items()}
    import ray
    import yaml
    from ray import serve

    from bench.serve import free_port
    from serve.app import build_app

    [app] = yaml.safe_load(args.config.read_text())["applications"]
    app_args = dict(app["args"])
    app_args.pop("kg_edits", None)  # this bench asks questions only
    for name in ("ingress", "hand", "brain"):
        app_args[name] = {**app_args.get(name, {}), "num_cpus": 0, "min_replicas": 1, "max_replicas": 1}
    result: dict[str, Any] = {"machine_before": machine(), "config": str(args.config), "questions": len(questions)}
    owns_ray = not ray.is_initialized()
    if owns_ray:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(app_args), name="quality", route_prefix="/")
    served: dict[str, list[list[str]]] = {"as_written": [], "typed": []}
    seconds: list[float] = []
    for row in questions:
        for form, text in (("as_written", row["question"]), ("typed", typed(row["question"]))):
            reply, took = post(f"http://127.0.0.1:{port}/v1/answer", {"question": text})
            served[form].append(reply["answers"])
            seconds.append(took)
    serve.shutdown()
    if owns_ray:
        ray.shutdown()
    baseline = scores([by_id["tuned"][r["id"]] for r in questions], golds)
    result["pipeline_tuned"] = baseline
    result["pipeline_dualtower"] = scores([by_id["dualtower"][r["id"]] for r in questions], golds)
    for form, answers in served.items():
        result[f"served_{form}"] = scores(answers, golds)
        result[f"served_{form}_vs_tuned"] = round(result[f"served_{form}"]["hits_at_1"] / max(baseline["hits_at_1"],
                                                                                               1e-9), 3)
    result["served_equals_pipeline_dualtower"] = sum(a == by_id["dualtower"][r["id"]]
                                                     for a, r in zip(served["as_written"], questions))
    result["seconds_per_question_mean"] = round(sum(seconds) / max(len(seconds), 1), 3)
    result["p50_ms"], result["p95_ms"] = (round(1000 * float(q), 1) for q in np.percentile(seconds, [50, 95]))
    # the names for the headline figures (the demo's validation questions through HTTP)
    result["hits1_demo"] = result["served_as_written"]["hits_at_1"]
    result["macro_f1_demo"] = result["served_as_written"]["macro_f1"]
    result["hits1_demo_rewritten"] = result["served_typed"]["hits_at_1"]
    result["machine_after"] = machine()
    result["seconds"] = round(time.perf_counter() - started, 1)
    write_report(args.out, result, record)
    print(f"serve_quality: {len(questions)} questions through HTTP: Hits@1 as written "
          f"{result['served_as_written']['hits_at_1']}, typed {result['served_typed']['hits_at_1']}; pipeline "
          f"dualtower {result['pipeline_dualtower']['hits_at_1']}, tuned {baseline['hits_at_1']}; "
          f"p50 {result['p50_ms']} ms; {result['seconds']} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
