"""rg.data.streaming's maps: a class built per actor or per batch, rows kept in input order."""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pytest
import ray
from ray import cloudpickle

from rg.data.streaming import map_in_order


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the Ray workers cannot import a test module


class _Tally:
    """Marks each row with how many batches this instance has mapped and the process that built it."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.batches = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        self.batches += 1
        values = batch.column("x").to_pylist()
        return pa.table({
            "y": [v + self.offset for v in values],
            "batches": [self.batches] * len(values),
            "pid": [os.getpid()] * len(values),
        })


@pytest.mark.parametrize("setup", ["per_actor", "per_batch"])
def test_a_map_keeps_input_order_and_builds_its_class_where_it_is_told(ray_local, setup):
    ds = ray.data.from_items([{"x": i} for i in range(40)], override_num_blocks=8)
    rows = map_in_order(ds, 40, _Tally, {"offset": 100}, batch_rows=5, setup=setup).take_all()

    assert [r["y"] for r in rows] == list(range(100, 140))
    if setup == "per_batch":
        assert {r["batches"] for r in rows} == {1}  # a fresh instance for every batch
    else:
        # each actor maps several of the 8 batches with the instance it built once
        assert max(r["batches"] for r in rows) > 1
        assert len({r["pid"] for r in rows}) <= 2  # the pool never outgrows the CPUs


def test_count_input_counts_what_read_input_gives_without_a_ray_job(tmp_path):
    import pyarrow.parquet as pq

    from rg.data.streaming import count_input

    folder = tmp_path / "shards"
    folder.mkdir()
    pq.write_table(pa.table({"id": ["a", "b", "c"]}), folder / "shard-00000.parquet")
    pq.write_table(pa.table({"id": ["d", "e"]}), folder / "shard-00001.parquet")
    assert count_input(str(folder), None) == 5
    assert count_input(str(folder), None, frozenset({"b", "e", "z"})) == 2  # "z" is in no file
    assert count_input(str(folder), 4) == 4  # the first four in file order
    assert count_input(str(folder), 4, frozenset({"a", "e"})) == 2
    (tmp_path / "questions.jsonl").write_text('{"id": "a"}\n')
    assert count_input(str(tmp_path / "questions.jsonl"), None) is None  # only a full parse would count it


def test_auto_builds_examples_on_the_driver_only_for_small_local_inputs(tmp_path, monkeypatch):
    from rg.data import streaming
    from tests.synthetic_data import write_synthetic_parquet

    shards = tmp_path / "shards"
    shards.mkdir()
    write_synthetic_parquet([shards / "a.parquet", shards / "b.parquet"], questions=16, max_triples=50)
    size = sum(f.stat().st_size for f in shards.glob("*.parquet"))
    assert streaming.examples_on("auto", str(shards)) == "driver"
    assert streaming.examples_on("auto", [str(shards / "a.parquet"), str(shards / "b.parquet")]) == "driver"
    assert streaming.examples_on("ray_data", str(shards)) == "ray_data"  # an explicit setting is kept
    assert streaming.examples_on("driver", "s3://bucket/shards") == "driver"
    assert streaming.examples_on("auto", ["s3://bucket/shards", str(shards)]) == "ray_data"  # remote: streamed
    monkeypatch.setattr(streaming, "AUTO_DRIVER_MB", (size - 1) / 2**20)  # one byte under both shards
    assert streaming.examples_on("auto", str(shards)) == "ray_data"
    assert streaming.examples_on("auto", str(shards / "a.parquet")) == "driver"
