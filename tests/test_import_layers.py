"""The packages of ``rg/`` import one another in one direction: no cycle between packages, no two modules
that import each other. A static check over the source (``ast``), cheap and independent of the machine.

Every import counts, at module level or inside a function, except those under ``if TYPE_CHECKING:`` (never
executed; annotations only). A module's package is its first name under ``rg`` (``rg.data.rog`` is in
``data``); top-level modules (``rg/config.py``) are packages of their own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1] / "rg"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    """Line numbers inside ``if TYPE_CHECKING:`` blocks."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imported_names(path: Path, module: str) -> list[str]:
    """Every ``rg`` name ``path`` imports (``from a import b`` gives ``a`` and ``a.b``), relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return [name for name in names if name == "rg" or name.startswith("rg.")]


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """Module -> module edges between the files under ``root`` (a name resolves to its longest known module)."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for module, path in files.items():
        for name in imported_names(path, module):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):  # a package's own __init__ is no edge
                graph.add_edge(module, name)
    return graph


def package_of(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def package_graph(modules: nx.DiGraph) -> nx.DiGraph:
    """Package -> package edges, each with one module edge that makes it (``via``)."""
    graph = nx.DiGraph()
    for a, b in modules.edges:
        pa, pb = package_of(a), package_of(b)
        if pa != pb and not graph.has_edge(pa, pb):
            graph.add_edge(pa, pb, via=f"{a} -> {b}")
    return graph


def describe(graph: nx.DiGraph, cycle: list[str]) -> str:
    return " ; ".join(graph.edges[a, b]["via"] for a, b in zip(cycle, cycle[1:] + cycle[:1]))


def test_no_cycle_between_packages():
    packages = package_graph(import_graph())
    cycles = sorted(nx.simple_cycles(packages), key=len)
    assert not cycles, "packages import each other (move the shared type down, or the job up into rg.jobs):\n" + \
        "\n".join(f"{' -> '.join(c)}: {describe(packages, c)}" for c in cycles[:10])


def test_no_two_modules_import_each_other():
    modules = import_graph()
    circles = sorted({tuple(sorted((a, b))) for a, b in modules.edges if modules.has_edge(b, a)})
    assert not circles, f"modules that import each other: {circles}"


def test_jobs_import_libraries_and_no_library_imports_a_job():
    modules = import_graph()
    into_jobs = sorted((a, b) for a, b in modules.edges if package_of(b) == "jobs" and package_of(a) not in ("jobs",
                                                                                                             "pipeline"))
    assert not into_jobs, f"a library imports a job driver (rg.jobs composes libraries, not the reverse): {into_jobs}"


@pytest.mark.parametrize("source, cycle", [
    ({"a/__init__.py": "", "a/x.py": "from rg.b.y import f\n", "b/__init__.py": "", "b/y.py": "import rg.a.x\n"},
     True),
    ({"a/__init__.py": "", "a/x.py": "from rg.b.y import f\n", "b/__init__.py": "",
      "b/y.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rg.a.x import g\n"}, False),
    ({"a/__init__.py": "from rg.a.x import f\n", "a/x.py": "from . import z\n", "a/z.py": ""}, False),
])
def test_the_check_sees_a_planted_cycle_and_not_a_type_only_one(tmp_path, source, cycle):
    root = tmp_path / "rg"
    for name, text in source.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "__init__.py").write_text("")
    assert bool(list(nx.simple_cycles(package_graph(import_graph(root))))) == cycle


def test_the_architecture_page_names_every_package_and_only_those():
    page = (ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    listed = {line.split("|")[2].strip().strip("`") for line in page.splitlines()
              if line.startswith("| ") and line.split("|")[1].strip().isdigit()}
    packages = {package_of(m) for m in import_graph().nodes if m != "rg"}
    assert listed == packages, f"docs/architecture.md's layer table: add {packages - listed}, drop {listed - packages}"


def test_every_long_module_and_function_has_its_reason_on_the_architecture_page():
    """A module over 400 lines or a function over 80 appears in docs/architecture.md's tables (with why it is kept)."""
    page = (ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    long_modules, long_functions = set(), set()
    for path in ROOT.rglob("*.py"):
        name = path.relative_to(ROOT).as_posix()
        source = path.read_text(encoding="utf-8")
        if source.count("\n") > 400:
            long_modules.add(name)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80:
                long_functions.add(f"{name}: {node.name}")
    assert {m for m in long_modules if f"| `{m}` |" not in page} == set()
    assert {f for f in long_functions if f"| `{f}` |" not in page} == set()


def test_training_reads_labels_and_computes_no_supervision():
    """The trainers read labels rows (``rg.data.labels``); the supervision stage (refine, the weak-label step) writes them."""
    modules = import_graph()
    edges = sorted(f"{a} -> {b}" for a, b in modules.edges if package_of(a) == "training" and package_of(b) == "supervision")
    assert edges == [], "rg/training must read labels rows, not compute them: " + ", ".join(edges)
