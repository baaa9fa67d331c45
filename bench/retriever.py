"""How fast do the retrievers score and train? Batched scoring, FLOP rate, Ray Train scaling.

    python -m bench.retriever --quick
    python -m bench.retriever [--input outputs/metaqa/2hop-test] [--questions 400] [--out PATH]

Three measurements, each against a baseline taken in the same run, and the cost of the gated walk:

* **Scoring throughput** over MetaQA 2-hop test subgraphs (the builder's shards): the MLP-DDE
  retriever scores ``--batch`` questions per forward pass (rg's way: the first layer factorised
  per question, entity and relation into one stacked table, the per-triple half, which sums
  each triple's four rows, adds its structural columns' projection and applies ReLU and the
  output layer, in one compiled loop on the CPU) against a loop
  with one question per pass through the explicit ``[q, h, r, t]`` input and the MLP (the
  reference SubgraphRAG code's way, ``per_question_loop_triples_per_s``). Target: batched ≥ 5×
  the loop. To separate the two causes, the loop is also timed with rg's factorised forward
  (``per_question_rg_forward_triples_per_s``; ``batching_speedup`` is batched over it). Every
  variant includes collating the question graphs.
* **FLOP rate** of the batched MLP forward (FLOPs it executes, counted from its shapes) against
  a plain ``torch.mm`` of a large square matrix timed here (``matmul_peak_gflops``). Target:
  ≥ 50% of the peak. The share is also given without the time of the entity features (topic
  flags and DDE, ``features_s``; ``mlp_only_share_of_peak``): they are the MLP's input, computed
  by scatter-means rather than by the MLP's arithmetic. The explicit-input forward is timed on the
  same batches too (``reference_mlp_gflops``): it executes ~5× the FLOPs on MetaQA 2-hop batches,
  mostly one large matmul. So is the same forward with the per-triple half as torch ops over
  cache-sized blocks, the path other devices take (``torch_blocks_forward_s``;
  ``fused_forward_speedup`` is its time over the compiled loop's). ``scoring_kernel`` says which
  path and which numba threading layer ran.
* **Ray Train scaling**: ``jobs.train``'s ``train_retriever`` with 2 workers against 1 on the
  same questions and epochs; the speedup is the ratio of the summed training-phase time of the
  epochs (``train_seconds``, without validation, which every worker runs whole, and without Ray
  start-up, reported apart as wall time). Target: ≥ 1.6. The runs batch questions as
  ``--train-batching`` says (default: ``train.batching``'s default, ``balanced``: equal triples
  per batch and per worker shard, so the two workers' steps cost the same). A second pair of runs
  (not with ``--quick``) shuffles plain batches of 16 questions (``*_shuffle`` keys).
  ``train_speedup_2_workers_after_first_epoch`` leaves out each run's first epoch.

* **Gated walk** (``retriever.walk_steps: 3``, untrained gates): batched scoring of the same
  batches with the walk on, ``walk_cost_ratio`` its time over the time without.

The text encoder's embeddings come from its on-disk cache when present (``--cache-dir``);
encoding is not timed. The model is untrained (scoring cost does not depend on the weights).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import Any, Callable, get_args

import numba
import torch

from bench.machine import RunRecord, write_report
from rg.data.rog import read_rog, write_rog_parquet
from rg.retrievers.graphs import EmbeddingTables, GraphBatch, QuestionGraph, collate
from rg.retrievers.mlp import MLPConfig, MLPRetriever, kernels
from rg.text.encoder import EncoderConfig, TextEncoder
from rg.retrievers.inputs import build_tables, question_graph
from rg.training.loop import Batching, TrainConfig

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "retriever.json"
DEFAULT_INPUT = Path("outputs/metaqa/2hop-test")


def best_time(fn: Callable[[], Any], repeat: int) -> float:
    """The fastest of ``repeat`` timed calls of ``fn`` (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def mlp_flops(model: MLPRetriever, batch: GraphBatch) -> float:
    """FLOPs of :meth:`MLPRetriever.forward` on ``batch`` (multiply-adds count 2).

    The forward projects each question, each distinct relation and each distinct entity text
    row once per side it is used on (as a head, as a tail); per triple it projects the head's
    and tail's structural columns (topic flags, DDE, walk) and its walk flows, adds the four
    gathered hidden rows, applies ReLU and the output layer. The DDE's neighbour means and the
    walk's gates and scatter-maxes (off in the benchmark's model) are not counted.
    """
    hidden, dim = model.config.hidden, model.config.text_dim
    structure = model.config.triple_dim - 4 * dim  # head and tail columns, walk flows
    questions = int(batch.question.numel())
    texts = sum(int(torch.unique(batch.entity_text[ends]).numel()) for ends in (batch.head, batch.tail))
    relations = int(torch.unique(batch.rel).numel())
    triples = int(batch.head.numel())
    projections = 2 * hidden * dim * (questions + texts + relations)
    per_triple = 2 * hidden * structure + 4 * hidden + hidden + 2 * hidden
    return float(projections + triples * per_triple)


def matmul_peak_gflops(size: int, repeat: int) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    seconds = best_time(lambda: torch.mm(a, b), repeat)
    return 2 * size**3 / seconds / 1e9


def reference_forward(model: MLPRetriever, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
    """SubgraphRAG's scoring: the explicit ``[q, h, r, t]`` row of every triple through the MLP.

    Shapes:
        batch: T triples -> (T,)
    """
    return model.head(model.input(model.triple_inputs(batch, tables))).squeeze(1)


def reference_flops(model: MLPRetriever, batch: GraphBatch) -> float:
    """FLOPs of :func:`reference_forward`'s two layers on ``batch`` (multiply-adds count 2)."""
    triples = int(batch.head.numel())
    return float(triples * (2 * model.config.triple_dim * model.config.hidden + 2 * model.config.hidden))


def scoring(
    model: MLPRetriever, graphs: list[QuestionGraph], tables: EmbeddingTables, batch_questions: int, repeat: int
) -> dict[str, Any]:
    triples = sum(int(g.head.numel()) for g in graphs)
    chunks = [graphs[i : i + batch_questions] for i in range(0, len(graphs), batch_questions)]

    @torch.no_grad()
    def batched() -> None:
        for chunk in chunks:
            model(collate(chunk), tables)

    @torch.no_grad()
    def loop_reference() -> None:
        for graph in graphs:
            reference_forward(model, collate([graph]), tables)

    @torch.no_grad()
    def loop_rg() -> None:
        for graph in graphs:
            model(collate([graph]), tables)

    batched_s = best_time(batched, repeat)
    reference_s = best_time(loop_reference, repeat)
    loop_s = best_time(loop_rg, repeat)
    batches = [collate(chunk) for chunk in chunks]
    flops = sum(mlp_flops(model, b) for b in batches)

    @torch.no_grad()
    def forward_only() -> None:
        for b in batches:
            model(b, tables)

    @torch.no_grad()
    def reference_only() -> None:
        for b in batches:
            reference_forward(model, b, tables)

    @torch.no_grad()
    def features_only() -> None:
        for b in batches:
            model.structure(b, tables)

    out_layer = model.head[-1]

    @torch.no_grad()
    def torch_blocks() -> None:
        for b in batches:
            model._projections(b, tables).scores_in_blocks(out_layer.weight[0], out_layer.bias)

    forward_s = best_time(forward_only, repeat)
    features_s = best_time(features_only, repeat)
    reference_forward_s = best_time(reference_only, repeat)
    blocks_forward_s = best_time(torch_blocks, repeat)
    with torch.no_grad():
        fused = kernels.supported(out_layer.weight[0])  # what forward_only's batches took
    return {
        "questions": len(graphs),
        "triples": triples,
        "batch_questions": batch_questions,
        "scoring_triples_per_s": triples / batched_s,
        "per_question_loop_triples_per_s": triples / reference_s,
        "per_question_rg_forward_triples_per_s": triples / loop_s,
        "batched_speedup": reference_s / batched_s,
        "batching_speedup": loop_s / batched_s,
        "mlp_forward_s": forward_s,
        "mlp_gflops": flops / forward_s / 1e9,
        "mlp_flops_per_triple": flops / triples,
        "features_s": features_s,
        "mlp_only_gflops": flops / (forward_s - features_s) / 1e9,
        "torch_blocks_forward_s": blocks_forward_s,
        "fused_forward_speedup": blocks_forward_s / forward_s,
        "scoring_kernel": {
            "per_triple_half": "numba fused loop" if fused else "torch blocks",
            "numba": numba.__version__,
            "threading_layer": numba.threading_layer() if fused else None,
        },
        "reference_forward_s": reference_forward_s,
        "reference_mlp_gflops": sum(reference_flops(model, b) for b in batches) / reference_forward_s / 1e9,
    }


def walk_cost(
    graphs: list[QuestionGraph], tables: EmbeddingTables, batch_questions: int, repeat: int, steps: int = 3
) -> dict[str, Any]:
    """Batched scoring with the gated walk on (``walk_steps``; untrained gates), the same batches.

    The walk adds, per step and direction, a gather and a scatter-max over the triples, and each
    triple's flows to the MLP input; ``walk_cost_ratio`` is the time with it over the time without.
    """
    plain = MLPRetriever(MLPConfig(text_dim=tables.dim)).eval()
    walked = MLPRetriever(MLPConfig(text_dim=tables.dim, walk_steps=steps)).eval()
    batches = [collate(graphs[i : i + batch_questions]) for i in range(0, len(graphs), batch_questions)]
    triples = sum(int(b.head.numel()) for b in batches)

    def timed(model: MLPRetriever) -> float:
        @torch.no_grad()
        def run() -> None:
            for b in batches:
                model(b, tables)

        run()  # warm-up: the first pass allocates what later ones reuse
        return best_time(run, repeat)

    plain_s, walked_s = timed(plain), timed(walked)
    return {
        "walk_steps": steps,
        "walk_scoring_triples_per_s": triples / walked_s,
        "walk_cost_ratio": walked_s / plain_s,
    }


def train_scaling(
    samples_path: Path, workdir: Path, cache_dir: str, epochs: int, batch: int, batching: str,
    workers_tried: Sequence[int] = (1, 2),
) -> dict[str, Any]:
    """1 vs 2 Ray Train workers on the same questions, epochs, ``batch`` questions per step and ``batching``.

    ``workers_tried`` ``(1,)`` runs the one-worker baseline alone (the smoke test's cheap path): ``by_workers``
    then holds one row and the ``*_speedup_2_workers`` ratios are not written."""
    from rg.jobs.train_retriever import TrainJobConfig, train_retriever

    rows: dict[int, dict[str, Any]] = {}
    for workers in workers_tried:
        cfg = TrainJobConfig.model_validate(
            {
                "input": str(samples_path),
                "retriever": {"kind": "mlp"},
                "encoder": {"cache_dir": cache_dir},
                "train": {"epochs": epochs, "questions_per_batch": batch, "eval_ks": [100], "batching": batching},
                "num_workers": workers,
                "run_name": f"bench_retriever_{workers}w_{batching}",
                "storage_path": str(workdir / "ray_results"),
                "output_dir": str(workdir / f"out_{workers}w_{batching}"),
            }
        )
        start = time.perf_counter()
        report = train_retriever(cfg)
        train_seconds = [float(r["train_seconds"]) for r in report["history"]]
        rows[workers] = {
            "workers": workers,
            "train_seconds": sum(train_seconds),
            "train_seconds_by_epoch": train_seconds,
            "epoch_seconds": sum(float(r["epoch_seconds"]) for r in report["history"]),
            "wall_s": time.perf_counter() - start,
            "train_questions": report["train_usable"],
            "epochs": epochs,
        }
    result: dict[str, Any] = {
        "train_questions_per_batch": batch,
        "train_batching": batching,
        "by_workers": [rows[w] for w in workers_tried],
    }
    if not {1, 2} <= set(rows):
        return result
    one, two = rows[1]["train_seconds_by_epoch"], rows[2]["train_seconds_by_epoch"]
    return {
        **result,
        "train_speedup_2_workers": rows[1]["train_seconds"] / rows[2]["train_seconds"],
        "train_speedup_2_workers_after_first_epoch": sum(one[1:]) / sum(two[1:]) if epochs > 1 else None,
        "epoch_speedup_2_workers": rows[1]["epoch_seconds"] / rows[2]["epoch_seconds"],
        "wall_speedup_2_workers": rows[1]["wall_s"] / rows[2]["wall_s"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="MetaQA 2-hop subgraph shards (RoG).")
    parser.add_argument("--questions", type=int, default=400, help="Questions scored (and trained on).")
    parser.add_argument("--batch", type=int, default=64, help="Questions per batched forward pass.")
    parser.add_argument("--epochs", type=int, default=3, help="Epochs of each Ray Train run.")
    parser.add_argument(
        "--train-batch", type=int, default=16,
        help="Questions per training step in the scaling runs (16, as in configs/train_metaqa_*.yaml).",
    )
    parser.add_argument(
        "--train-batching", choices=get_args(Batching), default=TrainConfig().batching,
        help="train.batching of the scaling runs (default: the training default).",
    )
    parser.add_argument("--repeat", type=int, default=5, help="Timed repetitions (best kept).")
    parser.add_argument("--cache-dir", default="outputs/encoder_cache", help="Text encoder cache.")
    parser.add_argument("--no-train", action="store_true", help="Skip the Ray Train scaling runs.")
    parser.add_argument("--workers", default="1,2", choices=("1,2", "1"),
                        help="Ray Train runs: 1 and 2 workers (the ratio), or the 1-worker run alone (a smoke check).")
    parser.add_argument("--quick", action="store_true", help="100 questions, 1 epoch, 1 repetition.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    record = RunRecord("bench.retriever", argv)
    workers = tuple(int(w) for w in args.workers.split(","))
    if args.quick:
        args.questions, args.epochs, args.repeat = 100, 1, 1
    if not args.input.exists():
        parser.error(
            f"{args.input} not found: build MetaQA subgraphs first "
            "(python -m jobs.build_subgraphs --config configs/build_metaqa.yaml) or pass --input"
        )
    samples = list(islice(read_rog(args.input), args.questions))
    encoder = TextEncoder(EncoderConfig(cache_dir=args.cache_dir))
    tables, index = build_tables(samples, encoder)
    graphs = [question_graph(s, index) for s in samples]
    model = MLPRetriever(MLPConfig(text_dim=tables.dim)).eval()
    result: dict[str, Any] = {
        "input": str(args.input),
        "torch_threads": torch.get_num_threads(),
        "model": model.config.model_dump(mode="json"),
        **scoring(model, graphs, tables, args.batch, args.repeat),
    }
    result.update(walk_cost(graphs, tables, args.batch, args.repeat))
    result["matmul_peak_gflops"] = matmul_peak_gflops(2048, args.repeat)
    result["mlp_share_of_peak"] = result["mlp_gflops"] / result["matmul_peak_gflops"]
    result["mlp_only_share_of_peak"] = result["mlp_only_gflops"] / result["matmul_peak_gflops"]
    result["reference_share_of_peak"] = result["reference_mlp_gflops"] / result["matmul_peak_gflops"]
    if not args.no_train:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "samples.parquet"
            write_rog_parquet(samples, path)
            result.update(train_scaling(path, Path(tmp), args.cache_dir, args.epochs, args.train_batch,
                                        args.train_batching, workers))
            if not args.quick and args.train_batching != "shuffle":
                plain = train_scaling(path, Path(tmp), args.cache_dir, args.epochs, args.train_batch, "shuffle", workers)
                result.update({f"{key}_shuffle": value for key, value in plain.items()})
    write_report(args.out, result, record)
    keys = ("scoring_triples_per_s", "per_question_loop_triples_per_s", "per_question_rg_forward_triples_per_s",
            "batched_speedup", "batching_speedup", "fused_forward_speedup", "mlp_gflops", "reference_mlp_gflops",
            "matmul_peak_gflops", "mlp_share_of_peak", "mlp_only_share_of_peak", "reference_share_of_peak",
            "walk_scoring_triples_per_s",
            "walk_cost_ratio", "train_speedup_2_workers", "train_speedup_2_workers_after_first_epoch",
            "train_speedup_2_workers_shuffle")
    for key in keys:
        if result.get(key) is not None:
            print(f"{key:>42}: {result[key]:,.3f}")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
