"""The compiled CPU loops of the MLP retriever (rg.retrievers.mlp.kernels) against the torch code
they replace at inference: the fused triple scores, the one-call DDE, when they apply, and the
errors they raise instead of reading out of bounds."""

from __future__ import annotations

import pytest
import torch

from rg.retrievers import EmbeddingTables, MLPConfig, MLPRetriever, QuestionGraph, collate
from rg.retrievers.mlp import kernels
from rg.retrievers.mlp.model import dde, dde_torch

DIM = 8


def random_graph(seed: int, entities: int, triples: int, relations: int = 3, question: int = 0) -> QuestionGraph:
    """A random multigraph (parallel triples and self-loops allowed) with two topic entities."""
    generator = torch.Generator().manual_seed(seed)
    head = torch.randint(0, entities, (triples,), generator=generator)
    tail = torch.randint(0, entities, (triples,), generator=generator)
    text = torch.randint(-1, entities, (entities,), generator=generator)  # -1: unnamed
    return QuestionGraph(
        id=f"g{seed}",
        question=question,
        entity_text=text,
        topic=torch.arange(entities) < 2,
        head=head,
        rel=torch.randint(0, relations, (triples,), generator=generator),
        tail=tail,
        labels=torch.zeros(triples),
        answers=torch.zeros(0, dtype=torch.long),
        num_answers=0,
    )


def tables(entities: int = 40, relations: int = 3, questions: int = 3) -> EmbeddingTables:
    generator = torch.Generator().manual_seed(7)
    return EmbeddingTables(
        entities=torch.randn(entities, DIM, generator=generator),
        relations=torch.randn(relations, DIM, generator=generator),
        questions=torch.randn(questions, DIM, generator=generator),
    )


# 3 graphs, 603 triples: three parallel chunks of 256 and a last group of 3 triples
BATCH = collate([random_graph(1, 40, 300), random_graph(2, 25, 200, question=1), random_graph(3, 30, 103, question=2)])


@pytest.mark.parametrize("walk_steps", [0, 2])
def test_fused_scores_equal_the_torch_blocks_and_the_explicit_input(walk_steps: int, monkeypatch) -> None:
    torch.manual_seed(0)
    model = MLPRetriever(MLPConfig(text_dim=DIM, hidden=24, walk_steps=walk_steps, walk_width=4)).eval()
    t = tables()
    with torch.no_grad():
        explicit = model.head(model.input(model.triple_inputs(BATCH, t))).squeeze(1)
        parts = model._projections(BATCH, t)
        assert (parts.flows.shape[1] > 0) == (walk_steps > 0)  # per-triple flows only with the walk
        out_layer = model.head[-1]
        fused = parts.scores_fused(out_layer.weight[0], out_layer.bias)
        monkeypatch.setattr("rg.retrievers.mlp.model.SCORE_BLOCK", 100)
        blocks = parts.scores_in_blocks(out_layer.weight[0], out_layer.bias)
        forward = model(BATCH, t)
    assert fused.shape == (603,)
    torch.testing.assert_close(fused, explicit)
    torch.testing.assert_close(blocks, explicit)
    torch.testing.assert_close(forward, fused, rtol=0, atol=0)  # the CPU forward is the fused loop


def test_fused_scores_by_hand() -> None:
    # H = 2; triple 0 sums rows 0..3 = [1, 2] + structure [1, 0 | 0, 2] @ W.T; triple 1 is negative
    shared = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.5], [0.0, 0.5], [-5.0, -5.0]])
    rows = torch.tensor([[0, 1, 2, 3], [4, 4, 4, 4]])
    node = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    weight = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, -1.0]])  # (H, 2C): head cols, tail cols
    scores = kernels.score_triples(
        shared, rows, node, torch.tensor([0, 0]), torch.tensor([1, 1]), torch.zeros(2, 0),
        weight, torch.tensor([1.0, 10.0]), torch.tensor([0.5]),
    )
    # triple 0: hidden = [1, 2] + [1 + 2, -2] = [4, 0] -> relu [4, 0] -> 4 + 0 + 0.5
    # triple 1: hidden = [-20, -20] + [3, -2] -> relu 0 -> 0.5
    assert scores.tolist() == [4.5, 0.5]


def test_dde_kernel_equals_the_torch_rounds() -> None:
    for rounds, undirected in ((2, 0), (1, 2), (3, 1), (0, 0)):
        got = kernels.dde(BATCH.topic, BATCH.head, BATCH.tail, rounds, undirected)
        want = dde_torch(BATCH.topic, BATCH.head, BATCH.tail, rounds, undirected)
        assert got.shape == want.shape == (BATCH.topic.shape[0], 2 * (2 * rounds + undirected))
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    on_cpu = dde(BATCH.topic, BATCH.head, BATCH.tail, 2)  # the dispatcher takes the compiled loop
    assert torch.equal(on_cpu, kernels.dde(BATCH.topic, BATCH.head, BATCH.tail, 2, 0))


def test_supported_only_on_cpu_float32_without_an_autograd_graph() -> None:
    weight = torch.zeros(3, requires_grad=True)
    ids = torch.zeros(3, dtype=torch.long)
    assert not kernels.supported(weight, ids)  # gradients on and wanted: the torch path records them
    with torch.no_grad():
        assert kernels.supported(weight, ids, torch.zeros(3, dtype=torch.bool))
        assert not kernels.supported(torch.zeros(3, dtype=torch.float64))
        assert not kernels.supported(ids.to(torch.int32))
    assert kernels.supported(torch.zeros(3), ids)  # no gradient wanted: DDE features in training


def test_out_of_range_ids_and_bad_shapes_raise_instead_of_reading_out_of_bounds() -> None:
    shared, node, flows = torch.zeros(5, 2), torch.zeros(3, 1), torch.zeros(2, 0)
    ok = dict(shared=shared, rows=torch.zeros(2, 4, dtype=torch.long), node=node, head=torch.tensor([0, 1]),
              tail=torch.tensor([2, 2]), flows=flows, weight=torch.zeros(2, 2), out_weight=torch.zeros(2),
              bias=torch.zeros(1))
    assert kernels.score_triples(**ok).tolist() == [0.0, 0.0]
    with pytest.raises(IndexError, match=r"rows holds ids outside \[0, 5\)"):
        kernels.score_triples(**{**ok, "rows": torch.tensor([[0, 1, 2, 5], [0, 0, 0, 0]])})
    with pytest.raises(IndexError, match=r"tail holds ids outside \[0, 3\)"):
        kernels.score_triples(**{**ok, "tail": torch.tensor([0, -1])})
    with pytest.raises(ValueError, match=r"weight \(H, 2C \+ F\) = \(2, 2\)"):
        kernels.score_triples(**{**ok, "weight": torch.zeros(2, 3)})
    with pytest.raises(ValueError, match="rows \\(T, 4\\)"):
        kernels.score_triples(**{**ok, "rows": torch.zeros(2, 3, dtype=torch.long)})
    with pytest.raises(IndexError, match=r"head holds ids outside \[0, 2\)"):
        kernels.dde(torch.tensor([True, False]), torch.tensor([0, 2]), torch.tensor([1, 1]), 1, 0)


def test_one_torch_thread_takes_the_serial_loop_with_the_same_scores() -> None:
    torch.manual_seed(0)
    model = MLPRetriever(MLPConfig(text_dim=DIM, hidden=24)).eval()
    t = tables()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with torch.no_grad():
            parallel = model(BATCH, t)
        torch.set_num_threads(1)  # a Ray worker's usual share: no numba thread pool
        with torch.no_grad():
            serial = model(BATCH, t)
        assert kernels._threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(serial, parallel)  # each triple's arithmetic does not depend on the threads
