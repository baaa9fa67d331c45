"""Tests for the RoG, WebQSP and MetaQA readers: tiny hand-made files, then the real shared data."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rg.data.metaqa import (
    METAQA_RELATIONS,
    read_metaqa_kb,
    read_metaqa_kb_rows,
    read_metaqa_questions,
    read_metaqa_split,
)
from rg.data.records import BadRow, BadRowError
from rg.data.rog import iter_rog_rows, read_rog, write_rog_parquet
from rg.data.sample import Question, Sample
from rg.data.webqsp import WebQSPLabels, read_webqsp_labels, read_webqsp_split

PARALLEL = Sample(
    id="q1",
    question="what does jamaican people speak",
    answers=("Jamaican English",),
    q_entities=("Jamaica",),
    a_entities=("Jamaican English",),
    triples=(
        ("Jamaica", "location.country.languages_spoken", "Jamaican English"),
        ("Jamaica", "location.country.official_language", "Jamaican English"),
        ("Jamaican English", "language.human_language.countries_spoken_in", "Jamaica"),
    ),
)
RICH = Sample(
    id="q2",
    question="which is it",
    answers=("b",),
    q_entities=("a", "c"),
    a_entities=("b",),
    triples=(("a", "r1", "b"), ("c", "r2", "m.0abc")),
    choices=("b", "d"),
    hops=2,
    relation_paths=(("r1",), ("r2", "r3^-1")),
)
EMPTY = Sample(id="q3", question="no graph", answers=(), q_entities=(), a_entities=(), triples=())
SAMPLES = (PARALLEL, RICH, EMPTY)


def _write_lines(path: Path, lines: list[str | bytes]) -> Path:
    data = b"".join((x.encode("utf-8") if isinstance(x, str) else x) + b"\n" for x in lines)
    if path.suffix == ".gz":
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def _jsonl(samples: tuple[Sample, ...]) -> list[str]:
    return [json.dumps(s.to_rog(), ensure_ascii=False) for s in samples]


# ---------------------------------------------------------------------------------- RoG files


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.jsonl.gz"])
def test_read_rog_jsonl(tmp_path: Path, name: str) -> None:
    path = _write_lines(tmp_path / name, _jsonl(SAMPLES))
    assert tuple(read_rog(path)) == SAMPLES


def test_read_rog_jsonl_plain_rog_row_without_rg_columns(tmp_path: Path) -> None:
    row = {"id": "WebQTest-9", "question": "q", "answer": ["x"], "q_entity": ["e"],
           "a_entity": ["x"], "graph": [["e", "r", "x"], ["e", "s", "x"]], "choices": []}
    path = _write_lines(tmp_path / "rog.jsonl", [json.dumps(row), "", "  "])
    assert list(read_rog(path)) == [
        Sample("WebQTest-9", "q", ("x",), ("e",), ("x",), (("e", "r", "x"), ("e", "s", "x")))
    ]


def test_write_then_read_parquet_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "out" / "test.parquet"
    assert write_rog_parquet(SAMPLES, path) == 3
    assert tuple(read_rog(path)) == SAMPLES
    assert sorted(p.name for p in path.parent.iterdir()) == ["test.parquet"]
    schema = pq.read_schema(path)
    assert schema.field("graph").type == pa.list_(pa.list_(pa.string()))
    assert schema.field("hops").type == pa.int64() and schema.field("hops").nullable
    assert write_rog_parquet([], path) == 0
    assert list(read_rog(path)) == []


def test_write_rog_parquet_in_small_batches(tmp_path: Path) -> None:
    samples = tuple(Sample(f"s{i}", "q", (), (), (), ((f"e{i}", "r", "x"),)) for i in range(7))
    path = tmp_path / "many.parquet"
    assert write_rog_parquet(iter(samples), path, batch_size=3) == 7
    assert tuple(read_rog(path)) == samples


def test_write_rog_parquet_failure_leaves_old_file_and_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "data.parquet"
    write_rog_parquet([EMPTY], path)

    def broken():
        yield PARALLEL
        raise RuntimeError("generator failed")

    with pytest.raises(RuntimeError, match="generator failed"):
        write_rog_parquet(broken(), path)
    assert list(read_rog(path)) == [EMPTY]
    assert [p.name for p in tmp_path.iterdir()] == ["data.parquet"]


def test_read_rog_parquet_shard_folder_in_sorted_order(tmp_path: Path) -> None:
    write_rog_parquet([RICH, EMPTY], tmp_path / "part-1.parquet")
    write_rog_parquet([PARALLEL], tmp_path / "part-0.parquet")
    (tmp_path / "README.txt").write_text("not a shard")
    assert tuple(read_rog(tmp_path)) == SAMPLES
    assert [n for n, _ in iter_rog_rows(tmp_path)] == [0, 1, 2]


def test_read_rog_parquet_with_only_rog_columns(tmp_path: Path) -> None:
    rows = [{k: v for k, v in s.to_rog().items() if k not in ("hops", "relation_paths")}
            for s in (PARALLEL, EMPTY)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "hf.parquet")
    assert list(read_rog(tmp_path / "hf.parquet")) == [PARALLEL, EMPTY]


def test_read_rog_parquet_missing_column_names_file_and_column(tmp_path: Path) -> None:
    row = {k: v for k, v in PARALLEL.to_rog().items() if k != "a_entity"}
    path = tmp_path / "broken.parquet"
    pq.write_table(pa.Table.from_pylist([row]), path)
    with pytest.raises(ValueError, match=r"broken\.parquet.*'a_entity'"):
        list(read_rog(path))


def test_iter_rog_rows_reports_bad_rows_by_reason(tmp_path: Path) -> None:
    good = _jsonl((PARALLEL,))[0]
    no_graph = {k: v for k, v in PARALLEL.to_rog().items() if k != "graph"}
    short_triple = {**PARALLEL.to_rog(), "graph": [["a", "r"]]}
    number_answer = {**PARALLEL.to_rog(), "answer": [1990]}
    path = _write_lines(
        tmp_path / "mixed.jsonl",
        [good, '{"id": "x", ', "[1, 2]", "", json.dumps(no_graph), json.dumps(short_triple),
         json.dumps(number_answer), b'{"id": "\xff"}', good],
    )
    rows = list(iter_rog_rows(path))
    assert [n for n, _ in rows] == list(range(8))
    assert rows[0][1] == PARALLEL and rows[-1][1] == PARALLEL
    bad = [item for _, item in rows if isinstance(item, BadRow)]
    assert [(b.source, b.line, b.reason) for b in bad] == [
        (str(path), 1, "malformed_json"),
        (str(path), 2, "not_an_object"),
        (str(path), 4, "missing_column"),
        (str(path), 5, "bad_triple"),
        (str(path), 6, "bad_value"),
        (str(path), 7, "bad_encoding"),
    ]
    assert "graph" in bad[2].detail and "answer" in bad[4].detail
    with pytest.raises(BadRowError, match=r"mixed\.jsonl:2: malformed_json") as caught:
        list(read_rog(path))
    assert caught.value.bad_row == bad[0]


def test_read_rog_path_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(read_rog(tmp_path / "absent.parquet"))
    with pytest.raises(FileNotFoundError, match="without .parquet"):
        list(read_rog(tmp_path))
    (tmp_path / "rows.csv").write_text("id\n")
    with pytest.raises(ValueError, match="unsupported"):
        list(read_rog(tmp_path / "rows.csv"))
    (tmp_path / "fake.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match=r"fake\.parquet: not a readable parquet"):
        list(read_rog(tmp_path / "fake.parquet"))


# ------------------------------------------------------------------------------ MetaQA files


@pytest.mark.parametrize("name", ["kb.txt", "kb.txt.gz"])
def test_read_metaqa_kb_rows(tmp_path: Path, name: str) -> None:
    path = _write_lines(
        tmp_path / name,
        [
            "Kismet|directed_by|William Dieterle",
            "AC|DC: Let There Be Rock|has_genre|Music\r",
            "A|has_tags|B|written_by|C",
            "Only|two",
            "X|not_a_relation|Y|Z",
            "",
            "|release_year|1999",
            b"Caf\xe9|in_language|French",
            "Kismet|release_year|1944",
        ],
    )
    rows = list(read_metaqa_kb_rows(path))
    assert [i for i, _ in rows] == list(range(9))
    triples = [item for _, item in rows if not isinstance(item, BadRow)]
    assert triples == [
        ("Kismet", "directed_by", "William Dieterle"),
        ("AC|DC: Let There Be Rock", "has_genre", "Music"),
        ("Kismet", "release_year", "1944"),
    ]
    bad = [(b.line, b.reason) for _, b in rows if isinstance(b, BadRow)]
    assert bad == [
        (2, "ambiguous_relation"),
        (3, "wrong_field_count"),
        (4, "wrong_field_count"),
        (5, "blank_line"),
        (6, "empty_field"),
        (7, "bad_encoding"),
    ]
    with pytest.raises(BadRowError, match=rf"{name}:3: ambiguous_relation"):
        list(read_metaqa_kb(path))


@pytest.mark.parametrize("name", ["qa.txt", "qa.txt.gz"])
def test_read_metaqa_questions(tmp_path: Path, name: str) -> None:
    path = _write_lines(
        tmp_path / name,
        [
            "what does [Grégoire Colin] appear in\tBefore the Rain",
            "[Joe Thomas] appears in which movies\tThe Inbetweeners Movie|The Inbetweeners 2",
            "no tab here [X]",
            "no topic\tA",
            "what about [X]\t",
            "[X] and a||gap\tA||B",
            "too\tmany\ttabs [X]",
            "",
            "films of [A] with [B]\tC\r",
        ],
    )
    items = list(read_metaqa_questions(path, hops=1, split_name="test"))
    assert items[:2] == [
        Question("metaqa-1hop-test-0", "what does Grégoire Colin appear in", ("Before the Rain",),
                 ("Grégoire Colin",), hops=1),
        Question("metaqa-1hop-test-1", "Joe Thomas appears in which movies",
                 ("The Inbetweeners Movie", "The Inbetweeners 2"), ("Joe Thomas",), hops=1),
    ]
    assert items[-1] == Question("metaqa-1hop-test-8", "films of A with B", ("C",), ("A", "B"),
                                 hops=1)
    assert [(b.source, b.line, b.reason) for b in items[2:-1]] == [
        (str(path), 2, "no_tab"),
        (str(path), 3, "no_topic"),
        (str(path), 4, "empty_answers"),
        (str(path), 5, "empty_answers"),
        (str(path), 6, "wrong_field_count"),
        (str(path), 7, "blank_line"),
    ]


def test_read_metaqa_questions_checks_arguments(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "qa.txt", ["[A] x\tB"])
    with pytest.raises(ValueError, match="hops"):
        list(read_metaqa_questions(path, hops=0, split_name="test"))
    with pytest.raises(ValueError, match="split_name"):
        list(read_metaqa_questions(path, hops=1, split_name=""))


def test_read_metaqa_split(tmp_path: Path) -> None:
    data = {"unit": "0-based line index",
            "splits": {"1hop": {"train": [0, 2], "val": [1], "test": []},
                       "2hop": {"train": [1], "val": [0], "test": [2]}}}
    path = tmp_path / "split.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    assert read_metaqa_split(path) == {
        1: {"train": (0, 2), "val": (1,), "test": ()},
        2: {"train": (1,), "val": (0,), "test": (2,)},
    }
    data["splits"]["2hop"]["test"] = [0]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"2hop.*line index 0 is in both 'val' and 'test'"):
        read_metaqa_split(path)
    path.write_text(json.dumps({**data, "unit": "id"}))
    with pytest.raises(ValueError, match="unit"):
        read_metaqa_split(path)


# ------------------------------------------------------------------------ WebQSP side files


def test_read_webqsp_split_and_labels(tmp_path: Path) -> None:
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"unit": "id", "splits": {"train": ["a", "b"], "test": ["c"]}}))
    assert read_webqsp_split(split) == {"train": ("a", "b"), "test": ("c",)}
    split.write_text(json.dumps({"unit": "id", "splits": {"train": ["a"], "test": ["a"]}}))
    with pytest.raises(ValueError, match="'a' is in both"):
        read_webqsp_split(split)

    rows = [{"id": "W-0", "evidence_triple_idx": [0, 3], "answer_entity_in_graph": True,
             "inferential_chains": [["r1", "r2"], ["r3"]]},
            {"id": "W-1", "evidence_triple_idx": [], "answer_entity_in_graph": False,
             "inferential_chains": []}]
    labels = _write_lines(tmp_path / "labels.jsonl.gz", [json.dumps(r) for r in rows])
    assert list(read_webqsp_labels(labels)) == [
        WebQSPLabels("W-0", (0, 3), True, (("r1", "r2"), ("r3",))),
        WebQSPLabels("W-1", (), False, ()),
    ]
    wrong = {**rows[0], "evidence_triple_idx": "0"}
    bad = _write_lines(tmp_path / "bad.jsonl", [json.dumps(wrong)])
    with pytest.raises(BadRowError, match=r"bad\.jsonl:1: bad_value"):
        list(read_webqsp_labels(bad))


# ------------------------------------------------------------------------------- real data


@pytest.fixture(scope="module")
def webqsp_samples(shared_data: Path) -> list[Sample]:
    return list(read_rog(shared_data / "webqsp-evidence" / "webqsp_test_rog.jsonl.gz"))


@pytest.fixture(scope="module")
def webqsp_raw(shared_data: Path) -> list[dict]:
    """The same file parsed with plain json, independently of the reader under test."""
    with gzip.open(shared_data / "webqsp-evidence" / "webqsp_test_rog.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def test_real_webqsp_rog_reads_all_rows(
    webqsp_samples: list[Sample], webqsp_raw: list[dict]
) -> None:
    assert len(webqsp_samples) == 1628
    assert len({s.id for s in webqsp_samples}) == 1628
    assert sum(not s.triples for s in webqsp_samples) == 107
    assert [len(s.triples) for s in webqsp_samples] == [len(r["graph"]) for r in webqsp_raw]


def test_real_webqsp_parallel_relations_survive(
    webqsp_samples: list[Sample], webqsp_raw: list[dict]
) -> None:
    found = None
    for row in webqsp_raw:
        relations: dict[tuple[str, str], set[str]] = {}
        for head, relation, tail in row["graph"]:
            relations.setdefault((head, tail), set()).add(relation)
        pairs = [(pair, rels) for pair, rels in relations.items() if len(rels) > 1]
        if pairs:
            found = (row["id"], *pairs[0])
            break
    assert found is not None, "expected a question with parallel relations in the real file"
    question_id, (head, tail), rels = found
    sample = next(s for s in webqsp_samples if s.id == question_id)
    assert {(head, r, tail) for r in rels} <= set(sample.triples)


def test_real_webqsp_labels_and_split(shared_data: Path, webqsp_samples: list[Sample]) -> None:
    labels = list(read_webqsp_labels(shared_data / "webqsp-evidence/webqsp_test_labels.jsonl.gz"))
    graph_sizes = {s.id: len(s.triples) for s in webqsp_samples}
    assert [x.id for x in labels] == [s.id for s in webqsp_samples]
    assert all(i < graph_sizes[x.id] for x in labels for i in x.evidence_triple_idx)
    assert sum(not x.inferential_chains for x in labels) == 23
    assert sum(x.answer_entity_in_graph for x in labels) == 1335
    split = read_webqsp_split(shared_data / "splits" / "webqsp_split.json.gz")
    assert {n: len(ids) for n, ids in split.items()} == {"train": 1139, "val": 162, "test": 327}
    assert set().union(*split.values()) == set(graph_sizes)


def test_real_metaqa_kb(shared_data: Path) -> None:
    rows = list(read_metaqa_kb_rows(shared_data / "metaqa" / "kb_reconstructed.txt.gz"))
    assert not [item for _, item in rows if isinstance(item, BadRow)]
    triples = [item for _, item in rows]
    assert len(triples) == len(set(triples)) == 129_413
    assert {r for _, r, _ in triples} == METAQA_RELATIONS


def test_real_metaqa_questions_and_split(shared_data: Path) -> None:
    split = read_metaqa_split(shared_data / "splits" / "metaqa_split.json.gz")
    expected_sizes = {
        1: (9_947, {"train": 6_962, "val": 994, "test": 1_991}),
        2: (14_872, {"train": 10_410, "val": 1_487, "test": 2_975}),
        3: (14_274, {"train": 9_991, "val": 1_427, "test": 2_856}),
    }
    for hops, (count, sizes) in expected_sizes.items():
        path = shared_data / "metaqa" / f"qa_test_{hops}hop.txt.gz"
        items = list(read_metaqa_questions(path, hops=hops, split_name="test"))
        assert Counter(type(x) for x in items) == {Question: count}
        assert {name: len(ids) for name, ids in split[hops].items()} == sizes
        assert sorted(i for ids in split[hops].values() for i in ids) == list(range(count))
        assert all(x.hops == hops and len(x.q_entities) == 1 for x in items)
