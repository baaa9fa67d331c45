"""The LoRA-tuned local reader vs the ``retriever_scores`` reader on the same MLP evidence chains.

    python -m bench.reader_tuned --quick   # a tiny synthetic set in this process (wiring only)
    python -m bench.reader_tuned --metaqa-subgraphs DIR [--mlp RETRIEVER] [--reader READER] [--demo DIR] [--out PATH]
    python -m bench.reader_tuned --demo DIR   # the demo pipeline's qa/tuned vs qa/chains only

Writes ``bench/results/reader_tuned.json`` whole. The steps are the documented jobs, run in this
process with the repository's configs:

1. the MetaQA gated-walk MLP (``configs/train_metaqa_mlp_walk.yaml``; skipped with ``--mlp``),
2. the tuned reader on that MLP's chains of training-side questions
   (``configs/train_reader_metaqa.yaml``; skipped with ``--reader``),
3. the QA evaluation (``configs/evaluate_qa_metaqa.yaml``) of the same hop-stratified test sample
   twice, on the same chains (the reader config's ``top_k`` and ``evidence``: ``order:
   expected_relevant``): once with ``reader: {kind: tuned}``, once with ``reader: {kind: retriever}``,
4. the tuned reader's ceiling per hop: the share of those test questions with a gold answer among
   the chain ends of the lines the prompt shows (``max_lines``, ``max_prompt_tokens``: what the
   constrained decoder may write at all), and with one anywhere in the evidence.

``--quick`` runs the same steps in this process on a tiny synthetic set (hop-distance chains instead of
an MLP, one epoch; the training loop without Ray Train, the QA answering without Ray Data) so that
the wiring is checked in seconds; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.machine import RunRecord, write_report
from rg.config import load_config

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "reader_tuned.json"
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
HOPS = (1, 2, 3)


def _inputs(subgraphs: Path) -> list[str]:
    folders = [subgraphs / f"{hop}hop-test" for hop in HOPS]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise FileNotFoundError(f"--metaqa-subgraphs needs {{1,2,3}}hop-test shard folders; missing {missing}")
    return [str(f) for f in folders]


def _list(values: Sequence[str]) -> str:
    return "[" + ",".join(values) + "]"


def train_mlp(inputs: Sequence[str], work: Path, encoder_cache: str) -> Path:
    """``configs/train_metaqa_mlp_walk.yaml`` on these shards; returns the exported retriever folder."""
    from rg.jobs.train_retriever import TrainJobConfig, train_retriever

    cfg = load_config(CONFIGS / "train_metaqa_mlp_walk.yaml", TrainJobConfig, [
        f"input={_list(inputs)}", f"output_dir={work / 'mlp'}", f"storage_path={work / 'ray_results'}",
        f"encoder.cache_dir={encoder_cache}", "run_name=bench_models_metaqa_mlp"])
    train_retriever(cfg)
    return work / "mlp" / "retriever"


def reader_config(config: Path, overrides: Sequence[str]):
    from rg.jobs.train_reader import ReaderTrainConfig

    return load_config(config, ReaderTrainConfig, overrides)


def evaluate(base: Path, overrides: Sequence[str]) -> dict[str, Any]:
    """One QA evaluation; Hits@1, Hit and n overall and per hop, and its seconds."""
    from rg.jobs.evaluate_qa import QAEvaluateConfig, evaluate_qa

    result = evaluate_qa(load_config(base, QAEvaluateConfig, overrides), progress=False)
    groups = {g.name: g for g in result.summary.by_hops}
    per_hop = {str(h): groups[f"{h}-hop"] for h in HOPS if f"{h}-hop" in groups}
    return {
        "reader": result.run["reader"],
        "hits1": round(result.summary.overall.hits_at_1, 4),
        "hits1_per_hop": {h: round(g.hits_at_1, 4) for h, g in per_hop.items()},
        "hit_per_hop": {h: round(g.hit, 4) for h, g in per_hop.items()},
        "n_per_hop": {h: g.n for h, g in per_hop.items()},
        "seconds": round(result.run["seconds"], 1),
    }


def ceiling(reader_cfg, side: str, reader_dir: Path) -> dict[str, dict[str, float]]:
    """Per hop: share of ``side``'s questions with a gold answer among the shown lines' chain ends
    (``gold_in_shown_lines``, the constrained reader's ceiling) and among all evidence chain ends."""
    from transformers import AutoTokenizer

    from rg.data.splits import load_split_samples
    from rg.jobs.evaluate import build_scorer
    from rg.evaluation.qa import question_evidence
    from rg.evidence.chains import item_chains
    from rg.metrics import normalize_answer
    from rg.models.registry import resolve_model
    from rg.reasoning.tuned_reader import build_prompt, load_settings
    from rg.text import TextEncoder
    from rg.training.reader_loop import gold_names

    settings = load_settings(reader_dir)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(settings.base), local_files_only=True)
    needs_encoder = reader_cfg.retriever.kind in ("retriever", "cosine")
    scorer = build_scorer(reader_cfg.retriever, TextEncoder(reader_cfg.encoder) if needs_encoder else None)
    samples = load_split_samples(reader_cfg.input, reader_cfg.split, (side,), reader_cfg.limit)[side]
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # shown, anywhere, n
    for start in range(0, len(samples), 32):
        batch = samples[start:start + 32]
        for sample, scores in zip(batch, scorer.score(batch)):
            evidence = question_evidence(sample, scores, reader_cfg.top_k, True, reader_cfg.evidence)
            shown = build_prompt(tokenizer, settings, sample.question, evidence).candidates
            ends = {normalize_answer(e) for item in evidence.items for c in item_chains(item) for e in c.ends}
            gold = {normalize_answer(a) for a in sample.answers} - {""}
            row = counts[str(sample.hops) if sample.hops is not None else "all"]
            row[0] += bool(gold_names(shown, sample.answers, len(shown) or 1))
            row[1] += bool(ends & gold)
            row[2] += 1
    return {
        "gold_in_shown_lines": {h: round(c[0] / c[2], 4) for h, c in sorted(counts.items())},
        "gold_in_evidence": {h: round(c[1] / c[2], 4) for h, c in sorted(counts.items())},
        "n": {h: c[2] for h, c in sorted(counts.items())},
    }


def compare(reader_cfg, qa_base: Path, qa_overrides: Sequence[str], reader_dir: Path, work: Path,
            side: str) -> dict[str, Any]:
    """Both readers on the same chains (the reader config's evidence), and the tuned reader's ceiling."""
    evidence = reader_cfg.evidence
    same = [*qa_overrides, f"top_k={reader_cfg.top_k}", f"evidence.max_length={evidence.max_length}",
            f"evidence.order={evidence.order}", f"evidence.merge_entities={str(evidence.merge_entities).lower()}",
            f"encoder.cache_dir={reader_cfg.encoder.cache_dir}"]
    import json

    out: dict[str, Any] = {}
    partial = work / "reader_compare.json"  # each step's figures as soon as it ends (a stopped run keeps them)
    for name, step in (
        ("tuned", lambda: evaluate(qa_base, [*same, f"output_dir={work / 'qa_tuned'}",
                                             f"reader={{kind: tuned, checkpoint: {reader_dir}}}"])),
        ("retriever_scores", lambda: evaluate(qa_base, [*same, f"output_dir={work / 'qa_retriever_scores'}",
                                                        "reader={kind: retriever}"])),
        ("ceiling", lambda: ceiling(reader_cfg, side, reader_dir)),
    ):
        out[name] = step()
        partial.write_text(json.dumps(out, indent=2) + "\n")
    return out


def metaqa(subgraphs: Path, work: Path, per_hop: int, mlp: Path | None, reader: Path | None,
           encoder_cache: str) -> dict[str, Any]:
    """Steps 1–4 on MetaQA shards; ``per_hop`` test questions per hop (the split caps are hop-stratified)."""
    from rg.jobs.train_reader import train_reader

    started = time.perf_counter()
    inputs = _inputs(subgraphs)
    trained = []
    if mlp is None:
        mlp = train_mlp(inputs, work, encoder_cache)
        trained.append("mlp")
    reader_cfg = reader_config(CONFIGS / "train_reader_metaqa.yaml", [
        f"input={_list(inputs)}", f"retriever.path={mlp}", f"encoder.cache_dir={encoder_cache}",
        f"output_dir={work / 'reader'}", f"storage_path={work / 'ray_results'}", "run_name=bench_models_metaqa_reader",
        f"split.max_questions.test={3 * per_hop}"])
    if reader is None:
        train_reader(reader_cfg)
        reader = work / "reader" / "reader"
        trained.append("reader")
    qa = [f"input={_list(inputs)}", f"retriever.path={mlp}", f"split.max_questions.test={3 * per_hop}"]
    result = compare(reader_cfg, CONFIGS / "evaluate_qa_metaqa.yaml", qa, Path(reader), work, "test")
    return {**result, "mlp": str(mlp), "reader_checkpoint": str(reader), "trained_now": trained,
            "per_hop": per_hop, "seconds": round(time.perf_counter() - started, 1)}


def quick(work: Path) -> dict[str, Any]:
    """The same steps in this process on a tiny synthetic set, so that ``--quick`` fits its minute.

    Hop-distance chains stand in for an MLP. The reader trains for one epoch through
    :func:`~rg.training.reader_loop.fit_reader` (the loop each Ray Train worker runs), without Ray
    Train, and is saved and read back as the QA evaluation loads it. Both readers answer the
    validation questions through :func:`~rg.evaluation.qa.answer_questions` (what each QA actor
    runs), without Ray Data, and are scored as ``evaluate_qa`` scores. Its figures mean nothing:
    the Ray Train and Ray Data paths are the full run's and ``tests/test_reader_ray.py``'s.
    """
    import asyncio

    import torch

    from rg.data.rog import write_rog_parquet
    from rg.data.splits import load_split_samples
    from rg.subgraphs import SubgraphConfig, buildable_samples
    from rg.data.synthetic import SyntheticConfig, generate
    from rg.jobs.evaluate import build_scorer
    from rg.evaluation.qa import RetrieverReaderChoice, answer_questions, inference_view
    from rg.evaluation.qa_metrics import Gold, score_prediction
    from rg.graph import KnowledgeGraph
    from rg.reasoning.retriever_reader import RetrieverReader
    from rg.reasoning.tuned_reader import TunedReader
    from rg.training.reader_loop import fit_reader, lora_reader_model, reader_examples
    from rg.jobs.train_reader import reader_items, save_reader

    started = time.perf_counter()
    syn = generate(SyntheticConfig(questions=24, seed=3))
    kg = KnowledgeGraph.from_triples(syn.triples)
    samples = buildable_samples(kg, syn.questions, SubgraphConfig(max_triples=60))
    parquet = work / "synthetic.parquet"
    write_rog_parquet(samples, parquet)
    cfg = reader_config(CONFIGS / "train_reader_synthetic.yaml", [
        f"input={parquet}", "split={val_fraction: 0.25, seed: 0}", "retriever={kind: hop_distance}", "top_k=30",
        "encoder.cache_dir=null", "evidence={max_length: 3, order: expected_relevant, merge_entities: false}",
        "reader={max_lines: 6, max_prompt_tokens: 200, max_answers: 2}", "train={epochs: 1, lr: 0.002, batch_size: 4}",
        "max_val_questions=2", f"output_dir={work / 'reader'}", "run_name=bench_models_quick_reader"])
    sides = load_split_samples(cfg.input, cfg.split, ("train", "val"), cfg.limit)
    scorer = build_scorer(cfg.retriever, None)
    settings = cfg.reader.model_copy(update={"evidence": cfg.evidence})
    torch.manual_seed(cfg.train.seed)
    model, tokenizer = lora_reader_model(settings, cfg.lora)
    eos = int(tokenizer.convert_tokens_to_ids(tokenizer.eos_token))
    examples, skipped = reader_examples(reader_items(cfg, sides["train"], scorer), tokenizer, settings, eos,
                                        cfg.train.shuffle_lines, cfg.train.seed)
    history = fit_reader(model, tokenizer, examples, reader_items(cfg, sides["val"][: cfg.max_val_questions], scorer),
                         settings, cfg.train)
    reader_dir = save_reader(model, settings, work / "reader" / "reader")
    del model
    test = sides["val"]
    out: dict[str, Any] = {}
    for name, reader in (("tuned", TunedReader.load(reader_dir)), ("retriever_scores", RetrieverReader(RetrieverReaderChoice()))):
        began = time.perf_counter()
        predictions = asyncio.run(answer_questions([inference_view(s) for s in test], scorer, reader, top_k=cfg.top_k,
                                                   evidence=cfg.evidence))
        out[name] = _scored(reader.name, test, [score_prediction(p, Gold.of(s)) for p, s in zip(predictions, test)],
                            time.perf_counter() - began)
    out["ceiling"] = ceiling(cfg, "val", reader_dir)
    return {**out, "questions": len(samples), "train_examples": len(examples), "train_skipped": skipped,
            "train_history": history, "in_process": True, "seconds": round(time.perf_counter() - started, 1)}


def _scored(reader: str, samples, scores, seconds: float) -> dict[str, Any]:
    """The figures :func:`evaluate` reports, from scored predictions of ``samples`` (same order)."""
    by_hop: dict[str, list] = defaultdict(list)
    for sample, score in zip(samples, scores):
        by_hop[str(sample.hops)].append(score)
    return {
        "reader": reader,
        "hits1": round(sum(s.hits_at_1 for s in scores) / len(scores), 4),
        "hits1_per_hop": {h: round(sum(s.hits_at_1 for s in g) / len(g), 4) for h, g in sorted(by_hop.items())},
        "hit_per_hop": {h: round(sum(s.hit for s in g) / len(g), 4) for h, g in sorted(by_hop.items())},
        "n_per_hop": {h: len(g) for h, g in sorted(by_hop.items())},
        "seconds": round(seconds, 1),
    }


def demo_figures(demo: Path) -> dict[str, Any]:
    """Hits@1 of the demo pipeline's ``qa/tuned`` and ``qa/chains`` runs (same MLP chains, same questions)."""
    import json

    out = {}
    for stage in ("tuned", "chains"):
        path = demo / "qa" / stage / "qa.json"
        if not path.is_file():
            raise FileNotFoundError(f"--demo {demo}: no {path}; run `python -m jobs.pipeline --config configs/demo.yaml`")
        data = json.loads(path.read_text())
        out[stage] = {"reader": data["run"]["reader"], "hits1": round(data["summary"]["overall"]["hits_at_1"], 4),
                      "n": data["summary"]["overall"]["n"]}
    return out


def reader_keys(metaqa_result: dict[str, Any] | None, demo: dict[str, Any] | None, demo_source: str | None,
                quick_result: dict[str, Any] | None) -> dict[str, Any]:
    """The ``reader_*`` keys of ``bench/results/reader_tuned.json``."""
    keys: dict[str, Any] = {}
    if metaqa_result is not None:
        keys["reader_hits1_metaqa"] = metaqa_result["tuned"]["hits1_per_hop"]
        keys["reader_hits1_metaqa_retriever_scores"] = metaqa_result["retriever_scores"]["hits1_per_hop"]
        keys["reader_gold_in_shown_lines_metaqa"] = metaqa_result["ceiling"]["gold_in_shown_lines"]
        keys["reader_metaqa"] = metaqa_result
    if quick_result is not None:
        keys["reader_quick_run"] = quick_result
        if demo is None:
            demo = {"tuned": {"hits1": quick_result["tuned"]["hits1"]},
                    "chains": {"hits1": quick_result["retriever_scores"]["hits1"]}}
            demo_source = "quick: tiny synthetic set, hop-distance chains, 1 epoch (wiring only)"
    if demo is not None:
        keys["reader_hits1_demo"] = demo["tuned"]["hits1"]
        keys["reader_hits1_demo_retriever_scores"] = demo["chains"]["hits1"]
        keys["reader_demo_source"] = demo_source
    return keys


def reader_part(subgraphs: Path | None, per_hop: int, mlp: Path | None, reader: Path | None,
                encoder_cache: str | None, demo: Path | None, work: Path | None, quick_run: bool) -> dict[str, Any]:
    """The comparison's keys (:func:`reader_keys`); ``work`` holds what it trains and evaluates (a temporary
    folder when None)."""
    with tempfile.TemporaryDirectory(prefix="rg-bench-reader-") as tmp:
        folder = Path(work) if work is not None else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        cache = encoder_cache or str(folder / "encoder_cache")
        metaqa_result = None if subgraphs is None or quick_run else metaqa(subgraphs, folder, per_hop, mlp, reader, cache)
        quick_result = quick(folder) if quick_run else None
        demo_result = demo_figures(demo) if demo is not None else None
        source = f"demo pipeline outputs at {demo} (qa/tuned vs qa/chains)" if demo is not None else None
        return reader_keys(metaqa_result, demo_result, source, quick_result)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reader_tuned", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a tiny synthetic set in this process: hop-distance chains, one epoch (wiring only)")
    parser.add_argument("--metaqa-subgraphs", type=Path, default=None,
                        help="folder with {1,2,3}hop-test subgraph shards of MetaQA (jobs.build_subgraphs)")
    parser.add_argument("--reader-per-hop", type=int, default=300, help="MetaQA test questions per hop")
    parser.add_argument("--mlp", type=Path, default=None, help="trained MetaQA retriever folder (omit: train one)")
    parser.add_argument("--reader", type=Path, default=None, help="trained MetaQA tuned reader folder (omit: train one)")
    parser.add_argument("--demo", type=Path, default=None, help="demo pipeline output folder (reads qa/tuned, qa/chains)")
    parser.add_argument("--encoder-cache", default=None, help="text encoder cache folder")
    parser.add_argument("--reader-work", type=Path, default=None,
                        help="folder for what is trained and evaluated (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if not (args.quick or args.metaqa_subgraphs or args.demo):
        parser.error("give --metaqa-subgraphs, --demo or --quick (there is nothing to read otherwise)")
    if args.quick and args.metaqa_subgraphs is not None:
        parser.error("--quick reads a tiny synthetic set; drop --metaqa-subgraphs")
    record = RunRecord("bench.reader_tuned", argv)
    keys = reader_part(args.metaqa_subgraphs, args.reader_per_hop, args.mlp, args.reader, args.encoder_cache,
                       args.demo, args.reader_work, args.quick)
    result = {"baseline": "the retriever_scores reader on the same chains and questions", "quick": args.quick, **keys}
    write_report(args.out, result, record)
    for key in ("reader_hits1_metaqa", "reader_hits1_metaqa_retriever_scores", "reader_gold_in_shown_lines_metaqa",
                "reader_hits1_demo", "reader_hits1_demo_retriever_scores"):
        if key in result:
            print(f"reader_tuned: {key} {result[key]}")
    print(f"reader_tuned: -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
