"""MLP-DDE triple retriever (rg.retrievers.mlp): DDE by hand on a 4-node graph, batching
invariance, the block-wise first layer against the explicit [q, h, r, t] input, and overfitting
a tiny synthetic set."""

from __future__ import annotations

import pytest
import torch

from rg.retrievers import EmbeddingTables, MLPConfig, MLPRetriever, QuestionGraph, collate
from rg.retrievers.features import topic_one_hot
from rg.retrievers.mlp import dde, mean_neighbours
from rg.retrievers.mlp import model as mlp_model
from rg.training import TrainConfig, evaluate, fit, make_batches

DIM = 8


def graph(
    gid: str,
    triples: list[tuple[int, int, int]],
    topic: list[int],
    num_entities: int,
    positives: tuple[int, ...] = (),
    question: int = 0,
    text: list[int] | None = None,
) -> QuestionGraph:
    """A QuestionGraph from local (head, relation row, tail) triples."""
    head, rel, tail = (torch.tensor(c, dtype=torch.long) for c in zip(*triples))
    labels = torch.zeros(len(triples))
    labels[list(positives)] = 1.0
    return QuestionGraph(
        id=gid,
        question=question,
        entity_text=torch.tensor(text if text is not None else list(range(num_entities)), dtype=torch.long),
        topic=torch.tensor([e in topic for e in range(num_entities)]),
        head=head,
        rel=rel,
        tail=tail,
        labels=labels,
        answers=torch.zeros(0, dtype=torch.long),
        num_answers=0,
    )


# 0 is the topic; 3 reaches 0 and 1 only along triples, so from the topic it is reached only t→h.
FOUR_NODE = [(0, 0, 1), (1, 0, 2), (3, 0, 0), (3, 0, 1)]
FOUR_NODE_DDE = torch.tensor(
    [  # fwd round 1, fwd round 2, bwd round 1, bwd round 2 (columns: topic, non-topic)
        [0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0],  # 0 ← 3 (non-topic); ← 3 ← nothing; → 1; → 1 → 2
        [0.5, 0.5, 0.0, 0.5, 0.0, 1.0, 0.0, 0.0],  # 1 ← {0, 3}; ← {0 ← 3, 3 ← ∅}; → 2; → 2 → ∅
        [0.0, 1.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0],  # 2 ← 1; ← 1 ← {0, 3}; no out-edges
        [0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 1.0],  # 3: no in-edges; → {0, 1}; → {0 → 1, 1 → 2}
    ]
)


class TestDDE:
    def test_topic_one_hot_columns(self) -> None:
        assert topic_one_hot(torch.tensor([True, False])).tolist() == [[1.0, 0.0], [0.0, 1.0]]

    def test_four_node_graph_by_hand(self) -> None:
        g = graph("a", FOUR_NODE, topic=[0], num_entities=4)
        assert torch.equal(dde(g.topic, g.head, g.tail, rounds=2), FOUR_NODE_DDE)

    def test_rounds_set_the_width(self) -> None:
        g = graph("a", FOUR_NODE, topic=[0], num_entities=4)
        assert dde(g.topic, g.head, g.tail, rounds=1).tolist() == FOUR_NODE_DDE[:, [0, 1, 4, 5]].tolist()
        assert dde(g.topic, g.head, g.tail, rounds=0).shape == (4, 0)

    def test_undirected_rounds_reach_mixed_direction_walks(self) -> None:
        # 0 -r-> 1 <-r- 2: entity 2 shares a neighbour with the topic (MetaQA's co-star pattern).
        g = graph("m", [(0, 0, 1), (2, 0, 1)], topic=[0], num_entities=3)
        directional = dde(g.topic, g.head, g.tail, rounds=2)
        assert directional[2, 0::2].tolist() == [0.0, 0.0, 0.0, 0.0]  # no topic signal reaches 2
        mixed = dde(g.topic, g.head, g.tail, rounds=2, undirected_rounds=2)
        assert torch.equal(mixed[:, :8], directional)
        assert mixed[:, 8:].tolist() == [[0.0, 1.0, 0.5, 0.5], [0.5, 0.5, 0.0, 1.0], [0.0, 1.0, 0.5, 0.5]]

    def test_mean_neighbours_by_hand_with_and_without_given_degrees(self) -> None:
        x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [4.0, 4.0]])
        src, dst = torch.tensor([0, 1, 2]), torch.tensor([2, 2, 0])  # 0 → 2, 1 → 2, 2 → 0; none into 1
        expected = [[4.0, 4.0], [0.0, 0.0], [0.5, 1.0]]
        assert mean_neighbours(x, src, dst).tolist() == expected
        assert mean_neighbours(x, src, dst, inverse_degree=torch.tensor([1.0, 1.0, 0.5])).tolist() == expected

    def test_parallel_triples_each_count(self) -> None:
        g = graph("p", [(0, 0, 2), (0, 1, 2), (1, 0, 2)], topic=[0], num_entities=3)
        assert dde(g.topic, g.head, g.tail, rounds=1)[2, :2].tolist() == pytest.approx([2 / 3, 1 / 3])

    def test_batch_equals_each_graph_alone(self) -> None:
        a = graph("a", FOUR_NODE, topic=[0], num_entities=4)
        b = graph("b", [(0, 0, 1), (2, 0, 1), (1, 0, 0)], topic=[2], num_entities=3)
        batch = collate([a, b])
        together = dde(batch.topic, batch.head, batch.tail, rounds=2)
        alone = torch.cat([dde(g.topic, g.head, g.tail, rounds=2) for g in (a, b)])
        assert torch.equal(together, alone)


def tables(num_entities: int = 6, num_relations: int = 2, num_questions: int = 2, seed: int = 0) -> EmbeddingTables:
    generator = torch.Generator().manual_seed(seed)
    return EmbeddingTables(
        entities=torch.randn(num_entities, DIM, generator=generator),
        relations=torch.randn(num_relations, DIM, generator=generator),
        questions=torch.randn(num_questions, DIM, generator=generator),
    )


class TestModel:
    def test_forward_shape_and_blockwise_equals_explicit_input(self) -> None:
        torch.manual_seed(0)
        model = MLPRetriever(MLPConfig(text_dim=DIM, hidden=16))
        a = graph("a", FOUR_NODE, topic=[0], num_entities=4, text=[0, -1, 2, 3])
        b = graph("b", [(0, 1, 1), (1, 0, 2)], topic=[0], num_entities=3, question=1, text=[4, 5, -1])
        batch, t = collate([a, b]), tables()
        logits = model(batch, t)
        assert logits.shape == (6,)
        inputs = model.triple_inputs(batch, t)
        assert inputs.shape == (6, MLPConfig(text_dim=DIM).triple_dim)
        torch.testing.assert_close(logits, model.head(model.input(inputs)).squeeze(1))

    def test_inference_in_blocks_equals_the_training_forward(self, monkeypatch) -> None:
        torch.manual_seed(0)
        model = MLPRetriever(MLPConfig(text_dim=DIM, hidden=16, dropout=0.5))
        a = graph("a", FOUR_NODE, topic=[0], num_entities=4, text=[0, -1, 2, 3])
        b = graph("b", [(0, 1, 1), (1, 0, 2)], topic=[0], num_entities=3, question=1, text=[4, 5, -1])
        batch, t = collate([a, b]), tables()
        model.eval()
        expected = model.head(model.input(model.triple_inputs(batch, t))).squeeze(1).detach()
        monkeypatch.setattr(mlp_model, "SCORE_BLOCK", 4)  # 6 triples: a full block and a partial one
        with torch.no_grad():
            torch.testing.assert_close(model(batch, t), expected)  # on the CPU: the fused loop
            out_layer = model.head[-1]
            blocks = model._projections(batch, t).scores_in_blocks(out_layer.weight[0], out_layer.bias)
            torch.testing.assert_close(blocks, expected)  # the torch path other devices take
        model.train()  # dropout on: the training path, not the blocks
        assert model(batch, t).requires_grad

    def test_unnamed_entities_share_the_learned_vector(self) -> None:
        model = MLPRetriever(MLPConfig(text_dim=DIM, hidden=16))
        g = graph("a", FOUR_NODE, topic=[0], num_entities=4, text=[0, -1, 2, -1])
        feats = model.entity_features(collate([g]), tables())
        assert torch.equal(feats[1, :DIM], model.entity_text.unnamed.detach())
        assert torch.equal(feats[3, :DIM], model.entity_text.unnamed.detach())
        assert torch.equal(feats[0, :DIM], tables().entities[0])

    def test_overfits_a_tiny_synthetic_set(self) -> None:
        generator = torch.Generator().manual_seed(1)
        graphs = []
        for i in range(6):
            codes = torch.randperm(8 * 3 * 8, generator=generator)[:20].tolist()  # 20 distinct triples
            triples = [(c // 24, c // 8 % 3, c % 8) for c in codes]
            graphs.append(graph(f"q{i}", triples, topic=[0], num_entities=8, positives=(i, 10 + i), question=i))
        t = EmbeddingTables(
            entities=torch.randn(8, DIM, generator=generator),
            relations=torch.randn(3, DIM, generator=generator),
            questions=torch.randn(6, DIM, generator=generator),
        )
        torch.manual_seed(0)
        model = MLPRetriever(MLPConfig(text_dim=DIM, hidden=16, pos_weight=5.0))
        config = TrainConfig(epochs=60, lr=0.02, questions_per_batch=3, recall_k=2, eval_ks=(2,))
        before = evaluate(model, make_batches(graphs, 3), t, ks=(2,))["triple_recall@2"]
        result = fit(model, graphs, graphs, t, config)
        losses = [h["train_loss"] for h in result.history]
        assert losses[-1] < 0.2 * losses[0]
        assert before < 0.5
        assert result.best_metric == 1.0
        model.load_state_dict(result.best_state)
        assert evaluate(model, make_batches(graphs, 3), t, ks=(2,))["triple_recall@2"] == 1.0


def test_bce_averaged_per_question_weighs_questions_equally():
    from rg.retrievers import triple_bce

    logits = torch.tensor([0.0, 0.0, 0.0, 2.0])
    labels = torch.tensor([1.0, 0.0, 0.0, 1.0])
    group = torch.tensor([0, 0, 0, 1])
    each = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels, reduction="none")
    assert triple_bce(logits, labels) == pytest.approx(float(each.mean()))
    per_question = (float(each[:3].mean()) + float(each[3])) / 2
    assert triple_bce(logits, labels, group=group, num_groups=3) == pytest.approx(per_question)  # question 2 is empty
    with pytest.raises(ValueError, match="num_groups"):
        triple_bce(logits, labels, group=group)


def test_distinct_finds_the_sorted_values_and_each_ones_row(monkeypatch):
    ids = torch.tensor([5, 0, 5, 3, 3, 9])
    for compiled in (True, False):  # the CPU kernel, then the torch path other devices take
        monkeypatch.setattr(mlp_model.kernels, "supported", lambda *tensors, c=compiled: c)
        values, inverse = mlp_model.distinct(ids, 10)
        assert values.tolist() == [0, 3, 5, 9] == torch.unique(ids).tolist()
        assert inverse.tolist() == [2, 0, 2, 1, 1, 3]
        none, none_rows = mlp_model.distinct(torch.zeros(0, dtype=torch.long), 4)
        assert none.numel() == 0 and none_rows.numel() == 0
