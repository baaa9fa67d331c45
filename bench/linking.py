"""Entity linking from raw questions (rg.linking): accuracy, failures by reason, speed, index size.

    python -m bench.linking --quick
    python -m bench.linking [--questions N] [--dense fallback|remaining|off] [--seed S] [--cache-dir DIR] [--out PATH]

On the MetaQA KB (``metaqa/kb_reconstructed.txt.gz``) a name index is built (timed, its bytes
counted) and a fixed seeded sample of N questions per test file (1, 2, 3 hops; the reader drops
the brackets around the topic entity, so the linker sees plain text) is linked. A question is
correct when the linked set equals the dataset's topic-entity set exactly; failures are broken
down into ``ambiguous``, ``not_found`` and ``wrong`` (linked, but another set), and questions
whose dataset topic is not in the KG at all (no linker can find it) are counted apart
(``topic_not_in_kg``) with the accuracy over the rest (``accuracy_reachable``). When the WebQSP
evidence file is present, the same is measured on its questions with the KG being the union of
their subgraphs (RoG names nodes by name; ``m.``/``g.`` ids are unnamed). The baseline is the
dataset's own topic entities (accuracy 1 by definition). ``--quick`` (60 questions per hop)
builds an exact-only index (``dense: off``), since embedding the 43k MetaQA names takes minutes
on a CPU without a warm ``--cache-dir``; the full run uses ``--dense`` (default ``fallback``).
"""

from __future__ import annotations

import argparse
import platform
import random
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from bench.machine import RunRecord, write_report
from rg.data.metaqa import read_metaqa_questions
from rg.run.paths import require_shared_data, shared_data_dir
from rg.data.rog import read_rog
from rg.data.sample import Question
from rg.data.sources import KBSource, load_kb
from rg.graph import KnowledgeGraph
from rg.linking import EntityLinker, LinkingConfig, NameIndex
from rg.linking.index import index_bytes
from rg.linking.names import store_names
from rg.stores import MemoryStore
from rg.text.encoder import EncoderConfig, TextEncoder

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "linking.json"
BASELINE = "the dataset's topic entities (MetaQA brackets, WebQSP q_entity)"
WEBQSP = "webqsp-evidence/webqsp_test_rog.jsonl.gz"


def build_index(kg: KnowledgeGraph, cfg: LinkingConfig, folder: Path) -> tuple[NameIndex, dict[str, Any]]:
    """Build and save the index of ``kg``; return it with its build seconds and bytes."""
    start = time.perf_counter()
    encoder = TextEncoder(cfg.encoder) if cfg.dense != "off" else None
    load_s = time.perf_counter() - start
    index = NameIndex.build(store_names(MemoryStore(kg), cfg.unnamed_pattern), encoder, "bench")
    size = index.save(folder)
    return index, {"build_seconds": round(time.perf_counter() - start, 3), "encoder_load_seconds": round(load_s, 3),
                   "bytes": size, "entries": len(index), "dense_keys": len(index.dense_keys),
                   "encoder": index.encoder_id, "files_bytes": index_bytes(folder)}


def score(linker: EntityLinker, kg: KnowledgeGraph, questions: Sequence[Question]) -> dict[str, Any]:
    """Link ``questions`` from their text; compare with their topic entities."""
    start = time.perf_counter()
    results = linker.link_many([q.question for q in questions])
    seconds = time.perf_counter() - start
    outcome: Counter = Counter()
    examples: dict[str, list[dict[str, Any]]] = {}
    unreachable = unreachable_ok = 0
    for q, r in zip(questions, results):
        kind = r.failure or ("correct" if set(r.entities) == set(q.q_entities) else "wrong")
        outcome[kind] += 1
        if not all(kg.has_entity(e) for e in q.q_entities):
            unreachable += 1
            unreachable_ok += kind == "correct"
        elif kind != "correct" and len(examples.setdefault(kind, [])) < 5:
            examples[kind].append({"question": q.question, "topics": list(q.q_entities), "linked": list(r.entities),
                                   "detail": r.detail})
    n = len(questions)
    reachable = n - unreachable
    return {"questions": n, "correct": outcome["correct"], "accuracy": outcome["correct"] / n if n else None,
            "failures": {k: outcome[k] for k in ("ambiguous", "not_found", "wrong")},
            "topic_not_in_kg": unreachable,
            "accuracy_reachable": (outcome["correct"] - unreachable_ok) / reachable if reachable else None,
            "seconds": round(seconds, 4), "questions_per_s": n / seconds if seconds > 0 else None,
            "examples": examples}


def metaqa_sample(folder: Path, n: int, seed: int) -> dict[int, list[Question]]:
    """``n`` questions per hop file, drawn with ``random.Random(seed)`` (all when fewer)."""
    rng = random.Random(seed)
    out = {}
    for hops in (1, 2, 3):
        items = [q for q in read_metaqa_questions(folder / f"qa_test_{hops}hop.txt.gz", hops, "test")
                 if isinstance(q, Question)]
        out[hops] = sorted(rng.sample(items, min(n, len(items))), key=lambda q: q.id)
    return out


def run_metaqa(cfg: LinkingConfig, n: int, seed: int, workdir: Path) -> dict[str, Any]:
    folder = require_shared_data("metaqa")
    kg, _ = load_kb(KBSource(path=str(folder / "kb_reconstructed.txt.gz"), format="metaqa"))
    index, built = build_index(kg, cfg, workdir / "metaqa-index")
    linker = EntityLinker(index, cfg)
    by_hop = {f"{h}hop": score(linker, kg, qs) for h, qs in metaqa_sample(folder, n, seed).items()}
    return {"index": built, "by_hop": by_hop, **pooled(by_hop.values())}


def run_webqsp(cfg: LinkingConfig, workdir: Path) -> dict[str, Any] | None:
    base = shared_data_dir()
    path = base / WEBQSP if base is not None else None
    if path is None or not path.is_file():
        return None
    samples = list(read_rog(path))
    kg = KnowledgeGraph.from_triples([t for s in samples for t in s.triples], dedup=True)
    index, built = build_index(kg, cfg, workdir / "webqsp-index")
    questions = [Question(s.id, s.question, (), s.q_entities) for s in samples]  # no answers reach linking
    result = score(EntityLinker(index, cfg), kg, questions)
    return {"index": built, "kg_triples": kg.num_triples, **result}


def pooled(parts) -> dict[str, Any]:
    parts = list(parts)
    n = sum(p["questions"] for p in parts)
    seconds = sum(p["seconds"] for p in parts)
    correct = sum(p["correct"] for p in parts)
    return {"questions": n, "accuracy": correct / n if n else None,
            "failures": {k: sum(p["failures"][k] for p in parts) for k in ("ambiguous", "not_found", "wrong")},
            "topic_not_in_kg": sum(p["topic_not_in_kg"] for p in parts),
            "questions_per_s": n / seconds if seconds > 0 else None}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.linking", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 questions per hop, exact-only index")
    parser.add_argument("--questions", type=int, default=300, help="MetaQA questions per hop file (seeded sample)")
    parser.add_argument("--dense", choices=("fallback", "remaining", "off"), default="fallback")
    parser.add_argument("--threshold", type=float, default=LinkingConfig().threshold)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default="outputs/encoder_cache", help="text encoder's embedding cache")
    parser.add_argument("--no-webqsp", action="store_true", help="skip the WebQSP evidence questions")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON path (default bench/results/linking.json)")
    args = parser.parse_args(argv)
    record = RunRecord("bench.linking", argv)
    n = 60 if args.quick else args.questions
    cfg = LinkingConfig(dense="off" if args.quick else args.dense, threshold=args.threshold,
                        encoder=EncoderConfig(cache_dir=args.cache_dir))
    wall = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-linking-") as tmp:
        metaqa = run_metaqa(cfg, n, args.seed, Path(tmp))
        webqsp = None if args.no_webqsp else run_webqsp(cfg, Path(tmp))
    report = {
        "benchmark": "linking", "baseline": BASELINE, "quick": args.quick, "seed": args.seed,
        "questions_per_hop": n, "config": cfg.model_dump(),
        "accuracy": metaqa["accuracy"], "questions_per_s": metaqa["questions_per_s"],
        "index_build_seconds": metaqa["index"]["build_seconds"], "index_bytes": metaqa["index"]["bytes"],
        "metaqa": metaqa, "webqsp": webqsp if webqsp is not None else {"skipped": f"{WEBQSP} not found"},
        "versions": {"python": platform.python_version()}, "wall_seconds": round(time.perf_counter() - wall, 2),
    }
    write_report(args.out, report, record)
    hops = ", ".join(f"{h} {v['accuracy']:.3f}" for h, v in metaqa["by_hop"].items())
    web = f"; WebQSP {webqsp['accuracy']:.3f}" if webqsp else ""
    print(f"linking: MetaQA accuracy {metaqa['accuracy']:.3f} ({hops}){web}; {metaqa['questions_per_s']:.0f} q/s; "
          f"index {metaqa['index']['build_seconds']:.1f} s, {metaqa['index']['bytes']:,} bytes -> {args.out}")
    return report


if __name__ == "__main__":
    main()
