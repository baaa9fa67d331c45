"""Question splits (rg.data.splits): split files, seeded splits, stratified caps, selective reads."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace

import pytest

from rg.config import ConfigError, validate_config
from rg.data.rog import read_rog_selected, write_rog_parquet
from rg.data.sample import Sample
from rg.data.splits import (
    DuplicateIdError,
    SplitConfig,
    load_split_samples,
    read_question_split,
    seeded_split,
    stratified_sample,
)


def _sample(question_id: str, hops: int | None = None) -> Sample:
    return Sample(
        id=question_id,
        question=f"what about {question_id}?",
        answers=("b",),
        q_entities=("a",),
        a_entities=("b",),
        triples=(("a", "r", "b"),),
        hops=hops,
    )


@pytest.fixture
def metaqa_split_file(tmp_path):
    path = tmp_path / "metaqa_split.json.gz"
    data = {
        "unit": "0-based line index",
        "splits": {
            "1hop": {"train": [0, 1, 2, 3], "val": [4], "test": [5, 6]},
            "2hop": {"train": [0, 2, 4, 6], "val": [1], "test": [3]},
        },
    }
    with gzip.open(path, "wt") as handle:
        json.dump(data, handle)
    return path


def test_seeded_split_is_seeded_and_disjoint():
    ids = [f"q{i}" for i in range(10)]
    train, val = seeded_split(ids, 0.2, 0)
    assert len(val) == 2 and len(train) == 8 and not train & val
    assert seeded_split(list(reversed(ids)), 0.2, 0) == (train, val)
    assert seeded_split(ids, 0.2, 1) != (train, val)
    with pytest.raises(DuplicateIdError, match=r"question ids repeat in the input: 'a'\. Fix: give every question a unique id"):
        seeded_split(["a", "a", "b"], 0.2, 0)


def test_metaqa_file_maps_line_indices_to_ids_and_hop_groups(metaqa_split_file):
    split = read_question_split(metaqa_split_file)
    assert split.ids("test") == ["metaqa-1hop-test-5", "metaqa-1hop-test-6", "metaqa-2hop-test-3"]
    assert split.side["metaqa-2hop-test-1"] == "val"
    assert split.group["metaqa-2hop-test-6"] == "2hop"


def test_id_keyed_file(tmp_path):
    path = tmp_path / "split.json"
    path.write_text(json.dumps({"unit": "id", "splits": {"train": ["x", "y"], "test": ["z"]}}))
    split = read_question_split(path)
    assert split.ids("train") == ["x", "y"] and split.group["z"] == "all"
    path.write_text(json.dumps({"unit": "id", "splits": {"dev": ["x"]}}))
    with pytest.raises(ValueError, match=r"unknown split name\(s\) \['dev'\]"):
        read_question_split(path)


def test_stratified_sample_balances_groups_and_is_seeded():
    group = {f"a{i}": "1hop" for i in range(10)} | {f"b{i}": "2hop" for i in range(10)} | {"c0": "3hop"}
    chosen = stratified_sample(group, group, 7, seed=3)
    counts = {g: sum(group[i] == g for i in chosen) for g in ("1hop", "2hop", "3hop")}
    assert counts == {"1hop": 3, "2hop": 2, "3hop": 1}  # 7 = 3 + 2 + 2, but 3hop has only one
    assert stratified_sample(group, group, 7, seed=3) == chosen
    assert stratified_sample(group, group, 7, seed=4) != chosen


def test_caps_apply_per_side_from_the_file(metaqa_split_file):
    split = SplitConfig(file=str(metaqa_split_file), max_questions={"train": 4})
    sides = split.ids_from_file()
    assert len(sides["train"]) == 4
    assert sum(i.startswith("metaqa-1hop") for i in sides["train"]) == 2
    assert sides["test"] == {"metaqa-1hop-test-5", "metaqa-1hop-test-6", "metaqa-2hop-test-3"}


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="max_questions"):
        validate_config({"max_questions": {"dev": 3}}, SplitConfig)
    with pytest.raises(ConfigError, match="≥ 1"):
        validate_config({"max_questions": {"train": 0}}, SplitConfig)


def test_load_split_samples_reads_only_the_wanted_ids(metaqa_split_file, tmp_path):
    ids = [f"metaqa-1hop-test-{i}" for i in range(7)] + [f"metaqa-2hop-test-{i}" for i in range(5)]
    write_rog_parquet([_sample(i) for i in ids], tmp_path / "shard.parquet")
    split = SplitConfig(file=str(metaqa_split_file))
    sides = load_split_samples(str(tmp_path / "shard.parquet"), split, ("val", "test"))
    assert [s.id for s in sides["val"]] == ["metaqa-1hop-test-4", "metaqa-2hop-test-1"]
    assert [s.id for s in sides["test"]] == ["metaqa-1hop-test-5", "metaqa-1hop-test-6", "metaqa-2hop-test-3"]
    picked = list(read_rog_selected(tmp_path / "shard.parquet", {"metaqa-2hop-test-4", "nope"}))
    assert [s.id for s in picked] == ["metaqa-2hop-test-4"]
    full = picked[0]
    light = list(read_rog_selected(tmp_path / "shard.parquet", {"metaqa-2hop-test-4"}, graph=False))
    assert full.triples and light == [replace(full, triples=())]
    questions = load_split_samples(str(tmp_path / "shard.parquet"), split, ("val",), graph=False)["val"]
    assert [s.id for s in questions] == ["metaqa-1hop-test-4", "metaqa-2hop-test-1"]
    assert all(s.triples == () and s.question for s in questions)


def test_seeded_side_without_file_and_test_needs_a_file(tmp_path):
    samples = [_sample(f"q{i}", hops=1 + i % 2) for i in range(10)]
    write_rog_parquet(samples, tmp_path / "s.parquet")
    sides = load_split_samples(str(tmp_path / "s.parquet"), SplitConfig(val_fraction=0.3), ("train", "val", "all"))
    assert len(sides["val"]) == 3 and len(sides["train"]) == 7 and len(sides["all"]) == 10
    with pytest.raises(ValueError, match="needs `split.file`"):
        load_split_samples(str(tmp_path / "s.parquet"), SplitConfig(), ("test",))
