"""Tests for rg.evaluation.report: the files written and the exact Markdown table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rg.evaluation import RetrievalResult, markdown_table, write_results
from rg.metrics import RecallAtK

COSINE = RetrievalResult(
    method="cosine",
    ks=(10, 100),
    questions=3,
    triple_recall={
        "gpt4o": RecallAtK(values={10: 0.5, 100: 1.0}, n=2, skipped=1),
        "weak": RecallAtK(values={10: 0.25, 100: 0.75}, n=2, skipped=1),
    },
    answer_recall=RecallAtK(values={10: 1 / 3, 100: 2 / 3}, n=3, skipped=0),
)
HOPS = RetrievalResult(
    method="hop_distance",
    ks=(10, 100),
    questions=3,
    triple_recall={"gpt4o": RecallAtK(values={10: 0.125, 100: 1.0}, n=2, skipped=1)},
    answer_recall=RecallAtK(values={10: None, 100: None}, n=0, skipped=3),
)

EXPECTED_TABLE = """\
| method | recall of | questions | skipped | R@10 | R@100 |
|:--|:--|--:|--:|--:|--:|
| cosine | gpt4o triples | 2 | 1 | 0.500 | 1.000 |
| cosine | weak triples | 2 | 1 | 0.250 | 0.750 |
| cosine | answers | 3 | 0 | 0.333 | 0.667 |
| hop_distance | gpt4o triples | 2 | 1 | 0.125 | 1.000 |
| hop_distance | answers | 0 | 3 | n/a | n/a |
"""


def test_markdown_table_exact() -> None:
    assert markdown_table([COSINE, HOPS]) == EXPECTED_TABLE


def test_markdown_table_with_different_ks_leaves_cells_empty() -> None:
    short = RetrievalResult(
        method="m",
        ks=(50,),
        questions=1,
        triple_recall={},
        answer_recall=RecallAtK(values={50: 1.0}, n=1, skipped=0),
    )
    lines = markdown_table([COSINE, short]).splitlines()
    assert lines[0] == "| method | recall of | questions | skipped | R@10 | R@50 | R@100 |"
    assert lines[2] == "| cosine | gpt4o triples | 2 | 1 | 0.500 |  | 1.000 |"
    assert lines[-1] == "| m | answers | 1 | 0 |  | 1.000 |  |"


def test_write_results(tmp_path: Path) -> None:
    files = write_results([COSINE, HOPS], tmp_path / "report", title="toy set")
    assert files.markdown.read_text() == "# toy set\n\n" + EXPECTED_TABLE
    data = json.loads(files.json.read_text())
    assert data["title"] == "toy set"
    assert [RetrievalResult.from_dict(r) for r in data["results"]] == [COSINE, HOPS]
    png = files.plot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == [
        "retrieval.json",
        "retrieval.md",
        "retrieval.png",
    ]


def test_write_results_without_title(tmp_path: Path) -> None:
    files = write_results([HOPS], tmp_path)
    assert files.markdown.read_text().startswith("| method |")
    assert json.loads(files.json.read_text())["title"] is None


def test_write_results_needs_a_result(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one"):
        write_results([], tmp_path)
