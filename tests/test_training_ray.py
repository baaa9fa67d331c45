"""Ray Train retriever training (rg.training.ray_train): 2 CPU workers under DDP, the best
checkpoint exported and loadable, and a resubmitted run resuming from its latest checkpoint."""

from __future__ import annotations

import json

import pytest

from rg.data.rog import write_rog_parquet
from rg.data.subgraphs import SubgraphConfig, Unbuildable, build_sample
from rg.data.synthetic import SyntheticConfig, generate
from rg.graph.kg import KnowledgeGraph
from rg.retrievers.registry import load_retriever
from rg.text.encoder import EncoderConfig
from rg.training.data import split_ids
from rg.training.ray_train import REPORT_FILE, TrainJobConfig, train_retriever


@pytest.fixture(scope="module")
def synthetic_parquet(tmp_path_factory):
    """40 synthetic questions with subgraphs capped at 200 triples, as one RoG parquet file."""
    syn = generate(SyntheticConfig(questions=40))
    kg = KnowledgeGraph.from_triples(syn.triples)
    samples = []
    for question in syn.questions:
        try:
            samples.append(build_sample(kg, question, SubgraphConfig(max_triples=200)).sample)
        except Unbuildable:
            continue
    path = tmp_path_factory.mktemp("rog") / "synthetic.parquet"
    write_rog_parquet(samples, path)
    return path


@pytest.fixture(scope="module")
def encoder_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("encoder_cache")


def test_split_is_seeded_and_disjoint():
    ids = [f"q{i}" for i in range(10)]
    train, val = split_ids(ids, 0.2, 0)
    assert len(val) == 2 and len(train) == 8 and not train & val
    assert split_ids(list(reversed(ids)), 0.2, 0) == (train, val)
    assert split_ids(ids, 0.2, 1) != (train, val)


@pytest.mark.parametrize(
    "retriever", [{"kind": "mlp", "hidden": 16}, {"kind": "pna", "hidden": 8, "num_layers": 1}], ids=["mlp", "pna"]
)
def test_train_export_and_resume(ray_local, synthetic_parquet, encoder_cache, tmp_path, retriever):
    def config(epochs: int) -> TrainJobConfig:
        return TrainJobConfig.model_validate(
            {
                "input": str(synthetic_parquet),
                "retriever": retriever,
                "encoder": EncoderConfig(cache_dir=str(encoder_cache)),
                "train": {"epochs": epochs, "questions_per_batch": 4, "eval_ks": (10, 100)},
                "num_workers": 2,
                "run_name": f"test_{retriever['kind']}",
                "storage_path": str(tmp_path / "ray_results"),
                "keep_checkpoints": 1,
                "output_dir": str(tmp_path / "out"),
            }
        )

    first = train_retriever(config(2))
    assert first["resumed"] is False and first["start_epoch"] == 0 and first["epochs_run"] == [0, 1]
    assert first["train_questions"] + first["val_questions"] == first["questions"]
    assert first["val_questions"] == round(0.2 * first["questions"])
    for row in first["history"]:
        for key in ("val_triple_recall@10", "val_triple_recall@100", "val_answer_recall@100", "train_loss"):
            assert key in row
        assert row["world_size"] == 2
    assert first["metric"] == "val_triple_recall@100"
    assert first["best_epoch"] in (0, 1)
    best_row = first["history"][first["best_epoch"]]
    assert first["best_value"] == pytest.approx(best_row["val_triple_recall@100"])
    assert first["best_value"] == max(r["val_triple_recall@100"] for r in first["history"])

    loaded = load_retriever(first["retriever_dir"])
    assert loaded.meta.kind == retriever["kind"]
    assert loaded.meta.label_source == "weak"
    assert loaded.meta.encoder_model_id == first["encoder_model_id"]
    assert loaded.meta.extra["epoch"] == first["best_epoch"]
    if retriever["kind"] == "pna":
        assert loaded.model.config.deg is not None
    assert json.loads((tmp_path / "out" / REPORT_FILE).read_text())["run_name"] == f"test_{retriever['kind']}"

    second = train_retriever(config(3))
    assert second["resumed"] is True and second["start_epoch"] == 2 and second["epochs_run"] == [2]
    assert [int(row["epoch"]) for row in second["history"]] == [0, 1, 2]
    assert second["history"][:2] == first["history"]
    assert second["best_value"] == max(r["val_triple_recall@100"] for r in second["history"])
