"""The dual-tower controller end to end: accuracy per privacy mode, Brain calls, latency per stage.

    python -m bench.dualtower --quick
    python -m bench.dualtower [--questions 200] [--train 600] [--epochs 20] [--out PATH]
    python -m bench.dualtower --metaqa-subgraphs DIR --metaqa-planner RAW --metaqa-privacy-planner CLUSTERS
                              --metaqa-schema DIR [--metaqa-per-hop 100]

On a fixed sample of the synthetic KG (the embedded default), a tiny relation-path planner is trained on
masked training questions — once on the raw relation labels (plaintext and utility modes) and once on
the privacy view's relation clusters — and the controller answers the held-out questions with the local
Brain in ``plaintext``, ``utility``, ``privacy`` and ``privacy`` + sanitisation (supernodes) modes.
With ``--metaqa-subgraphs`` the four modes run instead on MetaQA's seeded test sample of
configs/dualtower_metaqa.yaml (``--metaqa-per-hop`` questions per hop, the ``{1,2,3}hop-test`` shards
of ``jobs.build_subgraphs``), with that config's controller settings, the trained MetaQA planners
(raw, and on the cluster view) and the KG-wide schema of ``jobs.privacy_report``; the synthetic KG
then still gives the two-topic comparison and the LLM Brain's tokens. Larger MetaQA runs go through
``jobs.evaluate`` with the same config (docs/dualtower.md). Reported per mode:
Hits@1, Brain calls per question, questions/s and the seconds per stage (link, subgraph,
anonymise, explore, Brain, verify, read). PrivGemo reports 4.6–6.5 Brain calls per question and
ToG 13.5–21.7 LLM calls per question; they are quoted as anchors, not measured here. A few
questions also run against the scripted LLM Brain at 127.0.0.1, for the prompt and completion
tokens per side of the real prompts (the server counts whitespace tokens). ``--similarity`` and
``--resolve-clusters`` set the DRM and how the Hand grounds a cluster path in privacy mode (default
``planner``: by the raw-relation planner's likelihood for the raw question, on the Hand).
"""

from __future__ import annotations

import argparse
import os
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bench.machine import RunRecord, write_report
from rg.data.sample import Sample
from rg.subgraphs import SubgraphConfig, Unbuildable, build_sample
from rg.data.synthetic import SyntheticConfig, generate
from rg.graph import KnowledgeGraph
from rg.metrics import normalize_answer, precision_recall_f1
from rg.privacy import KGSchema
from rg.reasoning.dualtower import DualTowerConfig, build_controller, view_relation_path
from rg.reasoning.dualtower.controller import STAGES
from rg.retrievers.planner import PlannerConfig, PlannerModel
from rg.retrievers.planner.prompt import mask_topics
from rg.jobs.weak_labels import weak_rows
from rg.supervision.labels import LabelConfig
from rg.training.planner_data import plan_targets, target_rows
from rg.training.planner_loop import PlannerFitConfig, fit_planner
from tests.scripted_server import Respond, Script, ScriptedServer

ANCHORS = {"privgemo_brain_calls_per_question": [4.6, 6.5], "tog_llm_calls_per_question": [13.5, 21.7]}
MODES = {
    "plaintext": {"privacy": {"mode": "plaintext"}},
    "utility": {"privacy": {"mode": "utility"}},
    "privacy": {"privacy": {"mode": "privacy"}},
    "privacy_sanitised": {"privacy": {"mode": "privacy"}, "sanitiser": {"group": True, "max_nodes": 200}},
}


def samples(questions: int, seed: int) -> tuple[list[Sample], KGSchema]:
    syn = generate(SyntheticConfig(questions=questions, seed=seed))
    kg = KnowledgeGraph.from_triples(syn.triples)
    out = []
    for question in syn.questions:
        try:
            out.append(build_sample(kg, question, SubgraphConfig(max_triples=300)).sample)
        except Unbuildable:
            continue
    return out, KGSchema.build(syn.triples, syn.entity_types)


def train(train_set: Sequence[Sample], view, epochs: int) -> PlannerModel:
    """A tiny masked-topic planner on the weak relation paths, relations mapped by ``view``."""
    targets, _ = plan_targets(train_set, weak_rows(train_set, LabelConfig()), max_paths=1, max_len=3)
    rows = [(i, q, tuple(view(p))) for i, q, p in target_rows(targets, mask_topics)]
    relations = {label.removesuffix("^-1") for _, _, p in rows for label in p}
    config = PlannerConfig(tiny={"layers": 1, "hidden": 64, "heads": 4, "max_positions": 64},
                           lora={"dropout": 0.0}, max_prompt_tokens=40, mask_topics=True)
    torch.manual_seed(0)
    planner = PlannerModel.build(config, [q for _, q, _ in rows], relations)
    examples = planner.examples(rows)
    result = fit_planner(planner, examples, [], PlannerFitConfig(epochs=epochs, batch_size=32, lr=0.01))
    planner.load_trainable_state(result.best_state)
    return planner.eval()


def hit1(answers: Sequence[str], gold: Sequence[str]) -> bool:
    return bool(answers) and normalize_answer(answers[0]) in {normalize_answer(g) for g in gold}


def run_mode(name: str, overrides: dict[str, Any], planner: PlannerModel, schema: KGSchema,
             test: Sequence[Sample], similarity: str = "lexical", resolve_clusters: str = "question",
             hand_planner: PlannerModel | None = None, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """One privacy mode over ``test``; ``hand_planner`` is the raw-relation planner of ``resolve_clusters: planner``;
    ``base``: controller settings the mode's are laid over (a config file's ``dualtower`` section)."""
    settings = {**(base or {}), **overrides, "similarity": similarity}
    settings["brain"] = {**settings.get("brain", {}), "kind": "local", "planner": None}
    settings["hand"] = {**settings.get("hand", {}), "resolve_clusters": resolve_clusters, "planner": None}
    config = DualTowerConfig(**settings)
    controller = build_controller(config, schema, planner=planner, hand_planner=hand_planner)
    stages = {s: 0.0 for s in STAGES}
    hits = calls = faults = 0
    kinds: Counter[str] = Counter()
    started = time.perf_counter()
    for sample in test:
        result = controller.answer(sample.question, sample.q_entities, sample.triples)
        hits += hit1(result.answers, sample.answers)
        calls += result.brain_calls
        faults += bool(result.faults)
        kinds.update(f"{f.stage}:{f.reason}" for f in result.faults)
        for stage, seconds in result.timings.items():
            stages[stage] += seconds
    seconds = time.perf_counter() - started
    n = max(len(test), 1)
    return {"mode": name, "questions": len(test), "hits1": hits / n, "brain_calls_per_question": calls / n,
            "questions_with_faults": faults, "faults_by_kind": dict(kinds.most_common()),
            "questions_per_s": len(test) / seconds if seconds else None,
            "seconds_per_question_by_stage": {s: v / n for s, v in stages.items()}}


def metaqa(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The four modes on MetaQA's seeded test sample (module docstring); returns (modes, run facts)."""
    from rg.config import load_config
    from rg.data.splits import load_split_samples
    from rg.evaluation.dualtower_qa import load_schema
    from rg.jobs.evaluate_qa import QAEvaluateConfig
    from rg.retrievers.planner.model import load_planner

    config_file = Path(__file__).resolve().parents[1] / "configs" / "dualtower_metaqa.yaml"
    inputs = [str(args.metaqa_subgraphs / f"{hop}hop-test") for hop in (1, 2, 3)]
    missing = [i for i in inputs if not Path(i).is_dir()]
    if missing:
        raise SystemExit(f"--metaqa-subgraphs needs {{1,2,3}}hop-test shard folders; missing {missing}. Fix: run "
                         "python -m jobs.build_subgraphs --config configs/build_metaqa.yaml")
    cfg = load_config(config_file, QAEvaluateConfig, overrides=[
        f"input=[{','.join(inputs)}]", f"split.max_questions={{test: {3 * args.metaqa_per_hop}}}",
        f"schema_dir={args.metaqa_schema}", "dualtower.brain.planner=null"])
    test = load_split_samples(cfg.input, cfg.split, (cfg.side,), None, graph=True)[cfg.side]
    schema = load_schema(cfg.schema_dir)
    raw, clustered = load_planner(args.metaqa_planner), load_planner(args.metaqa_privacy_planner)
    base = cfg.dualtower.model_dump()
    modes = []
    for name, overrides in MODES.items():
        private = name.startswith("privacy")
        mode = run_mode(name, overrides, clustered if private else raw, schema, test, cfg.dualtower.similarity,
                        args.resolve_clusters, raw, base)
        hops = {h: [s for s in test if s.hops == h] for h in (1, 2, 3)}
        mode["questions_by_hop"] = {str(h): len(v) for h, v in hops.items()}
        modes.append(mode)
    facts = {"config": str(config_file.relative_to(config_file.parents[1])), "per_hop": args.metaqa_per_hop,
             "test_questions": len(test), "planner": str(args.metaqa_planner),
             "privacy_planner": str(args.metaqa_privacy_planner), "schema_dir": str(args.metaqa_schema),
             "similarity": cfg.dualtower.similarity}
    return modes, facts


def multi_topic(planner: PlannerModel, schema: KGSchema, questions: Sequence[Sample]) -> dict[str, Any]:
    """Held-out questions with two or more topic entities, utility mode: PrivGemo's joint search (every candidate
    one connected path covering all topic entities) against each topic entity explored separately."""
    out: dict[str, Any] = {"questions": len(questions)}
    for kind in ("joint", "separate"):
        config = DualTowerConfig(privacy={"mode": "utility"}, similarity="lexical", brain={"kind": "local"},
                                 multi_topic=kind)
        controller = build_controller(config, schema, planner=planner)
        hits = f1 = answered = answers = calls = 0.0
        for sample in questions:
            result = controller.answer(sample.question, sample.q_entities, sample.triples)
            hits += hit1(result.answers, sample.answers)
            f1 += precision_recall_f1(result.answers, sample.answers).f1
            answered += bool(result.answers)
            answers += len(result.answers)
            calls += result.brain_calls
        n = max(len(questions), 1)
        out[kind] = {"hits1": hits / n, "f1": f1 / n, "answered": answered / n, "answers_per_question": answers / n,
                     "brain_calls_per_question": calls / n}
    return out


def scripted_brain(body: dict[str, Any]) -> str:
    user = body["messages"][-1]["content"]
    shown = json.loads(user.rsplit("Input: ", 1)[1].rsplit("\nReply:", 1)[0])
    if shown["kind"] == "analysis":
        path = shown["relation_paths"][0] if shown["relation_paths"] else []
        return json.dumps({"sub_questions": [shown["question"]], "depth": max(1, len(path)), "indicators": [
            {"text": "TE_1 " + " ".join(f"-[{r}]->" for r in path) + " ANSWER", "relations": path,
             "depth": max(1, len(path))}]})
    return json.dumps({"ids": [c["id"] for c in shown["candidates"]][: shown["keep"]]})


def llm_tokens(schema: KGSchema, test: Sequence[Sample]) -> dict[str, Any]:
    """Tokens per side of real prompts against the scripted Brain (utility mode)."""
    with ScriptedServer(Script.always(Respond(scripted_brain))) as server:
        config = DualTowerConfig(similarity="lexical", brain={"kind": "llm", "llm": {
            "base_url": server.base_url, "model": "scripted", "side": "brain", "backoff_s": 0.0, "max_backoff_s": 0.0}})
        controller = build_controller(config, schema)
        totals = {"brain": {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0},
                  "hand": {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}}
        for sample in test:
            usage = controller.answer(sample.question, sample.q_entities, sample.triples).usage
            for sides in usage["stages"].values():
                for side, counts in sides.items():
                    for key in totals[side]:
                        totals[side][key] += counts[key]
    n = max(len(test), 1)
    return {"questions": len(test), "per_question": {s: {k: v / n for k, v in c.items()} for s, c in totals.items()}}


def several_line(report: dict[str, Any]) -> str:
    joint, separate = report["joint"], report["separate"]
    return (f"{report['questions']} two-topic questions: joint Hits@1 {joint['hits1']:.2f} F1 {joint['f1']:.2f}, "
            f"separate Hits@1 {separate['hits1']:.2f} F1 {separate['f1']:.2f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dualtower", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="A small sample (under a minute on an idle laptop).")
    parser.add_argument("--questions", type=int, default=200, help="Held-out questions answered per mode.")
    parser.add_argument("--train", type=int, default=600, help="Training questions of the planner Brains.")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--llm-questions", type=int, default=10, help="Questions run against the scripted LLM Brain.")
    parser.add_argument("--multi-topic", type=int, default=30,
                        help="Held-out questions with two or more topic entities for joint vs separate exploration.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--similarity", choices=("lexical", "encoder"), default="lexical",
                        help="The DRM of pruning and of the Hand's choice among a cluster's relations "
                             "(encoder: the offline MiniLM).")
    parser.add_argument("--resolve-clusters", choices=("question", "planner", "all"), default="planner",
                        help="hand.resolve_clusters: how the Hand grounds a cluster path in privacy mode "
                             "(planner: the Hand scores a cluster's raw relations with the raw-relation planner).")
    parser.add_argument("--metaqa-subgraphs", type=Path, default=None,
                        help="Folder of MetaQA's {1,2,3}hop-test shards: the four modes run on MetaQA (module docstring).")
    parser.add_argument("--metaqa-per-hop", type=int, default=100, help="MetaQA test questions per hop.")
    parser.add_argument("--metaqa-planner", type=Path, default=None,
                        help="MetaQA planner on raw relations (configs/train_planner_metaqa_kb.yaml).")
    parser.add_argument("--metaqa-privacy-planner", type=Path, default=None,
                        help="MetaQA planner on the cluster view (the same config with view_schema_dir).")
    parser.add_argument("--metaqa-schema", type=Path, default=None,
                        help="Folder with the KG-wide privacy_schema.json (jobs.privacy_report on MetaQA).")
    parser.add_argument("--out", default="bench/results/dualtower.json")
    args = parser.parse_args(argv)
    record = RunRecord("bench.dualtower", argv)
    if args.metaqa_subgraphs is not None:
        needed = {"--metaqa-planner": args.metaqa_planner, "--metaqa-privacy-planner": args.metaqa_privacy_planner,
                  "--metaqa-schema": args.metaqa_schema}
        absent = [flag for flag, value in needed.items() if value is None]
        if absent:
            parser.error(f"--metaqa-subgraphs also needs {', '.join(absent)} (the commands are in "
                         "configs/dualtower_metaqa.yaml)")
    if args.quick:
        args.questions, args.train, args.epochs, args.llm_questions, args.multi_topic = 20, 120, 8, 3, 6
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    pool, schema = samples(args.questions + args.train, args.seed)
    random.Random(args.seed).shuffle(pool)
    test, train_set = pool[: args.questions], pool[args.questions:]
    # the two-topic set: the held-out ones, topped up from a larger draw over the same KG (a question asked in
    # training is never taken; the generator's question list is not prefix-stable, so the draw is separate)
    seen = {s.question for s in pool}
    spare = [s for s in samples(args.questions + args.train + 10 * args.multi_topic, args.seed)[0]
             if s.question not in seen] if args.multi_topic else []
    several = [s for s in test + spare if len(s.q_entities) > 1][: args.multi_topic]
    raw = train(train_set, lambda p: p, args.epochs)
    metaqa_facts = None
    if args.metaqa_subgraphs is not None:
        modes, metaqa_facts = metaqa(args)
    else:
        clustered = train(train_set, lambda p: view_relation_path(p, schema, "privacy"), args.epochs)
        modes = [run_mode(name, overrides, clustered if name.startswith("privacy") else raw, schema, test,
                          args.similarity, args.resolve_clusters, raw)
                 for name, overrides in MODES.items()]
    by_mode = {m["mode"]: m for m in modes}
    result = {
        "benchmark": "dualtower", "data": "metaqa" if metaqa_facts else "synthetic", "metaqa": metaqa_facts,
        "quick": args.quick, "seed": args.seed,
        "train_questions": len(train_set), "brain": "local (planner)",
        "test_questions": metaqa_facts["test_questions"] if metaqa_facts else len(test),
        "similarity": metaqa_facts["similarity"] if metaqa_facts else args.similarity,
        "resolve_clusters": args.resolve_clusters,
        "hits1_plaintext": by_mode["plaintext"]["hits1"], "hits1_utility": by_mode["utility"]["hits1"],
        "hits1_privacy": by_mode["privacy"]["hits1"], "hits1_privacy_sanitised": by_mode["privacy_sanitised"]["hits1"],
        "brain_calls_per_question": by_mode["utility"]["brain_calls_per_question"],
        "questions_per_s": by_mode["utility"]["questions_per_s"],
        "modes": modes, "anchors": ANCHORS, "multi_topic": multi_topic(raw, schema, several),
        "llm_brain_tokens": llm_tokens(schema, test[: args.llm_questions]),
        "seconds": time.perf_counter() - started,
        "cpus": os.cpu_count(), "load_average_before_after": [load_before, os.getloadavg()[0]],
    }
    out = Path(args.out)
    write_report(out, result, record)
    print(f"dualtower: Hits@1 plaintext {result['hits1_plaintext']:.2f} utility {result['hits1_utility']:.2f} "
          f"privacy {result['hits1_privacy']:.2f} privacy+sanitised {result['hits1_privacy_sanitised']:.2f}; "
          f"{result['brain_calls_per_question']:.2f} Brain calls/question (PrivGemo 4.6-6.5, ToG 13.5-21.7); "
          f"{result['questions_per_s']:.2f} questions/s; {several_line(result['multi_topic'])} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
