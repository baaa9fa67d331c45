"""What the privacy boundary costs: the egress guard's throughput, and the layer's share of a question.

    python -m bench.privacy --quick
    python -m bench.privacy [--kb @shared/metaqa/kb_reconstructed.txt.gz] [--questions 300] [--out PATH]

Two measurements, each against a baseline timed in the same run:

* **Guard throughput.** The egress guard (:class:`rg.privacy.EgressGuard`: one Aho-Corasick pass
  over the normalised request) holds ``--raw-strings`` entity names of the KG and checks
  ``--payloads`` requests of ``--payload-chars`` characters (pseudonyms, relation labels and
  common words; half of them with one raw name planted in upper case). The baseline is the naive
  check: normalise the request once, then ``str.find`` each normalised raw string in turn, with
  the same whole-token rule. Both must give the same verdict on every request
  (``identical_verdicts``); ``guard_speedup_vs_naive`` is the ratio of requests per second.
  Target: ≥ 20×.
* **Share of a question's time.** For ``--questions`` questions of the KG (MetaQA 2-hop test
  questions on the whole KB; the synthetic KG with ``--quick`` or when the KB is absent), the
  Hand's work without privacy is cutting the question's subgraph from the KG
  (:func:`rg.subgraphs.build_sample`, cut as ``configs/build_metaqa.yaml`` cuts the default MetaQA build) and scoring it with the
  MLP-DDE retriever: embedding the question with the text encoder, building the question graph,
  collating and the forward pass (entity and relation embeddings are built beforehand, as a
  server holds them; the model is untrained: scoring cost does not depend on the weights). The
  privacy layer is what ``privacy`` mode adds per question: open a session, guard every name of
  the subgraph, prune it to the sanitiser's node budget (``--budget``) and anonymise and group
  what is kept (:meth:`rg.privacy.PrivacySession.expose`), mask the question, and pass the
  request through the guard. ``privacy_share_of_question_time`` is the layer's time over the
  time without it. Target: ≤ 10%. The guard's shared index of the KG's raw strings
  (:attr:`rg.privacy.KGSchema.guard_index`) is built once before the questions, as a server builds
  it at start-up; its build seconds are reported apart (``guard_index``).
* **Memory of the shared index.** Python heap (``tracemalloc``) and resident-set growth of building
  a :class:`rg.privacy.guard.GuardIndex` over the ``--raw-strings`` names and over every entity
  name of the KG.

The JSON also records the machine (:func:`bench.machine.machine`: commit, CPU model and flags,
cores, torch threads, load) before and after, and the run's wall seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import sys
import time
import tracemalloc
from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import torch

from rg.data.metaqa import read_metaqa_kb, read_metaqa_questions
from rg.run.paths import resolve_data_path
from rg.data.records import BadRow
from rg.data.sample import Question, Sample
from rg.config import load_config
from rg.jobs.build_subgraphs import BuildSubgraphsConfig
from rg.subgraphs import Unbuildable, build_sample
from rg.data.synthetic import SyntheticConfig, generate
from rg.graph import KnowledgeGraph
from rg.privacy import EgressGuard, KGSchema, PrivacyConfig, PrivacySession, SanitiserConfig
from rg.privacy.guard import COMMON_WORDS, GuardIndex, guardable
from rg.privacy.normalise import normalise, whole_token
from rg.retrievers.graphs import collate
from rg.retrievers.mlp import MLPConfig, MLPRetriever
from rg.text.encoder import EncoderConfig, TextEncoder
from rg.retrievers.inputs import build_tables, question_graph

from bench.machine import machine

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "privacy.json"
DEFAULT_KB = "@shared/metaqa/kb_reconstructed.txt.gz"
DEFAULT_QUESTIONS = "@shared/metaqa/qa_test_2hop.txt.gz"
BUILD_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "build_metaqa.yaml"
BASELINE = "naive normalised str.find loop over every raw string"


def naive_find(keys: Sequence[str], text: str) -> bool:
    """The baseline check: each normalised raw string searched in turn, whole tokens only."""
    folded = normalise(text)
    for key in keys:
        start = folded.find(key)
        while start >= 0:
            if whole_token(folded, start, start + len(key)):
                return True
            start = folded.find(key, start + 1)
    return False


def make_payloads(names: Sequence[str], relations: Sequence[str], count: int, chars: int,
                  rng: random.Random) -> list[str]:
    """Requests that look like the Brain's: pseudonyms, relation labels and words; every second
    one carries a raw name in upper case at a random place."""
    words = sorted(COMMON_WORDS) + ["path", "answer", "select", "question", "->", "[", "]"]
    payloads = []
    for i in range(count):
        parts: list[str] = []
        size = 0
        while size < chars:
            pick = rng.random()
            token = (f"ent_{rng.getrandbits(32):08x} (entity)" if pick < 0.3
                     else rng.choice(relations) if pick < 0.5 else rng.choice(words))
            parts.append(token)
            size += len(token) + 1
        if i % 2:
            parts.insert(rng.randrange(len(parts)), rng.choice(names).upper())
        payloads.append(" ".join(parts)[: chars + 200])
    return payloads


def guard_throughput(names: Sequence[str], relations: Sequence[str], payloads: int, chars: int,
                     seed: int, index: GuardIndex) -> dict[str, Any]:
    """Requests per second of the guard and of the naive loop on the same requests; the guard is timed
    with its own automaton and with the KG's shared ``index`` (as sessions use it)."""
    rng = random.Random(seed)
    public = frozenset(w for r in relations for w in re.split(r"[^0-9a-z]+", normalise(r)) if w)
    guard = EgressGuard({"entity_name": names}, public=public)  # as a utility-mode session's guard
    shared = EgressGuard({"entity_name": names}, public=public, index=index)
    keys = list(dict.fromkeys(k for k in (normalise(n) for n in names) if guardable(k, public)))
    texts = make_payloads(names, relations, payloads, chars, rng)
    guard.find("warm up")  # builds the automaton, as the first check of a session does
    start = time.perf_counter()
    fast = [guard.find(t) is not None for t in texts]
    guard_s = time.perf_counter() - start
    start = time.perf_counter()
    fast_shared = [shared.find(t) is not None for t in texts]
    shared_s = time.perf_counter() - start
    start = time.perf_counter()
    slow = [naive_find(keys, t) for t in texts]
    naive_s = time.perf_counter() - start
    return {
        "raw_strings": len(names), "guarded_strings": guard.size, "payloads": len(texts),
        "payload_chars": sum(map(len, texts)) / len(texts), "planted": sum(fast),
        "guard_payloads_per_s": len(texts) / guard_s, "guard_shared_index_payloads_per_s": len(texts) / shared_s,
        "naive_payloads_per_s": len(texts) / naive_s,
        "guard_speedup_vs_naive": naive_s / guard_s, "identical_verdicts": fast == slow == fast_shared,
    }


def _rss_bytes() -> int:
    """Resident set size now (Linux ``/proc/self/statm``; 0 elsewhere)."""
    statm = Path("/proc/self/statm")
    if not statm.exists():
        return 0

    return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def index_memory(strings: Sequence[str]) -> dict[str, Any]:
    """What a shared :class:`GuardIndex` over ``strings`` costs to build and hold: seconds, Python heap
    (``tracemalloc``, which also sees the automaton's nodes: pyahocorasick allocates through Python) and
    resident-set growth."""
    gc.collect()
    rss = _rss_bytes()
    tracemalloc.start()
    start = time.perf_counter()
    index = GuardIndex(strings)
    seconds = time.perf_counter() - start
    heap, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    grown = _rss_bytes() - rss
    result = {"strings": len(index), "build_s_traced": seconds, "tracemalloc_mb": heap / 2**20,
              "rss_growth_mb": grown / 2**20}
    del index
    return result


def load_kg(
    quick: bool, kb: str, questions_file: str, count: int
) -> tuple[str, list[tuple[str, str, str]], list[Question], dict[str, str] | None]:
    """The KG's triples and questions: MetaQA's KB and 2-hop questions, or the synthetic KG."""
    kb_path, q_path = resolve_data_path(kb), resolve_data_path(questions_file)
    if not quick and kb_path.exists() and q_path.exists():
        triples = list(read_metaqa_kb(kb_path))
        rows = islice(read_metaqa_questions(q_path, 2, "test"), count * 2)
        questions = [q for q in rows if not isinstance(q, BadRow)]
        return "metaqa 2-hop test", triples, questions[:count], None
    syn = generate(SyntheticConfig(questions=count, seed=0))
    return "synthetic", list(syn.triples), list(syn.questions), dict(syn.entity_types)


def privacy_layer(sample: Sample, schema: KGSchema, sanitiser: SanitiserConfig) -> dict[str, float]:
    """Seconds of each step ``privacy`` mode adds to one question."""
    times: dict[str, float] = {}
    start = time.perf_counter()
    names = {e for h, _, t in sample.triples for e in (h, t)}
    topics = [t for t in sample.q_entities if t in names] or list(sample.q_entities)
    with PrivacySession(PrivacyConfig(mode="privacy"), schema) as session:
        shown = session.expose(sample.triples, topics, sanitiser)
        times["expose"] = time.perf_counter() - start
        masked = session.mask_question(sample.question, topics, names=names)
        times["mask"] = time.perf_counter() - start - sum(times.values())
        lines = "\n".join(f"{h} -> [{r}] -> {t}" for h, r, t in shown.triples)
        session.guard.check_messages([{"role": "user", "content": f"{masked.text}\n{lines}"}])
        times["guard"] = time.perf_counter() - start - sum(times.values())
    return times


def question_share(kg_triples: list[tuple[str, str, str]], questions: list[Question], types: dict[str, str] | None,
                   budget: int, cache_dir: str | None) -> dict[str, Any]:
    """Mean milliseconds per question of extraction, retrieval and the privacy layer; the share."""
    kg = KnowledgeGraph.from_triples(kg_triples)
    schema = KGSchema.build(kg_triples, types)  # once per KG, not per question
    start = time.perf_counter()
    guard_index = schema.guard_index  # once per KG too: built at start-up, shared by every session
    index_s = time.perf_counter() - start
    config = load_config(BUILD_CONFIG, BuildSubgraphsConfig).subgraph  # the default MetaQA build's cut
    samples, extract_s = [], []
    for question in questions:
        start = time.perf_counter()
        try:
            built = build_sample(kg, question, config)
        except Unbuildable:
            continue
        extract_s.append(time.perf_counter() - start)
        samples.append(built.sample)
    encoder = TextEncoder(EncoderConfig(cache_dir=cache_dir))
    tables, index = build_tables(samples, encoder)  # a server holds these; not timed
    fresh = TextEncoder(EncoderConfig(cache_dir=None))  # a new question is embedded, never cached
    fresh.encode(["warm up"])
    model = MLPRetriever(MLPConfig(text_dim=tables.dim)).eval()
    retrieve_s, layer = [], []
    sanitiser = SanitiserConfig(max_nodes=budget)
    with torch.no_grad():
        for sample in samples:
            start = time.perf_counter()
            fresh.encode([sample.question])
            model(collate([question_graph(sample, index)]), tables)
            retrieve_s.append(time.perf_counter() - start)
            layer.append(privacy_layer(sample, schema, sanitiser))
    n = len(samples)
    extract, retrieve = sum(extract_s) / n, sum(retrieve_s) / n
    steps = {k: sum(t[k] for t in layer) / n for k in layer[0]}
    private = sum(steps.values())
    return {
        "questions": n, "mean_triples": sum(len(s.triples) for s in samples) / n,
        "ms_per_question": {"extract": 1000 * extract, "retrieve": 1000 * retrieve, "privacy": 1000 * private,
                            **{f"privacy_{k}": 1000 * v for k, v in steps.items()}},
        "privacy_share_of_question_time": private / (extract + retrieve),
        "guard_index": {"strings": len(guard_index), "build_s": index_s},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.privacy", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="synthetic KG, fewer requests (under a minute)")
    parser.add_argument("--kb", default=DEFAULT_KB, help="MetaQA KB file (the synthetic KG when absent)")
    parser.add_argument("--questions-file", default=DEFAULT_QUESTIONS, help="MetaQA 2-hop question file")
    parser.add_argument("--questions", type=int, default=None, help="questions timed (default 300; 60 quick)")
    parser.add_argument("--raw-strings", type=int, default=10_000, help="raw strings the guard holds")
    parser.add_argument("--payloads", type=int, default=None, help="requests checked (default 400; 100 quick)")
    parser.add_argument("--payload-chars", type=int, default=4096, help="characters per request")
    parser.add_argument("--budget", type=int, default=100, help="sanitiser node budget")
    parser.add_argument("--cache-dir", default="outputs/encoder_cache", help="text encoder's embedding cache")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    count = args.questions or (60 if args.quick else 300)
    payloads = args.payloads or (100 if args.quick else 400)
    torch.set_num_threads(1)
    wall = time.perf_counter()
    before = machine()

    dataset, triples, questions, types = load_kg(args.quick, args.kb, args.questions_file, count)
    entities = list(dict.fromkeys(e for h, _, t in triples for e in (h, t)))
    names = [e for e in entities if guardable(normalise(e))][: args.raw_strings]
    relations = sorted({r for _, r, _ in triples})
    memory = {"raw_strings": index_memory(names), "kg_entities": index_memory(entities)}
    guard = guard_throughput(names, relations, payloads, args.payload_chars, args.seed, GuardIndex(entities))
    share = question_share(triples, questions, types, args.budget, args.cache_dir)
    report = {
        "dataset": dataset, "quick": args.quick, "baseline": BASELINE, **guard, **share,
        "guard_index_memory": memory,
        "budget": args.budget, "targets": {"guard_speedup_vs_naive": 20.0, "privacy_share_of_question_time": 0.10},
        "machine": before, "machine_after": machine(), "wall_seconds": time.perf_counter() - wall,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    ms = report["ms_per_question"]
    print(f"bench.privacy ({dataset}): guard {guard['guard_speedup_vs_naive']:.0f}x the naive loop "
          f"({guard['guard_payloads_per_s']:.0f} vs {guard['naive_payloads_per_s']:.1f} requests/s, "
          f"{guard['raw_strings']} raw strings, identical={guard['identical_verdicts']}); privacy layer "
          f"{ms['privacy']:.1f} ms = {share['privacy_share_of_question_time']:.1%} of extraction "
          f"{ms['extract']:.1f} ms "
          f"+ retrieval {ms['retrieve']:.1f} ms ({share['questions']} questions); shared index of "
          f"{memory['kg_entities']['strings']} names {memory['kg_entities']['tracemalloc_mb']:.1f} MB; "
          f"load {before['load_1min']} -> {report['machine_after']['load_1min']} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
