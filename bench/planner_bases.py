"""The relation-path planner on the tiny random base vs the pretrained base, on held-out and paraphrased questions.

    python -m bench.planner_bases --quick   # the synthetic KG, 16 training and 6 test questions (wiring only)
    python -m bench.planner_bases [--metaqa-subgraphs DIR] [--bases tiny,pretrained] [--out PATH]

Writes ``bench/results/planner_bases.json`` whole: every dataset of the run (the synthetic KG always,
MetaQA with ``--metaqa-subgraphs``) in one command.
Both bases are trained on the same training questions and the same target paths (the weak
relation paths of :func:`rg.training.planner_data.candidate_targets`, ties resolved by template
consensus as the demo's ``target_consensus: true``), with the demo's planner settings (``mask_topics: true``, path length 3,
LoRA r=8, α=16); only the base, the tokenizer that comes with it and the epochs/learning rate
differ (:data:`BASES`). Each is then scored on

* **seen**: held-out test questions whose wording occurs in training (other topic entities), and
* **paraphrase**: the same test questions reworded with a wording of their family that no
  training question has (:class:`rg.data.paraphrase.TemplateBank`; same topic, same answers).

How training never sees a paraphrase wording: every question is matched to its family and
wording in the bank; a family's *held-out wordings* (:func:`held_out_wordings`) are chosen
before splitting — for the synthetic KG all hand-written paraphrases (the generator only writes
each template's own text), for MetaQA every other wording after the most frequent one. Questions
written in a held-out wording are dropped from both train and test; the paraphrase set is
built from held-out wordings only; :func:`split_by_wording` checks that no training question's
text equals a paraphrase's and raises otherwise.

Metrics per base, dataset (and hop for MetaQA) and set: ``path_exact_match`` (the best of 5
constrained beams is a gold path: the generator's paths for the synthetic KG, the question
type's path for MetaQA), ``hits1`` (QA Hits@1 through the demo's ``paths`` QA stage: the
planner checkpoint as a :class:`~rg.retrievers.planner.scorer.PlannerScorer` with 5 beams,
``evidence.walks: planned``, the retriever-score reader with ``walk_score: last`` and
``aggregate: max``, run by :func:`rg.evaluation.qa.answer_questions`; Hits@1 by
:func:`rg.evaluation.qa_metrics.score_prediction`) and ``seconds_per_epoch`` (mean training
epoch, no validation pass; one process, ``torch.set_num_threads`` as set by the caller).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from bench.machine import RunRecord, write_report
from rg.data.paraphrase import TemplateBank, metaqa_bank, synthetic_bank
from rg.run.paths import shared_data_dir
from rg.data.sample import Sample
from rg.data.splits import seeded_split
from rg.evaluation.qa import answer_questions, inference_view
from rg.evaluation.qa_metrics import Gold, QuestionScore, score_prediction
from rg.evidence import EvidenceConfig
from rg.reasoning import RetrieverReader, RetrieverReaderConfig
from rg.retrievers.planner import DecodeConfig, Plan, PlannerConfig, PlannerModel
from rg.retrievers.planner.model import prompt_question
from rg.retrievers.planner.evaluate import score_plans
from rg.retrievers.planner.scorer import PlannerScorer
from rg.jobs.weak_labels import weak_rows
from rg.supervision.labels import LabelConfig
from rg.training.planner_data import TemplateConsensus, candidate_targets, select_targets, target_rows
from rg.training.planner_loop import PlannerFitConfig, fit_planner

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "planner_bases.json"
SHARED = {"lora": {"rank": 8, "alpha": 16, "dropout": 0.05}, "max_path_len": 3, "mask_topics": True}
BASES: dict[str, dict[str, Any]] = {
    "tiny": {"planner": {**SHARED, "tiny": {"layers": 2, "hidden": 64, "heads": 4, "max_positions": 96},
                         "tokenizer": {"kind": "word", "vocab_size": 4000}},
             "fit": {"lr": 0.003, "batch_size": 16}},
    "pretrained": {"planner": {**SHARED, "checkpoint": "smollm2-135m",
                               "lora": {**SHARED["lora"], "target_modules": ["q_proj", "v_proj"]}},
                   "fit": {"lr": 0.002, "batch_size": 16}},
}
"""Per base: the PlannerConfig (the demo's plan settings; smollm2 with LoRA on q/v and its own
tokenizer plus the relation tokens) and the fit settings besides epochs."""
BEAMS = 5
"""Beams decoded per question, as the demo's ``qa.paths`` stage."""


@dataclass(frozen=True)
class WordingSplit:
    """Train / seen-wording test / paraphrased test questions of one dataset, and what was dropped."""

    train: list[Sample]
    test: list[Sample]
    paraphrased: list[Sample]
    unmatched: int
    held_out_questions: int


def held_out_wordings(bank: TemplateBank, stride: int) -> set[str]:
    """Wordings no training question may have: of each family's wordings after its first, every
    ``stride``-th one from the second (``stride`` 1: all but the first)."""
    return {w for f in bank.families.values() for w in f.wordings[1::stride]}


def split_by_wording(samples: Sequence[Sample], bank: TemplateBank, held_out: set[str], test_fraction: float,
                     seed: int) -> WordingSplit:
    """Split ``samples`` into train / test by a seeded id split, questions in held-out wordings
    dropped, and reword every test question whose family has a held-out wording.

    Each kept sample gets its family's relation paths as ``relation_paths`` (the gold paths of
    exact match) when it has none. Paraphrased samples keep the id with ``~p`` appended.

    Raises:
        ValueError: if a paraphrase's text is also a training question's text.
    """
    kept, unmatched, dropped = [], 0, 0
    for sample in samples:
        found = bank.match(sample.question, sample.q_entities)
        if found is None:
            unmatched += 1
        elif found[1] in held_out:
            dropped += 1
        else:
            kept.append(replace(sample, relation_paths=sample.relation_paths or found[0].paths))
    train_ids, test_ids = seeded_split([s.id for s in kept], test_fraction, seed)
    train = [s for s in kept if s.id in train_ids]
    test = [s for s in kept if s.id in test_ids]
    paraphrased = []
    for sample in test:
        family, _ = bank.match(sample.question, sample.q_entities)  # type: ignore[misc]  # matched above
        options = sorted(w for w in family.wordings if w in held_out)
        if options:
            wording = random.Random(f"{seed}:{sample.id}").choice(options)
            paraphrased.append(replace(sample, id=f"{sample.id}~p", question=wording.format(*sample.q_entities)))
    leaked = {s.question for s in train} & {s.question for s in paraphrased}
    if leaked:
        raise ValueError(f"{len(leaked)} paraphrases are also training questions, e.g. {sorted(leaked)[0]!r}")
    return WordingSplit(train, test, paraphrased, unmatched, dropped)


def train_planner(base: str, train: Sequence[Sample], epochs: int) -> tuple[PlannerModel, dict[str, Any]]:
    """The planner on ``base`` (a key of :data:`BASES`) fitted on the weak paths of ``train``, tied
    paths resolved by template consensus and at most 4 paths per question (the demo's plan stage)."""
    setting = BASES[base]
    config = PlannerConfig.model_validate(setting["planner"])
    targets, stats = candidate_targets(train, weak_rows(train, LabelConfig()), max_len=config.max_path_len)
    targets = select_targets(targets, stats, 4, TemplateConsensus.fit(targets))
    torch.manual_seed(0)
    planner = PlannerModel.build(config, [prompt_question(config, t.question, t.topics) for t in targets],
                                 {r for s in train for _, r, _ in s.triples})
    rows = target_rows(targets, planner.prompt_question)
    result = fit_planner(planner, planner.examples(rows), [], PlannerFitConfig(epochs=epochs, **setting["fit"]))
    planner.load_trainable_state(result.best_state)
    seconds = [h["epoch_seconds"] for h in result.history]
    return planner.eval(), {
        "train_questions": len(targets), "train_examples": len(rows), "epochs": epochs,
        "seconds_per_epoch": round(statistics.mean(seconds), 2), "train_seconds": round(sum(seconds), 1),
        "final_train_loss": round(result.history[-1]["train_loss"], 4),
        "adapter_parameters": planner.adapter_parameters,
    }


def _metrics(plans: Sequence[Plan], samples: Sequence[Sample], scores: Sequence[QuestionScore]) -> dict[str, Any]:
    paths = score_plans(plans, samples, {s.id: s.relation_paths for s in samples})
    return {
        "questions": len(samples),
        "path_exact_match": round(paths["path_exact_match"], 4),
        "hits1": round(sum(s.hits_at_1 for s in scores) / len(scores), 4),
        "hit": round(sum(s.hit for s in scores) / len(scores), 4),
    }


def score_set(scorer: PlannerScorer, samples: Sequence[Sample]) -> dict[str, Any]:
    """Path exact match and QA Hits@1 of ``samples`` through the demo's ``qa.paths`` stage (module
    docstring), overall and per hop count when there are several."""
    if not samples:
        return {"questions": 0}
    reader = RetrieverReader(RetrieverReaderConfig(walk_score="last", aggregate="max"))
    started = time.perf_counter()
    predictions = asyncio.run(answer_questions([inference_view(s) for s in samples], scorer, reader, top_k=None,
                                               evidence=EvidenceConfig(walks="planned")))
    seconds = time.perf_counter() - started
    plans = list(scorer.plans)  # answer_questions scores the whole list in one call
    scores = [score_prediction(p, Gold.of(s)) for p, s in zip(predictions, samples)]
    out = {**_metrics(plans, samples, scores), "failures": sum(p.failure is not None for p in predictions),
           "seconds": round(seconds, 1)}
    hops = sorted({s.hops for s in samples if s.hops is not None})
    if len(hops) > 1:
        out["by_hop"] = {}
        for h in hops:
            index = [i for i, s in enumerate(samples) if s.hops == h]
            out["by_hop"][f"{h}-hop"] = _metrics([plans[i] for i in index], [samples[i] for i in index],
                                                 [scores[i] for i in index])
    return out


def compare_bases(split: WordingSplit, bases: Sequence[str], epochs: dict[str, int]) -> dict[str, Any]:
    """Train each base on ``split.train`` and score it on the seen-wording and paraphrased test sets."""
    out: dict[str, Any] = {}
    decode = DecodeConfig(beam_width=BEAMS, questions_per_batch=16)
    for base in bases:
        planner, training = train_planner(base, split.train, epochs[base])
        with tempfile.TemporaryDirectory(prefix="rg-bench-planner-bases-") as tmp:
            planner.save(Path(tmp) / "planner")
            del planner
            scorer = PlannerScorer(Path(tmp) / "planner", decode)  # as served: read back, LoRA merged
            out[base] = {"training": training, "seen": score_set(scorer, split.test),
                         "paraphrase": score_set(scorer, split.paraphrased)}
    return out


def synthetic_split(questions: int, seed: int) -> WordingSplit:
    """The synthetic KG's questions (as :func:`bench.planner.synthetic_samples` builds them), 20% test."""
    from bench.planner import synthetic_samples

    bank = synthetic_bank()
    return split_by_wording(synthetic_samples(questions, seed), bank, held_out_wordings(bank, 1), 0.2, seed)


def metaqa_split(subgraphs: Path, data: Path, per_hop: int, test_fraction: float, seed: int) -> WordingSplit:
    """MetaQA questions with their subgraphs: the first ``per_hop`` valid rows of each
    ``<subgraphs>/<n>hop-test`` folder (``jobs.build_subgraphs`` output over the test files), split
    per hop by :func:`split_by_wording` (about half are in a held-out wording and dropped);
    families and wordings from the test files' question types under ``data`` (MetaQA's folder)."""
    from bench.evidence import read_first

    bank = metaqa_bank([(data / f"qa_test_{h}hop.txt.gz", data / f"qa_test_{h}hop_qtype.txt.gz") for h in (1, 2, 3)])
    held_out = held_out_wordings(bank, 2)
    parts = []
    for hops in (1, 2, 3):
        folder = subgraphs / f"{hops}hop-test"
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} is missing; build it with jobs.build_subgraphs over qa_test_{hops}hop "
                                    "and pass its parent folder as --metaqa-subgraphs")
        samples, _ = read_first(folder, per_hop)
        parts.append(split_by_wording(samples, bank, held_out, test_fraction, seed))
    return WordingSplit([s for p in parts for s in p.train], [s for p in parts for s in p.test],
                        [s for p in parts for s in p.paraphrased], sum(p.unmatched for p in parts),
                        sum(p.held_out_questions for p in parts))


def split_summary(split: WordingSplit) -> dict[str, int]:
    return {"train_questions": len(split.train), "test_questions": len(split.test),
            "paraphrase_questions": len(split.paraphrased), "unmatched_questions": split.unmatched,
            "held_out_wording_questions_dropped": split.held_out_questions}


@dataclass(frozen=True)
class PlannerRun:
    """Sizes of one planner comparison (``bench.planner_bases`` flags; :data:`QUICK` shrinks them)."""

    synthetic_questions: int = 200
    metaqa_per_hop: int = 400
    metaqa_test_fraction: float = 0.5
    tiny_epochs: int = 20
    pretrained_epochs: int = 3
    max_train: int | None = None
    max_test: int | None = None
    seed: int = 0


QUICK = PlannerRun(synthetic_questions=60, tiny_epochs=2, pretrained_epochs=1, max_train=16, max_test=6)
"""``--quick``: 60 synthetic questions of which the first 16 train and 6 test (and their 6
paraphrases) are used, 2 tiny epochs, 1 smollm2 epoch (one optimiser step); no MetaQA."""


def _cut(split: WordingSplit, run: PlannerRun) -> WordingSplit:
    if run.max_train is None and run.max_test is None:
        return split
    test = split.test[: run.max_test]
    kept = {f"{s.id}~p" for s in test}
    return WordingSplit(split.train[: run.max_train], test, [s for s in split.paraphrased if s.id in kept],
                        split.unmatched, split.held_out_questions)


def _pooled(datasets: dict[str, dict[str, Any]], base: str, part: str, metric: str) -> float | None:
    """``metric`` of ``base`` on ``part`` over every dataset's questions (question-weighted)."""
    rows = [d[base][part] for d in datasets.values() if d[base][part].get("questions")]
    total = sum(r["questions"] for r in rows)
    return round(sum(r[metric] * r["questions"] for r in rows) / total, 4) if total else None


def planner_keys(datasets: dict[str, dict[str, Any]], bases: Sequence[str] = tuple(BASES)) -> dict[str, Any]:
    """The flat keys of ``bench/results/planner_bases.json`` from the per-dataset results, and the
    results themselves under ``planner.datasets``."""
    flat: dict[str, Any] = {}
    for base in bases:
        flat[f"planner_hits1_paraphrase_{base}"] = _pooled(datasets, base, "paraphrase", "hits1")
        flat[f"planner_hits1_seen_{base}"] = _pooled(datasets, base, "seen", "hits1")
        flat[f"planner_exact_match_paraphrase_{base}"] = _pooled(datasets, base, "paraphrase", "path_exact_match")
        flat[f"planner_exact_match_seen_{base}"] = _pooled(datasets, base, "seen", "path_exact_match")
        for name, result in sorted(datasets.items()):
            flat[f"planner_hits1_paraphrase_{base}_{name}"] = result[base]["paraphrase"]["hits1"]
            flat[f"planner_seconds_per_epoch_{base}_{name}"] = result[base]["training"]["seconds_per_epoch"]
    flat["planner"] = {"bases": {name: {"planner": BASES[name]["planner"], "fit": BASES[name]["fit"]} for name in bases},
                       "beams": BEAMS, "datasets": datasets}
    return flat


def run_dataset(name: str, run: PlannerRun, metaqa_subgraphs: Path | None, metaqa_data: Path | None,
                bases: Sequence[str] = tuple(BASES)) -> dict[str, Any]:
    """The comparison on one dataset (``synthetic`` or ``metaqa``): split sizes, the run's sizes
    and per base its training and scores."""
    if name == "synthetic":
        split = synthetic_split(run.synthetic_questions, run.seed)
    elif name == "metaqa":
        if metaqa_subgraphs is None or metaqa_data is None:
            raise ValueError("the MetaQA planner comparison needs --metaqa-subgraphs (and --metaqa-data or "
                             "$RG_SHARED_DATA); leave metaqa out of --planner-datasets otherwise")
        split = metaqa_split(metaqa_subgraphs, metaqa_data, run.metaqa_per_hop, run.metaqa_test_fraction, run.seed)
    else:
        raise ValueError(f"unknown planner dataset {name!r}; use synthetic or metaqa")
    split = _cut(split, run)
    epochs = {"tiny": run.tiny_epochs, "pretrained": run.pretrained_epochs}
    return {**split_summary(split), "run": asdict(run), **compare_bases(split, tuple(bases), epochs)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.planner_bases", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="the synthetic KG only, 16 training and 6 test questions, 2 tiny epochs, 1 smollm2 epoch")
    parser.add_argument("--bases", default=",".join(BASES),
                        help=f"comma-separated bases to train and score (of {', '.join(BASES)})")
    parser.add_argument("--metaqa-subgraphs", type=Path, default=None,
                        help="folder with {1,2,3}hop-test subgraph shards of MetaQA (omit: the synthetic KG only)")
    parser.add_argument("--metaqa-data", type=Path, default=None,
                        help="MetaQA folder with qa_test_*hop(_qtype).txt.gz (default: $RG_SHARED_DATA/metaqa)")
    parser.add_argument("--metaqa-per-hop", type=int, default=400,
                        help="MetaQA rows read per hop (about half kept, half of those tested)")
    parser.add_argument("--planner-questions", type=int, default=200, help="synthetic questions (80%% train)")
    parser.add_argument("--tiny-epochs", type=int, default=20, help="epochs of the tiny planner")
    parser.add_argument("--pretrained-epochs", type=int, default=3, help="epochs of the smollm2 planner")
    parser.add_argument("--threads", type=int, default=2, choices=(1, 2), help="torch threads")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    record = RunRecord("bench.planner_bases", argv)
    bases = [b for b in args.bases.split(",") if b]
    unknown = sorted(set(bases) - set(BASES))
    if unknown or not bases:
        parser.error(f"--bases {args.bases}: use some of {', '.join(BASES)}")
    if args.quick and args.metaqa_subgraphs is not None:
        parser.error("--quick runs the synthetic KG only; drop --metaqa-subgraphs")
    torch.set_num_threads(args.threads)
    run = QUICK if args.quick else PlannerRun(
        synthetic_questions=args.planner_questions, metaqa_per_hop=args.metaqa_per_hop,
        tiny_epochs=args.tiny_epochs, pretrained_epochs=args.pretrained_epochs)
    data = args.metaqa_data
    if data is None and shared_data_dir() is not None:
        data = shared_data_dir() / "metaqa"
    datasets, seconds = {}, {}
    for name in ["synthetic", *(["metaqa"] if args.metaqa_subgraphs is not None else [])]:
        began = time.perf_counter()
        datasets[name] = run_dataset(name, run, args.metaqa_subgraphs, data, bases)
        seconds[name] = round(time.perf_counter() - began, 1)
    result = {"baseline": "the tiny random base (the demo's planner)", "quick": args.quick,
              **planner_keys(datasets, bases), "seconds_by_dataset": seconds}
    write_report(args.out, result, record)
    pooled = ", ".join(f"{b} {result[f'planner_hits1_paraphrase_{b}']}" for b in bases)
    print(f"planner_bases: Hits@1 on paraphrases {pooled} ({', '.join(datasets)}) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
