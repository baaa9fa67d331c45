"""Streamed planner input (rg.training.planner_stream): what Ray Data builds from the files equals
what the driver used to build from whole samples (``examples_on: driver``) — target counts,
tokenizer, initial weights and every training and validation example, in order — for each kind
of labels (weak rows by each rule, written by the job's weak-label step; refined rows), over two
input files; and the same seed trains the same planner both ways."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rg.privacy import KGSchema
from rg.data.splits import load_split_samples
from rg.data.labels import write_labels
from rg.jobs.weak_labels import WEAK_LABELS_DIR, weak_rows
from rg.supervision.labels import LabelConfig
from rg.jobs.train_planner import PlannerTrainConfig, _driver_input, _streamed_input, train_planner
from rg.training.shards import side_rows
from tests.synthetic_data import write_synthetic_parquet


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory):
    """60 synthetic questions (subgraphs capped at 150 triples) in two RoG parquet files, and the KB as TSV."""
    folder = tmp_path_factory.mktemp("planner_stream")
    first, second = folder / "a.parquet", folder / "b.parquet"
    syn = write_synthetic_parquet([first, second], questions=60, max_triples=150).data
    kb = folder / "kb.tsv"
    kb.write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in syn.triples))
    KGSchema.build(syn.triples, syn.entity_types).save(folder)  # the privacy view's clusters
    return [str(first), str(second)], str(kb)


def config(inputs, tmp_path, examples_on: str, **update) -> PlannerTrainConfig:
    data = {
        "input": inputs,
        "split": {"val_fraction": 0.25, "seed": 3},
        "limit": 25,
        "planner": {"tiny": {"layers": 1, "hidden": 32, "heads": 4, "max_positions": 48}, "max_prompt_tokens": 32,
                    "max_path_len": 3},
        "train": {"epochs": 1, "batch_size": 8, "lr": 0.005, "seed": 7},
        "max_paths_per_question": 2,
        "num_workers": 1,
        "run_name": f"planner_stream_{examples_on}",
        "storage_path": str(tmp_path / examples_on / "ray_results"),
        "output_dir": str(tmp_path / examples_on / "out"),
        "evaluation": {"side": None},
        "examples_on": examples_on,
    }
    for key, value in update.items():
        data[key] = value
    return PlannerTrainConfig.model_validate(data)


def _rows(ds) -> list:
    return [pickle.loads(row["example"]) for row in side_rows(ds)]


@pytest.mark.parametrize("mode", [
    # refined rows and weak rows side by side in the default suite; each weak rule only with -m slow
    # (the weak-label step has its own tests in test_training_stream.py), the privacy view too
    pytest.param("shortest", marks=pytest.mark.slow), pytest.param("answer_f1", marks=pytest.mark.slow),
    pytest.param("kb_vote_mask", marks=pytest.mark.slow), "refined",
    pytest.param("privacy_view", marks=pytest.mark.slow),  # 48 s; test_planner_view checks the view itself
    "paraphrases", "mask_names"])
def test_streamed_examples_equal_the_driver_built_ones(ray_local, two_inputs, tmp_path, monkeypatch, mode):
    inputs, kb = two_inputs
    update = {
        "shortest": {"labels": {"source": "weak"}},
        "answer_f1": {"labels": {"source": "weak", "weak": {"rule": "answer_f1"}}},
        "kb_vote_mask": {
            "labels": {"source": "weak", "weak": {"rule": "answer_f1", "kb": {"path": kb, "format": "tsv"}}},
            "target_consensus": True,
            "planner": {"tiny": {"layers": 1, "hidden": 32, "heads": 4, "max_positions": 48},
                        "max_prompt_tokens": 32, "max_path_len": 2, "mask_topics": True},
        },
        "refined": {"labels": {"source": "refined", "path": str(tmp_path / "labels"), "weak": {"rule": "answer_f1"}}},
        "privacy_view": {"labels": {"source": "weak"}, "view_schema_dir": str(Path(kb).parent)},
        "paraphrases": {"labels": {"source": "weak"}, "paraphrases": {"per_question": 2}},
        "mask_names": {"labels": {"source": "weak"}, "paraphrases": {"per_question": 1},
                       "planner": {"tiny": {"layers": 1, "hidden": 32, "heads": 4, "max_positions": 48},
                                   "max_prompt_tokens": 32, "max_path_len": 3, "mask_topics": True,
                                   "mask_names": {"kb": {"path": str(tmp_path / "tagged.tsv"), "format": "tsv"}}}},
    }[mode]
    if mode == "mask_names":  # the KB with a tag named "born", a word many questions write: the session masks it
        tagged = tmp_path / "tagged.tsv"
        tagged.write_text(Path(kb).read_text() + "some film\thas_tags\tborn\n")
    if mode == "refined":  # every other question refined, the rest kept weak (as the refine job's fallbacks)
        some = load_split_samples(inputs, config(inputs, tmp_path, "driver").split, ("train", "val"), limit=25)
        rows = list(weak_rows(some["train"] + some["val"], LabelConfig()).values())
        rows[::2] = [dataclasses.replace(r, source="refined", selector="test", fallback_reason=None) for r in rows[::2]]
        write_labels(rows, tmp_path / "labels" / "part-0.parquet")

    before = _driver_input(config(inputs, tmp_path, "driver", **update))
    # the streamed path never reads a subgraph on the driver, nor calls from_items
    import ray.data

    import rg.jobs.train_planner as planner_ray

    def questions_only(*args, **kwargs):
        assert kwargs.get("graph") is False, "the driver read samples with their subgraphs"
        return load_split_samples(*args, **kwargs)

    def refuse(*args, **kwargs):
        raise AssertionError("ray.data.from_items called on the streamed path")

    monkeypatch.setattr(planner_ray, "load_split_samples", questions_only)
    monkeypatch.setattr(ray.data, "from_items", refuse)
    after = _streamed_input(config(inputs, tmp_path, "ray_data", **update))
    monkeypatch.undo()

    assert (after.train_questions, after.val_questions) == (before.train_questions, before.val_questions)
    assert after.train_stats.to_dict() == before.train_stats.to_dict()
    assert after.val_stats.to_dict() == before.val_stats.to_dict()
    if mode == "kb_vote_mask":
        assert before.train_stats.outvoted > 0 and before.train_stats.capped > 0
    if mode == "refined":
        assert before.train_stats.by_source["weak"] > 0 and before.train_stats.by_source["refined"] > 0
    wrote = mode != "refined"  # weak labels: each config's own step wrote them into its output folder
    assert all((tmp_path / way / "out" / WEAK_LABELS_DIR).is_dir() == wrote for way in ("driver", "ray_data"))
    assert after.planner.tokenizer.get_vocab() == before.planner.tokenizer.get_vocab()
    assert after.planner.relations == before.planner.relations
    state_before, state_after = before.planner.state_dict(), after.planner.state_dict()
    assert state_after.keys() == state_before.keys()
    assert all(torch.equal(state_after[k], state_before[k]) for k in state_before)
    train_before, train_after = _rows(before.train), _rows(after.train)
    assert after.train_examples == len(train_after) == len(train_before) > 0
    assert train_after == train_before
    assert _rows(after.val) == _rows(before.val) and after.val_examples == before.val_examples
    assert after.train.columns() == ["example"]
    assert after.evaluation is None
    if mode == "paraphrases":  # each training question twice more in its template's other wordings; validation as is
        ids = [e.id for e in train_before]
        originals = [i for i in ids if "~p" not in i]
        assert {i for i in ids if i.endswith("~p1")} | {i for i in ids if i.endswith("~p2")} and len(ids) == 3 * len(
            originals)
        assert not any("~p" in e.id for e in _rows(before.val))
    if mode == "mask_names":  # the session's masking, built once on the driver, is what the examples show
        wording = before.planner.encoder.wording
        assert wording is not None and after.planner.encoder.wording is not None
        vocab = before.planner.tokenizer.get_vocab()
        assert {"<", "e", "n", ">"} <= vocab.keys() and "born" not in vocab and "Born" not in vocab
    if mode == "privacy_view":  # every path token is a relation cluster, and several relations share one
        schema = KGSchema.load(Path(kb).parent)
        relations = set(after.planner.relations)
        assert relations and relations <= set(schema.clusters.values())
        assert len(relations) < len({r for r in schema.clusters if schema.relation_cluster(r) in relations})


@pytest.mark.slow  # two Ray Train runs
def test_the_same_seed_trains_the_same_planner_both_ways(ray_local, two_inputs, tmp_path):
    inputs, _ = two_inputs
    update = {"labels": {"source": "weak", "weak": {"rule": "answer_f1"}}, "evaluation": {"side": "val", "beam_widths": [1]}}
    reports = {way: train_planner(config(inputs, tmp_path, way, **update)) for way in ("driver", "ray_data")}
    before, after = reports["driver"], reports["ray_data"]
    for key in ("train_questions", "val_questions", "train_targets", "val_targets", "train_examples", "val_examples",
                "vocab_size", "relation_tokens", "history", "evaluation"):
        if key == "history":
            assert [r["train_loss"] for r in after[key]] == [r["train_loss"] for r in before[key]]
            assert [r["val_loss"] for r in after[key]] == [r["val_loss"] for r in before[key]]
        elif key == "evaluation":
            drop = ("questions_per_s", "seconds", "cpu_seconds")
            strip = lambda rows: [{k: v for k, v in r.items() if k not in drop} for r in rows]  # noqa: E731
            assert strip(after[key]["scores"]) == strip(before[key]["scores"])
            assert (before[key]["scored_on"], after[key]["scored_on"]) == ("driver", "ray_data")
        else:
            assert after[key] == before[key], key
    adapters = [load_file(f"{r['planner_dir']}/adapter/adapter_model.safetensors") for r in (before, after)]
    assert adapters[0].keys() == adapters[1].keys()
    assert all(torch.equal(adapters[0][k], adapters[1][k]) for k in adapters[0])


def test_with_paraphrases_adds_the_families_other_wordings_with_the_same_paths():
    from rg.data.paraphrase import synthetic_bank
    from rg.training.planner_data import PlanTarget, with_paraphrases

    asked = PlanTarget("q1", "Who directed Heat?", (("film.film.directed_by",),), "weak", ("Heat",))
    unknown = PlanTarget("q2", "Tell me about Heat", (("film.film.genre",),), "weak", ("Heat",))
    out = with_paraphrases([asked, unknown], synthetic_bank(), per_question=5)
    assert [(t.id, t.question) for t in out] == [
        ("q1", "Who directed Heat?"),
        ("q1~p1", "Which person directed the film Heat?"), ("q1~p2", "Who was the director of Heat?"),
        ("q2", "Tell me about Heat")]  # a wording no family holds gets no copy
    assert {t.relation_paths for t in out[:3]} == {(("film.film.directed_by",),)}
    assert [t.id for t in with_paraphrases([asked], synthetic_bank(), per_question=1)] == ["q1", "q1~p1"]
