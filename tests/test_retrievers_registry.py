"""Retriever registry and checkpoints (rg.retrievers.registry, rg.retrievers.base): building by
kind, errors that name the known kinds, top-K ranking, and a save/load round trip run through
one shared test class for every registered kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rg.config import ConfigError
from rg.retrievers import (
    REGISTRY,
    CheckpointMeta,
    EmbeddingTables,
    MLPConfig,
    MLPRetriever,
    PNAConfig,
    QuestionGraph,
    Retriever,
    UnknownRetrieverError,
    build_retriever,
    collate,
    load_retriever,
    rank_triples,
    read_meta,
)

DIM = 8
GRAPHS = [
    QuestionGraph(
        id="a",
        question=0,
        entity_text=torch.tensor([0, -1, 2]),
        topic=torch.tensor([True, False, False]),
        head=torch.tensor([0, 1, 0]),
        rel=torch.tensor([0, 1, 1]),
        tail=torch.tensor([1, 2, 2]),
        labels=torch.tensor([1.0, 0.0, 0.0]),
    ),
    QuestionGraph(
        id="b",
        question=1,
        entity_text=torch.tensor([1, 3]),
        topic=torch.tensor([False, True]),
        head=torch.tensor([1]),
        rel=torch.tensor([0]),
        tail=torch.tensor([0]),
        labels=torch.tensor([1.0]),
    ),
]
TABLES = EmbeddingTables(
    entities=torch.randn(4, DIM, generator=torch.Generator().manual_seed(0)),
    relations=torch.randn(2, DIM, generator=torch.Generator().manual_seed(1)),
    questions=torch.randn(2, DIM, generator=torch.Generator().manual_seed(2)),
)
TINY = {"mlp": {"text_dim": DIM, "hidden": 8}, "pna": {"text_dim": DIM, "hidden": 8, "num_layers": 2}}


class TestRegistry:
    def test_kinds(self) -> None:
        assert sorted(REGISTRY) == ["mlp", "pna"]
        assert REGISTRY["mlp"].config_class is MLPConfig
        assert REGISTRY["pna"].config_class is PNAConfig

    def test_registry_is_read_only(self) -> None:
        with pytest.raises(TypeError):
            REGISTRY["gnn"] = REGISTRY["mlp"]  # type: ignore[index]

    def test_unknown_kind_names_the_known_kinds(self) -> None:
        with pytest.raises(UnknownRetrieverError, match=r"'gnn'.*\['mlp', 'pna'\]"):
            build_retriever("gnn")

    def test_mapping_config_is_validated(self) -> None:
        model = build_retriever("mlp", {"text_dim": DIM, "hidden": 12})
        assert isinstance(model, MLPRetriever) and model.config.hidden == 12
        with pytest.raises(ConfigError, match="hiden"):
            build_retriever("mlp", {"hiden": 12})

    def test_config_of_another_kind_is_refused(self) -> None:
        with pytest.raises(TypeError, match="MLPConfig"):
            build_retriever("mlp", PNAConfig())


class TestRanking:
    def test_top_k_per_question_with_stable_ties(self) -> None:
        logits = torch.tensor([0.1, 0.9, 0.1, 0.5, 2.0, -1.0])
        ranked = rank_triples(logits, torch.tensor([0, 4, 4, 6]), k=3)
        assert [r.indices.tolist() for r in ranked] == [[1, 3, 0], [], [0, 1]]
        assert ranked[0].scores.tolist() == pytest.approx([0.9, 0.5, 0.1])

    def test_k_must_be_positive(self) -> None:
        with pytest.raises(ValueError, match="k"):
            rank_triples(torch.zeros(2), torch.tensor([0, 2]), k=0)


@pytest.mark.parametrize("kind", sorted(REGISTRY))
class TestEveryKind:
    def build(self, kind: str) -> Retriever:
        torch.manual_seed(0)
        return build_retriever(kind, TINY[kind], train_graphs=GRAPHS)

    def test_forward_loss_retrieve(self, kind: str) -> None:
        model = self.build(kind)
        batch = collate(GRAPHS)
        assert model(batch, TABLES).shape == (4,)
        assert model.loss(batch, TABLES).ndim == 0
        ranked = model.eval().retrieve(batch, TABLES, k=2)
        assert [len(r.indices) for r in ranked] == [2, 1]

    def test_save_load_round_trip(self, kind: str, tmp_path: Path) -> None:
        model = self.build(kind).eval()
        meta = CheckpointMeta(
            label_source="refined", encoder_model_id="enc==1", prompt_ids=("select-v1",), extra={"epoch": 3}
        )
        model.save(tmp_path / "ckpt", meta)
        assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["config.json", "meta.json", "model.pt"]
        assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["kind"] == kind
        loaded = load_retriever(tmp_path / "ckpt")
        assert type(loaded.model) is type(model)
        assert loaded.model.config == model.config
        assert loaded.meta == meta.model_copy(update={"kind": kind})
        assert read_meta(tmp_path / "ckpt").label_source == "refined"
        batch = collate(GRAPHS)
        assert torch.equal(loaded.model(batch, TABLES), model(batch, TABLES))

    def test_loading_as_the_wrong_class_fails(self, kind: str, tmp_path: Path) -> None:
        self.build(kind).save(tmp_path)
        other = next(spec.model_class for name, spec in REGISTRY.items() if name != kind)
        with pytest.raises(ValueError, match="load_retriever"):
            other.load(tmp_path)


def test_load_from_a_folder_without_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a retriever checkpoint"):
        load_retriever(tmp_path)


def test_the_mlp_path_does_not_import_pyg_until_pna_is_built():
    """Every QA actor and training worker imports the registry; only a PNA model needs PyTorch Geometric."""
    import subprocess
    import sys

    code = ("import sys; import rg.jobs.evaluate_qa, rg.jobs.train_retriever; from rg.retrievers import build_retriever; "
            "build_retriever('mlp'); print('torch_geometric' in sys.modules); "
            "from rg.retrievers.registry import retriever_spec; retriever_spec('pna').model_class; "
            "print('torch_geometric' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
