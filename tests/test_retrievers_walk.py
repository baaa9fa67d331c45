"""The question-gated walk (rg.retrievers.walk) in the MLP and PNA retrievers: exact values on a
hand-made graph, batching invariance, the block-wise forward against the explicit input with the
walk on, and a two-path graph that DDE cannot separate and the walk learns to."""

from __future__ import annotations

import pytest
import torch

from rg.retrievers import MLPConfig, MLPRetriever, PNAConfig, PNARetriever, collate
from rg.retrievers.walk import GatedWalk, gate_targets, walk
from rg.training import TrainConfig, evaluate, fit, make_batches

from tests.test_retrievers_mlp import DIM, FOUR_NODE, graph, tables

# topic 0 -r0-> 1 -r1-> 2 (the answer); 0 -r2-> 3 -r1-> 4 (a look-alike); 5 -r1-> 0 points at the topic
TWO_PATHS = [(0, 0, 1), (1, 1, 2), (0, 2, 3), (3, 1, 4), (5, 1, 0)]


class TestWalk:
    def test_max_product_values_and_flows_by_hand(self) -> None:
        g = graph("w", TWO_PATHS, topic=[0], num_entities=6)
        # step 1: forward gates 0.9 on r0, 0.2 on r2, 0.5 on r1; backward gate 0.4 everywhere
        forward_1 = torch.tensor([0.9, 0.5, 0.2, 0.5, 0.5])
        # step 2: forward 0.8 everywhere, backward 0.1 everywhere
        gates = torch.stack([forward_1, torch.full((5,), 0.4), torch.full((5,), 0.8), torch.full((5,), 0.1)], dim=1)
        reached, flows = walk(g.topic, g.head, g.tail, gates)
        x1 = [0.0, 0.9, 0.0, 0.2, 0.0, 0.4]  # 1 and 3 forward from 0; 5 backward along 5 -r1-> 0
        x2 = [max(0.1 * 0.9, 0.1 * 0.2, 0.8 * 0.4), 0.0, 0.8 * 0.9, 0.0, 0.8 * 0.2, 0.0]
        assert reached[:, 0].tolist() == pytest.approx(x1)
        assert reached[:, 1].tolist() == pytest.approx(x2)
        # flow of triple 1 -r1-> 2: step 1 forward 0.5 * x0(1) = 0, step 2 forward 0.8 * x1(1)
        assert flows[1].tolist() == pytest.approx([0.0, 0.0, 0.8 * 0.9, 0.0])
        # triple 5 -r1-> 0 at step 1 moves 0.4 * x0(0) backward, at step 2 0.1 * x1(0) = 0 backward
        assert flows[4].tolist() == pytest.approx([0.5 * 0.0, 0.4, 0.8 * 0.4, 0.0])

    def test_untrained_gates_give_powers_of_a_half_by_distance(self) -> None:
        module = GatedWalk(DIM, steps=2, width=4)
        for layer in (module.question[-1], module.relation):
            torch.nn.init.zeros_(layer.weight)
            torch.nn.init.zeros_(layer.bias)
        batch = collate([graph("w", TWO_PATHS, topic=[0], num_entities=6)])
        reached, _ = module(batch, tables(num_relations=3))
        assert reached[:, 0].tolist() == pytest.approx([0.0, 0.5, 0.0, 0.5, 0.0, 0.5])
        assert reached[:, 1].tolist() == pytest.approx([0.25, 0.0, 0.25, 0.0, 0.25, 0.0])

    def test_batch_equals_each_graph_alone(self) -> None:
        torch.manual_seed(0)
        module = GatedWalk(DIM, steps=3, width=4)
        a = graph("a", TWO_PATHS, topic=[0], num_entities=6)
        b = graph("b", FOUR_NODE, topic=[0], num_entities=4, question=1)
        t = tables(num_relations=3)
        together = module(collate([a, b]), t)
        alone = [module(collate([g]), t) for g in (a, b)]
        for part, whole in zip(together, zip(*alone)):
            torch.testing.assert_close(part, torch.cat(whole))

    def test_no_steps_gives_empty_columns(self) -> None:
        g = graph("w", TWO_PATHS, topic=[0], num_entities=6)
        reached, flows = walk(g.topic, g.head, g.tail, torch.zeros(5, 0))
        assert reached.shape == (6, 0) and flows.shape == (5, 0)


class TestGateTargets:
    def test_steps_and_directions_of_the_labelled_path_by_hand(self) -> None:
        # positives 0 -r0-> 1 -r1-> 2: r0 forward at step 1, r1 forward at step 2 (stepping back
        # from 1 to the topic along r0 at step 2 is not a target)
        a = graph("a", TWO_PATHS, topic=[0], num_entities=6, positives=(0, 1))
        # positives 0 -r2-> 1 <-r2- 2: r2 forward at step 1, backward at step 2; (2, r2, 0) is no positive
        b = graph("b", [(0, 2, 1), (2, 2, 1), (2, 2, 0)], topic=[0], num_entities=3, positives=(0, 1))
        batch = collate([a, b])
        relations, column = torch.unique(batch.rel, return_inverse=True)
        targets, present = gate_targets(batch, column, relations.numel(), steps=2)
        assert targets[0].tolist() == [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
        assert targets[1, 2].tolist() == [1.0, 0.0, 0.0, 1.0]
        assert present.tolist() == [[True, True, True], [False, False, True]]


class TestMLPWithWalk:
    def test_blockwise_forward_equals_explicit_input(self) -> None:
        torch.manual_seed(0)
        config = MLPConfig(text_dim=DIM, hidden=16, walk_steps=3, walk_width=4)
        model = MLPRetriever(config)
        a = graph("a", TWO_PATHS, topic=[0], num_entities=6)
        batch = collate([a, graph("b", FOUR_NODE, topic=[0], num_entities=4, question=1)])
        t = tables(num_relations=3)
        inputs = model.triple_inputs(batch, t)
        assert inputs.shape == (9, config.triple_dim) and config.triple_dim == MLPConfig(text_dim=DIM).triple_dim + 12
        expected = model.head(model.input(inputs)).squeeze(1)
        torch.testing.assert_close(model(batch, t), expected)
        model.eval()
        with torch.no_grad():
            torch.testing.assert_close(model(batch, t), expected.detach())

    def test_loss_adds_the_gate_supervision(self) -> None:
        torch.manual_seed(0)
        config = MLPConfig(text_dim=DIM, hidden=16, walk_steps=2, walk_width=4, walk_loss=0.5, pos_weight=3.0)
        model = MLPRetriever(config)
        batch = collate([graph("a", TWO_PATHS, topic=[0], num_entities=6, positives=(0, 1))])
        t = tables(num_relations=3)
        logits, _ = model.walk.logits(batch, t)  # (1, 4, 3)
        # columns: step 1 forward, step 1 backward, step 2 forward, step 2 backward; rows r0, r1, r2
        targets = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
        gate_bce = torch.nn.functional.binary_cross_entropy_with_logits(
            logits[0].T, targets, pos_weight=torch.tensor(3.0)
        )
        triple_bce = torch.nn.functional.binary_cross_entropy_with_logits(
            model(batch, t), batch.labels, pos_weight=torch.tensor(3.0)
        )
        torch.testing.assert_close(model.loss(batch, t), triple_bce + 0.5 * gate_bce)
        model.config = config.model_copy(update={"walk_loss": 0.0})
        torch.testing.assert_close(model.loss(batch, t), triple_bce)

    @staticmethod
    def _two_path_graphs() -> list:
        """Ten questions on TWO_PATHS-shaped graphs with unnamed middle and end entities.

        (1, r1, 2) is positive and (3, r1, 4) is not. With the middles and ends unnamed, the two
        triples differ only in which relation led to their head, which DDE does not encode.
        """
        text = [0, -1, -1, -1, -1, 1]
        return [
            graph(f"q{i}", TWO_PATHS, topic=[0], num_entities=6, positives=(0, 1), question=i % 2, text=text)
            for i in range(10)
        ]

    def test_dde_alone_ties_the_look_alike_triples(self) -> None:
        torch.manual_seed(0)
        model = MLPRetriever(MLPConfig(text_dim=DIM, hidden=16)).eval()
        with torch.no_grad():
            scores = model(collate(self._two_path_graphs()[:1]), tables(num_relations=3))
        assert float(scores[1]) == float(scores[3])

    def test_walk_learns_which_relation_leads_to_the_answer(self) -> None:
        graphs = self._two_path_graphs()
        t = tables(num_relations=3)
        torch.manual_seed(0)
        model = MLPRetriever(MLPConfig(text_dim=DIM, hidden=16, walk_steps=2, walk_width=4, pos_weight=2.0))
        config = TrainConfig(epochs=40, lr=0.02, questions_per_batch=5, recall_k=2, eval_ks=(2,))
        result = fit(model, graphs, graphs, t, config)
        model.load_state_dict(result.best_state)
        assert evaluate(model, make_batches(graphs, 5), t, ks=(2,))["triple_recall@2"] == 1.0
        model.eval()
        with torch.no_grad():
            scores = model(collate(graphs[:1]), t)
        assert float(scores[1]) > float(scores[3])


class TestPNAWithWalk:
    def test_walk_values_widen_the_node_input_and_train_end_to_end(self) -> None:
        g = graph("w", TWO_PATHS, topic=[0], num_entities=6, positives=(0, 1))
        torch.manual_seed(0)
        config = PNARetriever.prepare_config(PNAConfig(text_dim=DIM, hidden=8, walk_steps=2, walk_width=4), [g])
        model = PNARetriever(config)
        assert model.node_in.in_features == 2 * DIM + 2 + 2
        batch, t = collate([g]), tables(num_relations=3)
        model.loss(batch, t).backward()
        assert model.walk is not None
        assert model.walk.question[0].weight.grad is not None and model.walk.question[0].weight.grad.abs().sum() > 0

    def test_walk_loss_adds_the_gate_supervision(self) -> None:
        g = graph("w", TWO_PATHS, topic=[0], num_entities=6, positives=(0, 1))
        torch.manual_seed(0)
        config = PNARetriever.prepare_config(PNAConfig(text_dim=DIM, hidden=8, walk_steps=2, walk_width=4), [g])
        model = PNARetriever(config)
        batch, t = collate([g]), tables(num_relations=3)
        plain = model.loss(batch, t)
        model.config = config.model_copy(update={"walk_loss": 2.0})
        torch.testing.assert_close(model.loss(batch, t), plain + 2.0 * model.walk.supervision_loss(batch, t))
