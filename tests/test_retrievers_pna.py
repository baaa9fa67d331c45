"""PNA entity retriever (rg.retrievers.pna): edge convention and the in-degree histogram on a
hand-made graph, forward shapes, triple score = p(h) + p(t), the entity-level loss, optimizer steps
that lower the loss, and merging parallel relations."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.utils import degree

from rg.retrievers import EmbeddingTables, PNAConfig, PNARetriever, QuestionGraph, build_retriever, collate
from rg.retrievers.pna import degree_histogram, entity_targets, merge_parallel, message_edges

DIM = 8


def graph(
    gid: str, triples: list[tuple[int, int, int]], topic: list[int], num_entities: int, positives: tuple[int, ...] = ()
) -> QuestionGraph:
    head, rel, tail = (torch.tensor(c, dtype=torch.long) for c in zip(*triples))
    labels = torch.zeros(len(triples))
    labels[list(positives)] = 1.0
    return QuestionGraph(
        id=gid,
        question=0,
        entity_text=torch.arange(num_entities),
        topic=torch.tensor([e in topic for e in range(num_entities)]),
        head=head,
        rel=rel,
        tail=tail,
        labels=labels,
    )


TRIANGLE = graph("t", [(0, 0, 1), (0, 1, 2), (1, 0, 2)], topic=[0], num_entities=3, positives=(1,))
PATH = graph("p", [(0, 0, 1), (1, 1, 2), (2, 0, 3)], topic=[0], num_entities=4)
TABLES = EmbeddingTables(
    entities=torch.randn(4, DIM, generator=torch.Generator().manual_seed(0)),
    relations=torch.randn(2, DIM, generator=torch.Generator().manual_seed(1)),
    questions=torch.randn(1, DIM, generator=torch.Generator().manual_seed(2)),
)


def tiny(**overrides: object) -> PNARetriever:
    torch.manual_seed(0)
    config = PNAConfig(text_dim=DIM, hidden=8, **overrides)  # type: ignore[arg-type]
    return PNARetriever(PNARetriever.prepare_config(config, [TRIANGLE, PATH]))  # type: ignore[arg-type]


class TestEdgesAndDegree:
    def test_forward_then_reverse_edges(self) -> None:
        edge_index, edge_rel, reverse = message_edges(TRIANGLE.head, TRIANGLE.rel, TRIANGLE.tail, True)
        assert edge_index.tolist() == [[0, 0, 1, 1, 2, 2], [1, 2, 2, 0, 0, 1]]
        assert edge_rel.tolist() == [0, 1, 0, 0, 1, 0]
        assert reverse.tolist() == [False, False, False, True, True, True]

    def test_histogram_by_hand(self) -> None:
        # h→t only: in-degrees (0, 1, 2); with reverse edges every node of the triangle has 2.
        assert degree_histogram([TRIANGLE], reverse_edges=False) == (1, 1, 1)
        assert degree_histogram([TRIANGLE], reverse_edges=True) == (0, 0, 3)
        # path 0→1→2→3: in (0, 1, 1, 1); with reverse (1, 2, 2, 1)
        assert degree_histogram([TRIANGLE, PATH], reverse_edges=False) == (2, 4, 1)
        assert degree_histogram([TRIANGLE, PATH], reverse_edges=True) == (0, 2, 5)

    @pytest.mark.parametrize("reverse_edges", [False, True])
    def test_histogram_matches_the_forward_edges_of_a_batch(self, reverse_edges: bool) -> None:
        batch = collate([TRIANGLE, PATH])
        edge_index, _, _ = message_edges(batch.head, batch.rel, batch.tail, reverse_edges)
        in_degree = degree(edge_index[1], num_nodes=batch.num_entities, dtype=torch.long)
        assert tuple(torch.bincount(in_degree).tolist()) == degree_histogram([TRIANGLE, PATH], reverse_edges)

    def test_prepare_config_stores_deg_and_the_model_uses_it(self) -> None:
        model = tiny()
        assert model.config.deg == (0, 2, 5)
        # PyG normalises the scalers by the mean training degree: (2 * 1 + 5 * 2) / 7.
        assert model.gnn.convs[0].aggr_module.init_avg_deg_lin == pytest.approx(12 / 7)

    def test_missing_deg_says_how_to_fix(self) -> None:
        with pytest.raises(ValueError, match="degree_histogram"):
            PNARetriever(PNAConfig(text_dim=DIM))

    def test_config_checks(self) -> None:
        with pytest.raises(ValueError, match="towers"):
            PNAConfig(hidden=10, towers=3)
        with pytest.raises(ValueError, match="deg"):
            PNAConfig(deg=(0, 0))


class TestModel:
    def test_shapes_and_triple_score_is_sum_of_entity_logits(self) -> None:
        model = tiny()
        batch = collate([TRIANGLE, PATH])
        node = model.node_logits(batch, TABLES)
        logits = model(batch, TABLES)
        assert node.shape == (7,)
        assert logits.shape == (6,)
        assert torch.equal(logits, node[batch.head] + node[batch.tail])

    def test_question_conditioned(self) -> None:
        model = tiny()
        other = EmbeddingTables(TABLES.entities, TABLES.relations, -TABLES.questions)
        batch = collate([TRIANGLE])
        assert not torch.allclose(model.node_logits(batch, TABLES), model.node_logits(batch, other))

    def test_entity_targets_and_entity_loss(self) -> None:
        batch = collate([TRIANGLE])
        assert entity_targets(batch).tolist() == [1.0, 0.0, 1.0]  # positive triple 0 → 2
        model = tiny(loss="entity")
        loss = model.loss(batch, TABLES)
        expected = torch.nn.functional.binary_cross_entropy_with_logits(
            model.node_logits(batch, TABLES), entity_targets(batch)
        )
        torch.testing.assert_close(loss, expected)

    def test_build_through_registry_with_train_graphs(self) -> None:
        model = build_retriever("pna", {"text_dim": DIM, "hidden": 8}, train_graphs=[TRIANGLE])
        assert isinstance(model, PNARetriever)
        assert model.config.deg == (0, 0, 3)

    @pytest.mark.parametrize("loss", ["triple", "entity"])
    def test_optimizer_steps_lower_the_loss_and_rank_the_positive_first(self, loss: str) -> None:
        # 20 Adam steps on the two hand-made graphs: the loss falls to under a fifth of its start and the one
        # positive triple (TRIANGLE's 0 → 2, batch triple 1) scores above 0 and every other triple below it.
        # Zero gradients leave the loss where it was; wrong ones do not find the positive.
        model = tiny(loss=loss)
        batch = collate([TRIANGLE, PATH])
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        start = model.loss(batch, TABLES).item()
        for _ in range(20):
            optimizer.zero_grad()
            model.loss(batch, TABLES).backward()
            optimizer.step()
        assert model.loss(batch, TABLES).item() < 0.2 * start
        logits = model(batch, TABLES).detach()
        others = torch.cat([logits[:1], logits[2:]])
        assert logits[1] > 0 > others.max()


class TestMergeParallel:
    def test_groups_by_ordered_pair_best_first(self) -> None:
        triples = [("A", "r1", "B"), ("A", "r2", "B"), ("B", "r1", "A"), ("A", "r1", "C"), ("A", "r1", "B")]
        merged = merge_parallel(triples, [3, 1, 0, 2, 4], [0.9, 0.8, 0.8, 0.5, 0.1])
        assert [(m.head, m.tail, m.relations, m.triple_ids, m.score) for m in merged] == [
            ("A", "C", ("r1",), (3,), 0.9),
            ("A", "B", ("r2", "r1"), (1, 0, 4), 0.8),
            ("B", "A", ("r1",), (2,), 0.5),
        ]
        assert merged[1].render() == "A → [r2; r1] → B"

    def test_without_scores_and_misaligned(self) -> None:
        assert merge_parallel([("A", "r", "B")], [0])[0].score is None
        with pytest.raises(ValueError, match="scores"):
            merge_parallel([("A", "r", "B")], [0], [0.1, 0.2])
