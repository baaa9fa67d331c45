"""Every committed results file in ``bench/results/`` is written by code: one command per file, no orphan keys.

A static check, cheap and independent of the machine: :data:`WRITERS` maps each file to the bench
module whose ``main`` writes it whole and to the command ``bench/README.md`` lists for it. Every
key path of the JSON (dict keys, recursively, through list items) must be named in that module's
source, in ``bench/machine.py`` (the ``machine`` block every report carries) or in a module listed
as a source (a typed config or record whose fields become keys through ``model_dump`` /
``asdict`` / ``to_dict``): as a string literal, an f-string's pattern, a keyword argument or a
field. Keys that are data values (hop counts, K values, stage or mode names, client counts) are
skipped only under the paths a writer lists in ``data_keys``. A key that no code writes — a figure
merged in by hand — fails the test with its path.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
README = ROOT / "bench" / "README.md"


@dataclass(frozen=True)
class Writer:
    """Who writes one results file.

    Attributes:
        module: the bench module whose ``main`` writes the file whole.
        command: the command that wrote it, as ``bench/README.md`` lists it (``--quick`` runs write to the same
            default file unless the command names another ``--out``).
        sources: further modules whose literals or fields name keys of the file (configs dumped whole).
        data_keys: dotted key paths (``*`` matches any key, ``[]`` a list's items) whose child keys are data
            values, not names; their children's own keys are checked again.
    """

    module: str
    command: str
    sources: tuple[str, ...] = ()
    data_keys: tuple[str, ...] = ()


DEMO_DATA = ("run.stages", "run.qa", "baseline_run.stages", "baseline_run.qa", "stage_seconds_ratio", "isa_env")
DRIVER = "bench.driver_memory"
PLANNER_BASES_DATA = ("planner.datasets", "planner.datasets.*.*.seen.by_hop", "planner.datasets.*.*.paraphrase.by_hop",
                      "planner.bases")
DUALTOWER_SOURCES = ("rg.reasoning.dualtower.controller",)
DUALTOWER_DATA = ("modes.[].faults_by_kind", "modes.[].questions_by_hop")
MEMORY_DATA = ("retrieval", "replay.by_subgraph_triples", "rounds.*.[].tokens_per_question", "rounds.*.analysis_sources",
               "rounds.*.[].analysis_sources")
SERVE_DATA = ("load.[].status", "overload.status", "step.status", "phases_s")

WRITERS: dict[str, Writer] = {
    "demo.json": Writer("bench.demo", "RAY_AUTH_MODE=disabled python -m bench.demo --isa avx2 --checkout DIR",
                        data_keys=DEMO_DATA),
    "demo_bf16.json": Writer("bench.demo", "RAY_AUTH_MODE=disabled python -m bench.demo "
                             "--out bench/results/demo_bf16.json", data_keys=DEMO_DATA),
    "driver_memory.json": Writer(DRIVER, "python -m bench.driver_memory --config configs/train_metaqa_mlp.yaml "
                                 "--set input=[DIR/3hop-test] --set train.epochs=1"),
    "driver_memory_before.json": Writer(DRIVER, "python -m bench.driver_memory --config configs/train_metaqa_mlp.yaml "
                                        "--set input=[DIR/3hop-test] --set train.epochs=1 --checkout OLD "
                                        "--out bench/results/driver_memory_before.json"),
    "driver_memory_planner.json": Writer(DRIVER, "python -m bench.driver_memory --config configs/train_planner_metaqa.yaml "
                                         "--before examples_on=driver --out bench/results/driver_memory_planner.json"),
    "driver_memory_planner_eval.json": Writer(DRIVER, "python -m bench.driver_memory --config "
                                              "configs/train_planner_metaqa.yaml --before examples_on=driver "
                                              "--out bench/results/driver_memory_planner_eval.json"),
    "driver_memory_reader.json": Writer(DRIVER, "python -m bench.driver_memory --config configs/train_reader_synthetic.yaml "
                                        "--before examples_on=driver --out bench/results/driver_memory_reader.json"),
    "dualtower.json": Writer("bench.dualtower", "python -m bench.dualtower --metaqa-subgraphs DIR",
                             sources=DUALTOWER_SOURCES, data_keys=DUALTOWER_DATA),
    "dualtower_synthetic.json": Writer("bench.dualtower", "python -m bench.dualtower --out "
                                       "bench/results/dualtower_synthetic.json",
                                       sources=DUALTOWER_SOURCES, data_keys=DUALTOWER_DATA),
    "evidence.json": Writer("bench.evidence", "python -m bench.evidence",
                            sources=("rg.evidence.build", "rg.evidence.config"),
                            data_keys=("triples_in", "chains_out", "chains_per_ms", "triples_per_ms", "ms_per_question",
                                       "compression", "all", "all.*.walk_sources", "by_hop", "by_hop.*.by_k",
                                       "by_hop.*.by_k.*.walk_sources")),
    "graph_ops.json": Writer("bench.graph_ops", "python -m bench.graph_ops",
                             data_keys=("khop.by_hop", "shortest_paths.by_hop", "shortest_paths.by_hop.*",
                                        "shortest_paths.by_mode", "skipped.*")),
    "graph_scale.json": Writer("bench.graph_scale", "python -m bench.graph_scale"),
    "linking.json": Writer("bench.linking", "python -m bench.linking", sources=("rg.linking.config", "rg.text.encoder"),
                           data_keys=("metaqa.by_hop",)),
    "memory.json": Writer("bench.memory", "python -m bench.memory", sources=("rg.memory.edges",), data_keys=MEMORY_DATA),
    "memory_quick.json": Writer("bench.memory", "python -m bench.memory --quick", sources=("rg.memory.edges",),
                                data_keys=MEMORY_DATA),
    "models.json": Writer("bench.models", "python -m bench.models --quick"),
    "planner.json": Writer("bench.planner", "python -m bench.planner",
                           sources=("rg.retrievers.planner.evaluate", "rg.training.planner_data"),
                           data_keys=("speed_ratio_constrained_over_unconstrained",)),
    "planner_bases.json": Writer("bench.planner_bases", "python -m bench.planner_bases --quick --threads 1",
                                 sources=("rg.retrievers.planner.config",), data_keys=PLANNER_BASES_DATA),
    "planner_decode.json": Writer("bench.planner_decode", "python -m bench.planner_decode --baseline CHECKOUT --questions 24 --bases tiny --demo outputs/demo --metaqa-subgraphs outputs/metaqa --metaqa-per-hop 200",
                                  sources=("bench.planner_bases",), data_keys=("bases",)),
    "privacy.json": Writer("bench.privacy", "python -m bench.privacy"),
    "privacy_quick.json": Writer("bench.privacy", "python -m bench.privacy --quick --out bench/results/privacy_quick.json"),
    "kg_edits.json": Writer("bench.kg_edits", "RAY_AUTH_MODE=disabled python -m bench.kg_edits",
                            data_keys=("edit_statuses",)),
    "privacy_stores.json": Writer("bench.privacy_stores", "python -m bench.privacy_stores",
                                  data_keys=("*.answered", "*.p50_ms", "*.deploy_s", "*.unverified", "*.leaking_bodies",
                                             "*.exposure_matches")),
    "read_stage.json": Writer("bench.read_stage", "python -m bench.read_stage --isa avx2",
                              sources=("bench.demo",), data_keys=("isa_env",)),
    "reader_tuned.json": Writer("bench.reader_tuned", "python -m bench.reader_tuned --metaqa-subgraphs outputs/metaqa "
                                "--demo outputs/demo",
                                sources=("rg.training.reader_loop",),
                                data_keys=("reader_quick_run.*.hits1_per_hop", "reader_quick_run.*.hit_per_hop",
                                           "reader_quick_run.*.n_per_hop", "reader_quick_run.ceiling.*",
                                           "reader_hits1_metaqa", "reader_hits1_metaqa_retriever_scores",
                                           "reader_gold_in_shown_lines_metaqa", "reader_metaqa.*.hits1_per_hop",
                                           "reader_metaqa.*.hit_per_hop", "reader_metaqa.*.n_per_hop",
                                           "reader_metaqa.ceiling.*")),
    "refine.json": Writer("bench.refine", "python -m bench.refine"),
    "retriever.json": Writer("bench.retriever", "python -m bench.retriever",
                             sources=("rg.retrievers.mlp.config", "rg.retrievers.walk", "rg.retrievers.base")),
    "serve.json": Writer("bench.serve", "RAY_AUTH_MODE=disabled python -m bench.serve --requests 32 --levels 1,2,4,8,16",
                         data_keys=SERVE_DATA),
    "serve_quick.json": Writer("bench.serve", "RAY_AUTH_MODE=disabled python -m bench.serve --quick "
                               "--out bench/results/serve_quick.json", data_keys=SERVE_DATA),
    "serve_quick_throughput.json": Writer("bench.serve", "RAY_AUTH_MODE=disabled python -m bench.serve --quick "
                                          "--throughput-optimized --out bench/results/serve_quick_throughput.json",
                                          data_keys=SERVE_DATA),
    "serve_quality.json": Writer("bench.serve_quality", "python -m bench.serve_quality",
                                 data_keys=("hits1_metaqa", "metaqa", "metaqa.questions")),  # keyed by hop
    "sparql.json": Writer("bench.sparql", "python -m bench.sparql", sources=("rg.stores.compare",),
                          data_keys=("comparisons_by_hop", "comparisons.compared", "comparisons.mismatched")),
    "subgraph_cap.json": Writer("bench.subgraph_cap", "python -m bench.subgraph_cap --questions 1000",
                                data_keys=("hops", "hops.*.by_cut", "hops.*.by_cut.*")),
}
"""Each committed JSON results file → its writer (the commands are also in bench/README.md's table)."""

PLOTS = {"serve_replicas.png": "serve.json", "subgraph_cap.png": "subgraph_cap.json"}
"""Plots written beside a results file by the same command."""

REDONE_ELSEWHERE: dict[str, str] = {}
"""Known exceptions: results files whose writers are being made to conform on other branches (their owners are
redoing the module and its JSON); the orphan-key check reports them but does not fail on them."""


@dataclass(frozen=True)
class Names:
    """What a module's source can write as a key: literals, f-string patterns, keyword and field names."""

    literals: frozenset[str]
    patterns: tuple[re.Pattern[str], ...]

    def __contains__(self, key: str) -> bool:
        return key in self.literals or any(p.fullmatch(key) for p in self.patterns)


@cache
def names_in(module: str) -> Names:
    """The key names ``module``'s source can produce (read with ``ast``, never imported)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, f"{module} not found"
    tree = ast.parse(Path(spec.origin).read_text())
    literals: set[str] = set()
    patterns: list[re.Pattern[str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            literals.add(node.value)
        elif isinstance(node, ast.JoinedStr):
            fixed = [v.value for v in node.values if isinstance(v, ast.Constant)]
            if len("".join(fixed)) >= 4:  # f"{x}" alone would match any key
                patterns.append(re.compile("".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".+"
                                                   for v in node.values)))
        elif isinstance(node, ast.keyword) and node.arg:
            literals.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            literals.add(node.target.id)
    return Names(frozenset(literals), tuple(patterns))


def key_paths(value: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every dict key path in ``value``; list items add ``[]`` to the path."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in [(*prefix, str(k)), *key_paths(v, (*prefix, str(k)))]]
    if isinstance(value, list):
        return [p for item in value for p in key_paths(item, (*prefix, "[]"))]
    return []


def _under(path: tuple[str, ...], pattern: str) -> bool:
    """True when ``path``'s parent is the dotted ``pattern`` (``*`` matches one key or ``[]``)."""
    steps = pattern.split(".")
    parent = path[:-1]
    return len(parent) == len(steps) and all(s in ("*", p) for s, p in zip(steps, parent))


def orphan_keys(report: Any, writer: Writer) -> list[str]:
    """Dotted paths of the keys of ``report`` that no source of ``writer`` names."""
    sources = [names_in(m) for m in (writer.module, "bench.machine", *writer.sources)]
    out = []
    for path in key_paths(report):
        key = path[-1]
        if any(_under(path, pattern) for pattern in writer.data_keys):
            continue
        if not any(key in names for names in sources):
            out.append(".".join(path))
    return sorted(set(out))


def test_every_results_file_has_one_writer():
    files = {p.name for p in RESULTS.iterdir() if p.is_file()}
    registered = set(WRITERS) | set(PLOTS)
    assert files - registered == set(), "results files no command is registered for (add to WRITERS or remove them)"
    assert registered - files == set(), "registered results files that are not committed"
    assert set(PLOTS.values()) <= set(WRITERS)
    assert set(REDONE_ELSEWHERE) <= set(WRITERS)


def test_every_writer_is_a_bench_module_with_a_main():
    for name, writer in WRITERS.items():
        assert re.search(rf"python -m {re.escape(writer.module)}( |$)", writer.command), name
        spec = importlib.util.find_spec(writer.module)
        assert spec is not None and spec.origin is not None, name
        assert "def main(" in Path(spec.origin).read_text(), f"{writer.module} has no main()"
        out = re.search(r"--out (\S+)", writer.command)
        stem = writer.module.removeprefix("bench.")
        default = f"bench/results/{stem}_quick.json" if name == f"{stem}_quick.json" else f"bench/results/{stem}.json"
        assert (out.group(1) if out else default) == f"bench/results/{name}", f"{name}: `{writer.command}` writes elsewhere"


def test_readme_lists_every_command():
    readme = README.read_text()
    for name, writer in WRITERS.items():
        assert writer.command in readme, f"{name}: bench/README.md does not list `{writer.command}`"


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_no_orphan_keys(name: str):
    report = json.loads((RESULTS / name).read_text())
    orphans = orphan_keys(report, WRITERS[name])
    if name in REDONE_ELSEWHERE:
        pytest.skip(f"{name}: {len(orphans)} orphan keys, {REDONE_ELSEWHERE[name]}")
    assert orphans == [], f"{name}: keys no code of {WRITERS[name].module} writes"


def test_the_check_finds_a_hand_merged_key():
    """A key merged in by hand (as models.json once held) is reported; data keys only where declared."""
    writer = Writer("bench.refine", "python -m bench.refine")
    report = {"min_efficiency": 0.9, "by_pool": [{"efficiency": 0.9}], "machine": {"cpu_model": "x"},
              "reader_hits1_metaqa_5k_subgraphs": {"1": 0.97}}
    assert orphan_keys(report, writer) == ["reader_hits1_metaqa_5k_subgraphs", "reader_hits1_metaqa_5k_subgraphs.1"]
    declared = Writer("bench.refine", "python -m bench.refine", data_keys=("by_pool.[]",))
    assert orphan_keys({"by_pool": [{"3": 1, "efficiency": 2}]}, declared) == []
    assert orphan_keys({"by_pool": [{"3": 1}]}, writer) == ["by_pool.[].3"]
