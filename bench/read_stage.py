"""Where the read stage's time goes: the tuned reader's training steps with every layer recomputed (the baseline)
against the frozen layers' outputs computed once (``rg.training.frozen_prefix``), and its validation reads.

    python -m bench.read_stage --quick                       # seconds: a tiny LLaMA on synthetic token examples
    python -m bench.read_stage [--isa avx2] [--steps 12]     # the demo's reader on its real examples

The full run needs the main command's outputs (``python -m jobs.pipeline --config configs/demo.yaml``: the MLP
retriever of its train stage). It builds the read stage's examples as the job does (the retriever's evidence, the
reader's prompts), then times, in this process with the stage's threads: ``--steps`` optimiser steps on the first
batches of epoch 0 with every layer run (``full``), the one pass through the frozen layers, the same steps on the
cached states (``cached``), and the validation reads. The frozen pass and the reads also run with every prompt
whole (the baseline of the template's opening computed once, ``rg.models.prefix``): ``prefix_opening_over_whole``
and ``read_opening_over_whole`` are the ratios. The reads run a third time through ``transformers``' ``generate``
with the answer grammar as its ``prefix_allowed_tokens_fn`` (:func:`generate_answer`, the reader's decoding before
jump-forward decoding): ``read_jump_over_generate``, and whether every answer is the same. ``--isa avx2`` reruns itself with torch, MKL and oneDNN
capped at AVX2 (``bench.demo.AVX2_ENV``): the fp32 path of a CPU without native bf16. The JSON holds per-step and
per-example seconds, the projected seconds of the stage's two epochs both ways, and ``cached_over_full``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
NAME = "read_stage"
READ_QUESTIONS = 10
"""Validation questions read when the config reads none (the demo trains without validation)."""


def _timed_steps(loss_fn, optimizer, batches) -> float:
    """Mean seconds of one optimiser step over ``batches``."""
    began = time.perf_counter()
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(**batch).backward()
        optimizer.step()
    return (time.perf_counter() - began) / max(len(batches), 1)


def _tiny_setup():
    """A 4-layer LLaMA with LoRA on its top 2 layers and 16 synthetic examples (``--quick``)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from rg.retrievers.planner.model import IGNORE_INDEX, Example

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                                 layers_to_transform=[2, 3], task_type="CAUSAL_LM"))
    examples = [Example(str(i), tuple(range(2, 12 + i % 7)) + (3, 1), tuple([IGNORE_INDEX] * (10 + i % 7)) + (3, 1))
                for i in range(16)]
    return model, examples, None, None, {"items_seconds": 0.0, "train_examples": len(examples)}


def _demo_setup(config: Path):
    """The demo reader's model and its real training examples and validation items, as the read stage builds them."""
    from rg.config import load_config
    from rg.data.splits import load_split_samples
    from rg.jobs.evaluate import build_scorer
    from rg.pipeline import PipelineConfig
    from rg.reasoning.tuned_reader import TunedReader, eos_id
    from rg.text import TextEncoder
    from rg.training.reader_loop import lora_reader_model, reader_examples
    from rg.jobs.train_reader import reader_items

    import torch

    cfg = load_config(config, PipelineConfig, []).read
    if cfg is None:
        raise SystemExit(f"{config} has no read stage")
    checkpoint = Path(cfg.retriever.path or "")
    if not checkpoint.exists():
        raise SystemExit(f"the read stage's retriever {checkpoint} is missing. Fix: run "
                         f"`python -m jobs.pipeline --config {config}` first")
    began = time.perf_counter()
    sides = load_split_samples(cfg.input, cfg.split, ("train", "val"), cfg.limit)
    needs_encoder = cfg.retriever.kind in ("retriever", "cosine")
    scorer = build_scorer(cfg.retriever, TextEncoder(cfg.encoder) if needs_encoder else None)
    train_items = reader_items(cfg, sides["train"][: cfg.max_train_questions], scorer)
    val_items = reader_items(cfg, sides["val"][: cfg.max_val_questions or READ_QUESTIONS], scorer)
    items_seconds = time.perf_counter() - began
    torch.manual_seed(cfg.train.seed)
    model, tokenizer = lora_reader_model(cfg.reader, cfg.lora)
    examples, skipped = reader_examples(train_items, tokenizer, cfg.reader, eos_id(tokenizer, model),
                                        cfg.train.shuffle_lines, cfg.train.seed)
    reader = TunedReader(model, tokenizer, cfg.reader)
    facts = {"items_seconds": round(items_seconds, 1), "train_examples": len(examples), "skipped": skipped,
             "batch_size": cfg.train.batch_size, "length_window": cfg.train.length_window, "epochs": cfg.train.epochs,
             "val_questions": len(val_items)}
    return model, examples, reader, val_items, facts


def measure(model, examples, reader, val_items, steps: int, batch_size: int, epochs: int,
            length_window: int = 1) -> dict[str, Any]:
    """Step, prefix and validation timings of one reader (see the module docstring)."""
    import torch

    from rg.models.prefix import OpeningCache
    from rg.training.frozen_prefix import FrozenPrefix
    from rg.training.planner_loop import batch_indices, collate
    from rg.training.reader_loop import ReaderLoss, read_hits

    lengths = [len(e.input_ids) for e in examples]
    chunks = batch_indices(lengths, batch_size, torch.Generator().manual_seed(0), length_window)[:steps]
    full_batches = [collate([examples[i] for i in chunk], 0, side="left") for chunk in chunks]
    loss_fn = ReaderLoss(model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    model.train()
    full = _timed_steps(loss_fn, optimizer, full_batches)
    prefix = FrozenPrefix.build(model, examples, budget_mb=float("inf"))
    if prefix is None:
        raise SystemExit("the reader adapts every layer (lora.top_layers unset): nothing is frozen to cache")
    whole = FrozenPrefix.build(model, examples, budget_mb=float("inf"), share_opening=False)
    drift = max(float((a - b).abs().max()) for a, b in zip(prefix.states, whole.states))
    cached = _timed_steps(loss_fn, optimizer, [prefix.collate(chunk) for chunk in chunks])
    widths = [max(lengths[i] for i in chunk) for chunk in chunks]
    batches_per_epoch = -(-len(examples) // batch_size)
    projected_full = full * batches_per_epoch * epochs
    projected_cached = cached * batches_per_epoch * epochs + prefix.seconds
    result = {
        "layers": model.get_base_model().config.num_hidden_layers, "frozen_layers": prefix.start,
        "dtype": str(next(p for p in model.parameters() if not p.requires_grad).dtype).removeprefix("torch."),
        "mean_prompt_tokens": round(sum(lengths) / len(lengths), 1),
        "padding_share": round(1 - sum(lengths[i] for c in chunks for i in c) / sum(w * len(c) for w, c in zip(widths, chunks)), 3),
        "timed_steps": len(chunks), "full_step_s": round(full, 3), "cached_step_s": round(cached, 3),
        "cached_over_full": round(cached / full, 3),
        "prefix_s_per_example": round(prefix.seconds / len(examples), 3), "prefix_s": round(prefix.seconds, 1),
        "opening_tokens": shared_opening(examples), "prefix_whole_s": round(whole.seconds, 1),
        "prefix_opening_over_whole": round(prefix.seconds / whole.seconds, 3), "prefix_max_abs_diff": drift,
        "projected_train_s_full": round(projected_full, 1),
        "projected_train_s_cached": round(projected_cached, 1),
        # the ratio of the unrounded projections: a tiny model's quick run rounds both to 0.0
        "projected_ratio": round(projected_cached / projected_full, 3),
    }
    if reader is not None and val_items:
        model.eval()
        began = time.perf_counter()
        hits = read_hits(reader, val_items)
        opening_s = (time.perf_counter() - began) / len(val_items)
        reader.opening = OpeningCache(model, [])  # the baseline: every prompt read whole
        began = time.perf_counter()
        whole_hits = read_hits(reader, val_items)
        whole_s = (time.perf_counter() - began) / len(val_items)
        began = time.perf_counter()
        generated = [generate_answer(reader, item.question, item.evidence) for item in val_items]
        generate_s = (time.perf_counter() - began) / len(val_items)
        jumped = [[name for name, _ in reader.answer(item.question, item.evidence)] for item in val_items]
        result.update({"read_generate_s_per_question": round(generate_s, 3),
                       "read_jump_over_generate": round(whole_s / generate_s, 3),
                       "same_answers_generate": generated == jumped})
        result.update({"validation_s_per_question": round(opening_s, 3), "read_whole_s_per_question": round(whole_s, 3),
                       "read_opening_over_whole": round(opening_s / whole_s, 3),
                       "validation_hits_at_1": round(hits["hits_at_1"], 3),
                       "same_hits_at_1_whole": whole_hits["hits_at_1"] == hits["hits_at_1"]})
    return result


def generate_answer(reader, question: str, evidence) -> list[str]:
    """The names ``generate`` writes one token per pass under the reader's grammar (the baseline of
    :func:`rg.reasoning.tuned_reader.constrained_greedy`)."""
    import torch

    from rg.reasoning.tuned_reader import build_prompt

    prompt = build_prompt(reader.tokenizer, reader.settings, question, evidence)
    grammar = reader.grammar(prompt.candidates)
    if grammar.empty:
        return []
    width = len(prompt.ids)
    budget = reader.settings.max_answers * (reader.settings.max_name_tokens + 1) + 1
    with torch.inference_mode():
        output = reader.model.generate(
            input_ids=torch.tensor([prompt.ids]), attention_mask=torch.ones((1, width), dtype=torch.long),
            max_new_tokens=budget, do_sample=False, num_beams=1, eos_token_id=reader.eos, pad_token_id=reader.eos,
            prefix_allowed_tokens_fn=lambda _row, seq: grammar.allowed(seq[width:].tolist()),
            temperature=None, top_p=None, top_k=None)
    return grammar.parse(output[0, width:].tolist())


def shared_opening(examples) -> int:
    """Tokens every example opens with (what the frozen pass computes once)."""
    from rg.models.prefix import shared_prefix

    return shared_prefix([e.input_ids for e in examples])


def main(argv: Sequence[str] | None = None) -> int:
    from bench.demo import AVX2_ENV

    parser = argparse.ArgumentParser(prog="python -m bench.read_stage", description=__doc__.strip().split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny LLaMA on synthetic examples (wiring only)")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "demo.yaml")
    parser.add_argument("--steps", type=int, default=12, help="optimiser steps timed each way")
    parser.add_argument("--isa", choices=("native", "avx2"), default="native")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the read stage's cpus_per_worker)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"{NAME}.json")
    args = parser.parse_args(argv)
    if args.isa == "avx2" and any(os.environ.get(k) != v for k, v in AVX2_ENV.items()):
        argv = sys.argv[1:] if argv is None else list(argv)  # torch reads these at import: run again with them
        done = os.spawnve(os.P_WAIT, sys.executable, [sys.executable, "-m", "bench.read_stage", *argv],
                          {**os.environ, **AVX2_ENV})
        return done
    import torch

    from bench.machine import RunRecord, write_report

    torch.set_num_threads(args.threads)
    record = RunRecord("bench.read_stage", argv)
    model, examples, reader, val_items, facts = _tiny_setup() if args.quick else _demo_setup(args.config)
    batch_size, epochs, window = facts.get("batch_size", 2), facts.get("epochs", 2), facts.get("length_window", 1)
    result = {"isa": args.isa, "isa_env": {k: os.environ.get(k) for k in AVX2_ENV},
              "quick": args.quick, "config": None if args.quick else str(args.config),
              "baseline": "the same steps with every layer recomputed (full)", **facts,
              **measure(model, examples, reader, val_items, args.steps, batch_size, epochs, window)}
    write_report(args.out, result, record)
    print(f"read stage ({result['dtype']}, isa {args.isa}): step {result['full_step_s']:.2f} s full, "
          f"{result['cached_step_s']:.2f} s cached ({result['cached_over_full']:.2f}x), prefix "
          f"{result['prefix_s_per_example']:.2f} s/example ({result['prefix_opening_over_whole']:.2f}x whole prompts); "
          f"{epochs} epoch(s) projected {result['projected_train_s_full']:.0f} -> "
          f"{result['projected_train_s_cached']:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
