"""The Labels record (rg.supervision.labels): row round trip, validation, parquet files
(one file and a folder of parts) and the weak fallback."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rg.data.sample import Sample
from rg.graph import KnowledgeGraph
from rg.supervision.candidates import build_pool
from rg.data.labels import LABELS_SCHEMA, Labels, iter_labels, read_labels, write_labels
from rg.supervision.labels import weak_fallback
from rg.supervision.weak import weak_labels

REFINED = Labels(
    id="q1",
    positive_triples=(0, 1),
    paths=("Film A → [directed_by] → Ann", "Film A → [directed_by] → Bob"),
    relation_paths=(("directed_by",),),
    source="refined",
    selector="llm:test-model",
    prompt_id="select_paths/1",
    fallback_reason=None,
    prompt_tokens=120,
    completion_tokens=7,
    pool_before=11,
    pool_after=9,
)
WEAK = Labels(
    id="q2",
    positive_triples=(),
    paths=(),
    relation_paths=(),
    source="weak",
    selector="similarity:enc",
    fallback_reason="empty_pool",
)


class TestRecord:
    def test_row_round_trip(self) -> None:
        row = REFINED.to_row()
        assert row["relation_paths"] == [["directed_by"]]
        assert set(row) == set(LABELS_SCHEMA.names)
        assert Labels.from_row(row) == REFINED
        assert Labels.from_row(WEAK.to_row()) == WEAK

    def test_source_and_reason_must_agree(self) -> None:
        with pytest.raises(ValueError, match="fallback_reason must be None exactly when"):
            Labels(id="x", positive_triples=(), paths=(), relation_paths=(), source="weak", selector="s")
        with pytest.raises(ValueError, match="fallback_reason must be None exactly when"):
            Labels(
                id="x", positive_triples=(), paths=(), relation_paths=(), source="refined", selector="s",
                fallback_reason="parse_error",
            )
        with pytest.raises(ValueError, match="source must be one of"):
            Labels(
                id="x", positive_triples=(), paths=(), relation_paths=(), source="gold", selector="s"  # type: ignore[arg-type]
            )

    def test_from_row_names_missing_columns(self) -> None:
        row = REFINED.to_row()
        del row["selector"], row["pool_after"]
        with pytest.raises(ValueError, match=r"lacks column\(s\) \['selector', 'pool_after'\]"):
            Labels.from_row(row)


class TestParquet:
    def test_file_round_trip_with_explicit_schema(self, tmp_path: Path) -> None:
        path = tmp_path / "sub" / "labels.parquet"
        assert write_labels([REFINED, WEAK], path) == 2
        assert read_labels(path) == [REFINED, WEAK]
        assert pq.read_schema(path).remove_metadata() == LABELS_SCHEMA
        assert [p.name for p in path.parent.iterdir()] == ["labels.parquet"]  # no temp file left

    def test_small_batches_and_empty_file(self, tmp_path: Path) -> None:
        rows = [REFINED, WEAK, REFINED]
        assert write_labels(iter(rows), tmp_path / "a.parquet", batch_size=2) == 3
        assert read_labels(tmp_path / "a.parquet") == rows
        assert write_labels([], tmp_path / "empty.parquet") == 0
        assert read_labels(tmp_path / "empty.parquet") == []

    def test_folder_of_parts_in_name_order(self, tmp_path: Path) -> None:
        write_labels([WEAK], tmp_path / "part-001.parquet")
        write_labels([REFINED], tmp_path / "part-000.parquet")
        (tmp_path / ".part-002.parquet.123.tmp").write_bytes(b"unfinished")
        (tmp_path / ".hidden.parquet").write_bytes(b"unfinished")
        (tmp_path / "notes.txt").write_text("ignored")
        assert read_labels(tmp_path) == [REFINED, WEAK]
        assert [label.id for label in iter_labels(tmp_path)] == ["q1", "q2"]

    def test_rewrite_replaces_the_file(self, tmp_path: Path) -> None:
        path = tmp_path / "labels.parquet"
        write_labels([REFINED, WEAK], path)
        write_labels([WEAK], path)
        assert read_labels(path) == [WEAK]

    def test_errors(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError, match="does not exist"):
            read_labels(tmp_path / "absent.parquet")
        with pytest.raises(FileNotFoundError, match="holds no .parquet label files"):
            read_labels(tmp_path)
        pq.write_table(pa.table({"id": ["x"]}), tmp_path / "other.parquet")
        with pytest.raises(ValueError, match="not a labels file"):
            read_labels(tmp_path / "other.parquet")


def test_weak_fallback_copies_weak_labels_and_pool_sizes() -> None:
    sample = Sample(
        id="q7",
        question="who directed Film A",
        answers=("Ann",),
        q_entities=("Film A",),
        a_entities=("Ann",),
        triples=(("Film A", "directed_by", "Ann"), ("Ann", "won", "Film A"), ("Film A", "year", "1999")),
    )
    kg = KnowledgeGraph.from_triples(sample.triples)
    weak = weak_labels(sample, kg=kg)
    pool = build_pool(kg, sample, weak)
    labels = weak_fallback(
        "q7", weak, pool, "parse_error", "llm:m", prompt_id="p/1", prompt_tokens=50, completion_tokens=3
    )
    assert labels == Labels(
        id="q7",
        positive_triples=(0, 1),
        paths=("Film A → [directed_by] → Ann", "Film A ← [won] ← Ann"),
        relation_paths=(("directed_by",), ("won^-1",)),
        source="weak",
        selector="llm:m",
        prompt_id="p/1",
        fallback_reason="parse_error",
        prompt_tokens=50,
        completion_tokens=3,
        pool_before=pool.size_before,
        pool_after=pool.size_after,
    )
    assert (pool.size_before, pool.size_after) == (2 + 3 + 2, 2 + 3 + 2)
    assert weak_fallback("q7", weak, None, "empty_pool", "s").pool_before == 0
    with pytest.raises(ValueError, match="non-empty reason"):
        weak_fallback("q7", weak, pool, "", "s")
