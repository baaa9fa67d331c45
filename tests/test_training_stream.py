"""Streamed training input: the weak-label step (rg.jobs.weak_labels) writes, through Ray Data over the
files, the rows computed in memory for each weak rule, once; and the graphs Ray Data builds from a labels
folder (rg.training.graph_stream) equal what the driver builds from whole samples — tables, index, every
training and validation graph, in order — over two input files."""

from __future__ import annotations

import pytest
import torch

from rg.data.labels import labels_by_id, write_labels
from rg.data.splits import SplitConfig, load_split_samples
from rg.jobs.weak_labels import WEAK_LABELS_DIR, labels_path, weak_rows
from rg.retrievers.graphs import QuestionGraph
from rg.retrievers.inputs import build_tables, question_graphs
from rg.supervision.labels import VOTED_SELECTOR, LabelConfig
from rg.training.graph_stream import held_training_graphs, iter_graphs, stream_training_graphs, trainable
from rg.training.shards import HeldRows, shard_rows, worker_share
from tests.synthetic_data import HashEncoder, write_synthetic_parquet


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory):
    """60 synthetic questions (subgraphs capped at 150 triples) in two RoG parquet files, and the KB as TSV."""
    folder = tmp_path_factory.mktemp("stream")
    first, second = folder / "a.parquet", folder / "b.parquet"
    syn = write_synthetic_parquet([first, second], questions=60, max_triples=150).data
    kb = folder / "kb.tsv"
    kb.write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in syn.triples))
    return [str(first), str(second)], str(kb)


def _same_graph(a: QuestionGraph, b: QuestionGraph) -> bool:
    fields = ("entity_text", "topic", "head", "rel", "tail", "answers")
    labels = (a.labels is None and b.labels is None) or (
        a.labels is not None and b.labels is not None and torch.equal(a.labels, b.labels)
    )
    return (
        a.id == b.id
        and a.question == b.question
        and a.num_answers == b.num_answers
        and labels
        and all(torch.equal(getattr(a, f), getattr(b, f)) for f in fields)
    )


@pytest.mark.parametrize("mode", [
    # the whole-KB search and the template vote only with -m slow (each costs two to four Ray Data passes)
    "weak", pytest.param("answer_f1_kb", marks=pytest.mark.slow), pytest.param("template_vote", marks=pytest.mark.slow)])
def test_the_weak_label_step_writes_the_in_memory_rows_once(ray_local, two_inputs, tmp_path, mode):
    inputs, kb = two_inputs
    labels = {
        "weak": LabelConfig(),
        "answer_f1_kb": LabelConfig(weak={"rule": "answer_f1", "kb": {"path": kb, "format": "tsv"}}),
        "template_vote": LabelConfig(weak={"rule": "answer_f1"}, template_vote=True),
    }[mode]
    sides = load_split_samples(inputs, SplitConfig(val_fraction=0.25, seed=3), ("train", "val"), limit=25)
    train, val = sides["train"], sides["val"]
    ids = {"train": [s.id for s in train], "val": [s.id for s in val]}

    folder = labels_path(labels, inputs, ids, tmp_path)
    expected = weak_rows(train + val, labels, train_ids=set(ids["train"]))
    assert folder == str((tmp_path / WEAK_LABELS_DIR).resolve())
    assert labels_by_id(folder) == expected
    assert all(r.source == "weak" for r in expected.values()) and any(r.positive_triples for r in expected.values())
    if mode == "template_vote":
        assert {r.selector for r in expected.values()} == {VOTED_SELECTOR}

    parts = sorted((tmp_path / WEAK_LABELS_DIR).glob("*.parquet"))
    written = [p.stat().st_mtime_ns for p in parts]
    assert labels_path(labels, inputs, ids, tmp_path) == folder  # the same settings and questions: reused
    assert [p.stat().st_mtime_ns for p in parts] == written
    fewer = {"train": ids["train"][:-1], "val": ids["val"]}  # other questions: written again
    labels_path(labels, inputs, fewer, tmp_path)
    assert set(labels_by_id(folder)) == set(fewer["train"] + fewer["val"])


@pytest.mark.parametrize("template_vote", [False, True])
def test_held_samples_give_the_rows_of_the_ray_data_pass_without_ray(two_inputs, tmp_path, template_vote, monkeypatch):
    import rg.jobs.weak_labels as weak_labels

    def no_pass(*args, **kwargs):
        raise AssertionError("a Ray Data pass started although the samples were held")

    monkeypatch.setattr(weak_labels, "read_side", no_pass)
    inputs, _ = two_inputs
    labels = LabelConfig(weak={"rule": "answer_f1"}, template_vote=template_vote)
    sides = load_split_samples(inputs, SplitConfig(val_fraction=0.25, seed=3), ("train", "val"), limit=25)
    ids = {"train": [s.id for s in sides["train"]], "val": [s.id for s in sides["val"]]}
    held = list(reversed(sides["val"] + sides["train"]))  # any order: the rows follow `sides`

    folder = labels_path(labels, inputs, ids, tmp_path, samples=held)
    assert labels_by_id(folder) == weak_rows(held, labels, train_ids=set(ids["train"]))
    assert [r.id for r in labels_by_id(folder).values()][:3] == ids["train"][:3]
    with pytest.raises(ValueError, match="1 question\\(s\\) were not read back from the samples given"):
        labels_path(labels, inputs, {"train": ids["train"], "val": ids["val"] + ["q-absent"]}, tmp_path, samples=held)


def test_the_step_computes_nothing_for_refined_labels(tmp_path):
    refined = LabelConfig(source="refined", path=str(tmp_path / "labels"))
    assert labels_path(refined, ["unused.parquet"], {"train": ["q"]}, tmp_path) == str((tmp_path / "labels").resolve())
    assert not (tmp_path / WEAK_LABELS_DIR).exists()
    with pytest.raises(ValueError, match="labels.path"):
        weak_rows([], refined)


def test_streamed_and_held_graphs_equal_the_driver_built_ones(ray_local, two_inputs, tmp_path):
    inputs, _ = two_inputs
    split = SplitConfig(val_fraction=0.25, seed=3)

    # before: whole samples on the driver
    sides = load_split_samples(inputs, split, ("train", "val"), limit=25)
    train, val = sides["train"], sides["val"]
    rows = weak_rows(train + val, LabelConfig(weak={"rule": "answer_f1"}))
    write_labels(rows.values(), tmp_path / "labels" / "part-0.parquet")
    tables, index = build_tables(train + val, HashEncoder(dim=4))
    train_graphs = [g for g in question_graphs(train, index, rows) if trainable(g, True)]
    val_graphs = question_graphs(val, index, rows)

    # after: questions without subgraphs on the driver, graphs built by Ray Data
    light = load_split_samples(inputs, split, ("train", "val"), limit=25, graph=False)
    assert [s.id for s in light["train"]] == [s.id for s in train] and all(not s.triples for s in light["train"])
    streamed = stream_training_graphs(inputs, light["train"], light["val"], str(tmp_path / "labels"),
                                      HashEncoder(dim=4), True)

    # and the small-input path (examples_on: driver): the same from the whole samples, without a Ray Data pass
    held = held_training_graphs(train, val, str(tmp_path / "labels"), HashEncoder(dim=4), True)
    assert isinstance(held.train, HeldRows) and isinstance(held.val, HeldRows)
    assert streamed.train.num_blocks() == streamed.val.num_blocks() == 1  # the layout HeldRows' shares follow

    for built in (streamed, held):
        assert built.index == index
        for name in ("entities", "relations", "questions"):
            assert torch.equal(getattr(built.tables, name), getattr(tables, name))
        assert built.train_usable == len(train_graphs) > 0
        got_train, got_val = list(iter_graphs(built.train)), list(iter_graphs(built.val))
        assert [g.id for g in got_train] == [g.id for g in train_graphs]
        assert [g.id for g in got_val] == [g.id for g in val_graphs]
        assert all(_same_graph(a, b) for a, b in zip(got_train, train_graphs))
        assert all(_same_graph(a, b) for a, b in zip(got_val, val_graphs))
    assert streamed.train.columns() == ["graph"] and list(held.train.all_rows()[0]) == ["graph"]


def test_missing_labels_fail_on_the_driver_before_any_graph(ray_local, two_inputs, tmp_path):
    inputs, _ = two_inputs
    light = load_split_samples(inputs, SplitConfig(seed=3), ("train", "val"), limit=10, graph=False)
    some = light["train"][:3]
    full = load_split_samples(inputs, SplitConfig(seed=3), ("train",), limit=10)["train"][:3]
    assert [s.id for s in some] == [s.id for s in full]
    write_labels(weak_rows(full, LabelConfig()).values(), tmp_path / "labels" / "part-0.parquet")
    missing = len(light["train"]) + len(light["val"]) - 3
    with pytest.raises(KeyError, match=rf"{missing} sample\(s\) have no labels"):
        stream_training_graphs(inputs, light["train"], light["val"], str(tmp_path / "labels"), HashEncoder(dim=4), True)


def test_a_duplicate_id_across_inputs_is_refused(ray_local, two_inputs, tmp_path):
    inputs, _ = two_inputs
    light = load_split_samples(inputs[:1], SplitConfig(seed=3), ("train", "val"), graph=False)
    full = load_split_samples(inputs[:1], SplitConfig(seed=3), ("train", "val"))
    write_labels(weak_rows(full["train"] + full["val"], LabelConfig()).values(), tmp_path / "labels" / "part-0.parquet")
    again = [inputs[0], inputs[0]]  # every question twice in the files the graphs are read from
    with pytest.raises(ValueError, match="occurs twice"):
        stream_training_graphs(again, light["train"], light["val"], str(tmp_path / "labels"), HashEncoder(dim=4), True)


def test_held_rows_give_each_worker_what_a_one_block_dataset_gives(ray_local, tmp_path):
    import json
    import pickle

    import ray.data

    from rg.jobs.harness import TrainRunConfig, fit_run

    def shares_loop(config: dict) -> None:  # defined here: Ray pickles it by value (workers cannot import tests)
        """Ray Train worker: write what this rank reads of each side, through Ray Data and through HeldRows."""
        import ray.train

        rank = ray.train.get_context().get_world_rank()
        got = {name: shard_rows(config, name, "n") for name in ("data_split", "held_split", "data_whole", "held_whole")}
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(got))

    rows = [{"n": pickle.dumps(i)} for i in range(11)]  # odd: equal shares leave the last row to no worker
    one_block = ray.data.from_items(rows, override_num_blocks=1).materialize()
    cfg = TrainRunConfig(num_workers=2, run_name="shares", output_dir=str(tmp_path / "out"))
    datasets = {"data_split": one_block, "held_split": HeldRows.put(rows),
                "data_whole": one_block, "held_whole": HeldRows.put(rows)}
    fit_run(cfg, shares_loop, {}, storage=str(tmp_path / "runs"), datasets=datasets,
            metric="none", split=("data_split", "held_split"))
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert got[0]["data_split"] == list(range(5)) and got[1]["data_split"] == list(range(5, 10))
    for rank in (0, 1):
        assert got[rank]["held_split"] == got[rank]["data_split"] == worker_share(list(range(11)), rank, 2)
        assert got[rank]["held_whole"] == got[rank]["data_whole"] == list(range(11))
