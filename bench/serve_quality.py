"""What the served endpoint answers, through HTTP, against what the pipeline's QA stages scored on the same questions.

    RAY_AUTH_MODE=disabled python -m bench.serve_quality --quick
    RAY_AUTH_MODE=disabled python -m bench.serve_quality [--pipeline-dir outputs/demo] [--config configs/serve_demo.yaml]
    RAY_AUTH_MODE=disabled python -m bench.serve_quality --metaqa [--metaqa-config configs/serve_metaqa.yaml]

After ``python -m jobs.pipeline --config configs/demo.yaml``: the app of ``--config`` (the demo's endpoint) runs on
local Ray Serve and is asked, over HTTP and without topics (the Hand links them), every question the pipeline's
``qa/dualtower`` stage scored (the demo's 40 validation questions) in four forms: as written; typed (lower case,
no question mark, as users type); paraphrased (another wording of its synthetic template,
``rg.data.paraphrase``); and rewritten (the paraphrase, typed). Hits@1, Macro-F1 and Micro-F1 (``rg.metrics``,
exact match) of each are set against the pipeline's ``qa/dualtower`` (the same controller on the dataset's topics)
and ``qa/tuned`` (the tuned reader on the MLP's evidence: the baseline), each a ratio to the baseline.

With ``--metaqa`` the app of ``--metaqa-config`` (the MetaQA KB, its planner as the local Brain; see the config's
header for the command that trains it) is then asked a seeded sample of ``--per-hop`` questions per hop from the
test side of the canonical split (``--metaqa-split``) of MetaQA's question files (``--metaqa-data``), as
MetaQA writes them, and scored per hop (``hits1_metaqa``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from bench.machine import RunRecord, machine, write_report
from bench.privacy_stores import post
from rg.metrics import hits_at_1, precision_recall_f1

DEFAULT_OUT = Path("bench/results/serve_quality.json")
FORMS = ("as_written", "typed", "paraphrased", "rewritten")


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


def forms(question: str, topics: Sequence[str], bank) -> dict[str, str]:
    """The question in each of :data:`FORMS`; a question whose template has no other wording keeps its own."""
    paraphrased = next(iter(bank.paraphrases(question, topics, 1)), question)
    return {"as_written": question, "typed": typed(question), "paraphrased": paraphrased,
            "rewritten": typed(paraphrased)}


@contextlib.contextmanager
def served(config: Path) -> Iterator[str]:
    """The app of serve config ``config`` on local Ray Serve, one replica of each deployment on no reserved CPU;
    yields its ``/v1/answer`` URL."""
    import yaml
    from ray import serve

    from rg.run.ports import free_port
    from serve.app import build_app

    [app] = yaml.safe_load(config.read_text())["applications"]
    app_args = dict(app["args"])
    app_args.pop("kg_edits", None)  # this bench asks questions only
    for name in ("ingress", "hand", "brain"):
        app_args[name] = {**app_args.get(name, {}), "num_cpus": 0, "min_replicas": 1, "max_replicas": 1}
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(build_app(app_args), name="quality", route_prefix="/")
        yield f"http://127.0.0.1:{port}/v1/answer"
    finally:
        serve.shutdown()


def ask(url: str, texts: Sequence[str], seconds: list[float]) -> list[list[str]]:
    """Each question's answers from the endpoint; each reply's latency is appended to ``seconds``."""
    answers = []
    for text in texts:
        reply, took = post(url, {"question": text})
        answers.append(reply["answers"])
        seconds.append(took)
    return answers


def latency(seconds: Sequence[float]) -> dict[str, float]:
    p50, p95 = (round(1000 * float(q), 1) for q in np.percentile(seconds, [50, 95])) if seconds else (0.0, 0.0)
    return {"seconds_per_question_mean": round(sum(seconds) / max(len(seconds), 1), 3), "p50_ms": p50, "p95_ms": p95}


def demo_quality(pipeline_dir: Path, config: Path, quick: bool) -> dict[str, Any]:
    """The demo's endpoint against the pipeline's QA stages (module docstring)."""
    from rg.data.paraphrase import synthetic_bank
    from rg.data.synthetic.io import QUESTIONS_FILE, read_kg_folder
    from rg.jobs.build_subgraphs import SYNTHETIC_DATASET

    rows = {stage: [json.loads(line) for line in (pipeline_dir / "qa" / stage / "predictions.jsonl").open()]
            for stage in ("dualtower", "tuned")}
    questions = rows["dualtower"][: 10 if quick else None]
    golds = [r["gold"] for r in questions]
    by_id = {stage: {r["id"]: r["answers"] for r in rs} for stage, rs in rows.items()}
    dataset = pipeline_dir / "build" / SYNTHETIC_DATASET
    if not (dataset / QUESTIONS_FILE).exists():
        raise SystemExit(f"{dataset / QUESTIONS_FILE} is missing: the paraphrased forms are written with the "
                         "questions' topic names from the build stage's dataset. Fix: run the main command "
                         "(python -m jobs.pipeline --config configs/demo.yaml) or pass its --pipeline-dir")
    topics = {q.id: q.q_entities for q in read_kg_folder(dataset)[1]}
    bank = synthetic_bank()
    # the bench writes the paraphrases with the dataset's topic names; the endpoint gets only the text
    texts = [forms(r["question"], topics.get(r["id"], ()), bank) for r in questions]
    result: dict[str, Any] = {"config": str(config), "questions": len(questions),
                              "paraphrased": sum(t["paraphrased"] != r["question"] for t, r in zip(texts, questions))}
    seconds: list[float] = []
    with served(config) as url:
        replies = {form: ask(url, [t[form] for t in texts], seconds) for form in FORMS}
    baseline = scores([by_id["tuned"][r["id"]] for r in questions], golds)
    result["pipeline_tuned"] = baseline
    result["pipeline_dualtower"] = scores([by_id["dualtower"][r["id"]] for r in questions], golds)
    for form, answers in replies.items():
        result[f"served_{form}"] = scores(answers, golds)
        result[f"served_{form}_vs_tuned"] = round(result[f"served_{form}"]["hits_at_1"] / max(baseline["hits_at_1"],
                                                                                               1e-9), 3)
    result["served_equals_pipeline_dualtower"] = sum(a == by_id["dualtower"][r["id"]]
                                                     for a, r in zip(replies["as_written"], questions))
    result.update(latency(seconds))
    # the names for the headline figures (the demo's validation questions through HTTP)
    result["hits1_demo"] = result["served_as_written"]["hits_at_1"]
    result["macro_f1_demo"] = result["served_as_written"]["macro_f1"]
    result["hits1_demo_typed"] = result["served_typed"]["hits_at_1"]
    result["hits1_demo_paraphrased"] = result["served_paraphrased"]["hits_at_1"]
    result["hits1_demo_rewritten"] = result["served_rewritten"]["hits_at_1"]
    return result


def metaqa_questions(data: str, split: str, per_hop: int, seed: int = 0) -> dict[int, list]:
    """Hop → a seeded sample of ``per_hop`` questions of the split's test side (stratified by hop), in file order,
    read from ``qa_test_{k}hop.txt.gz`` under ``data`` (``@shared/...`` allowed) for each hop the split lists."""
    from rg.data.metaqa import read_metaqa_questions
    from rg.data.sample import Question
    from rg.data.splits import SplitConfig, read_question_split
    from rg.run.paths import resolve_data_path

    hops = sorted({int(g.removesuffix("hop")) for g in read_question_split(resolve_data_path(split)).group.values()})
    wanted = SplitConfig(file=split, seed=seed, max_questions={"test": per_hop * len(hops)}).ids_from_file()["test"]
    out: dict[int, list] = {}
    for k in hops:
        path = resolve_data_path(f"{data.rstrip('/')}/qa_test_{k}hop.txt.gz")
        out[k] = [q for q in read_metaqa_questions(path, k, "test") if isinstance(q, Question) and q.id in wanted]
    return out


def metaqa_quality(config: Path, data: str, split: str, per_hop: int) -> dict[str, Any]:
    """The MetaQA endpoint on a seeded sample of the split's test side, per hop (module docstring)."""
    questions = metaqa_questions(data, split, per_hop)
    seconds: list[float] = []
    result: dict[str, Any] = {"config": str(config), "data": data, "split": split,
                              "questions": {f"{k}hop": len(qs) for k, qs in questions.items()}}
    with served(config) as url:
        for k, qs in questions.items():
            started = len(seconds)
            answers = ask(url, [q.question for q in qs], seconds)
            result[f"{k}hop"] = {**scores(answers, [q.answers for q in qs]), **latency(seconds[started:])}
    result.update(latency(seconds))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serve_quality", description=__doc__.strip().split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the first 10 demo questions; 10 MetaQA questions per hop")
    parser.add_argument("--pipeline-dir", type=Path, default=Path("outputs/demo"))
    parser.add_argument("--config", type=Path, default=Path("configs/serve_demo.yaml"))
    parser.add_argument("--metaqa", action="store_true", help="also the MetaQA endpoint (hits1_metaqa)")
    parser.add_argument("--metaqa-config", type=Path, default=Path("configs/serve_metaqa.yaml"))
    parser.add_argument("--metaqa-data", default="@shared/metaqa", help="folder of qa_test_{1,2,3}hop.txt.gz")
    parser.add_argument("--metaqa-split", default="@shared/splits/metaqa_split.json.gz")
    parser.add_argument("--per-hop", type=int, default=300, help="MetaQA questions per hop")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.metaqa and not args.metaqa_config.exists():
        parser.error(f"--metaqa-config {args.metaqa_config} does not exist")
    record = RunRecord("bench.serve_quality", argv)
    started = time.perf_counter()
    import ray

    result: dict[str, Any] = {"machine_before": machine()}
    owns_ray = not ray.is_initialized()
    if owns_ray:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result.update(demo_quality(args.pipeline_dir, args.config, args.quick))
        if args.metaqa:
            result["metaqa"] = metaqa_quality(args.metaqa_config, args.metaqa_data, args.metaqa_split,
                                              10 if args.quick else args.per_hop)
    finally:
        if owns_ray:
            ray.shutdown()
    result["hits1_metaqa"] = ({h: result["metaqa"][h]["hits_at_1"] for h in result["metaqa"]["questions"]}
                              if args.metaqa else None)
    result["machine_after"] = machine()
    result["seconds"] = round(time.perf_counter() - started, 1)
    write_report(args.out, result, record)
    print(f"serve_quality: {result['questions']} demo questions through HTTP: Hits@1 as written "
          f"{result['hits1_demo']}, typed {result['hits1_demo_typed']}, paraphrased "
          f"{result['hits1_demo_paraphrased']}, rewritten {result['hits1_demo_rewritten']}; pipeline dualtower "
          f"{result['pipeline_dualtower']['hits_at_1']}, tuned {result['pipeline_tuned']['hits_at_1']}; "
          f"p50 {result['p50_ms']} ms" + (f"; MetaQA Hits@1 {result['hits1_metaqa']}" if args.metaqa else "")
          + f"; {result['seconds']} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
