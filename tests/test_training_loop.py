"""Retriever training without Ray (rg.training): Samples and Labels to tensors, recall@K on a
hand-made ranking, and fit's selection, callbacks, determinism and resumption."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path
from typing import Literal

import pytest
import torch
from torch import nn
from torch.optim import Optimizer

from rg.config import ConfigError, validate_config
from rg.data.sample import Sample
from rg.retrievers import (
    EmbeddingTables,
    GraphBatch,
    MLPConfig,
    MLPRetriever,
    QuestionGraph,
    Retriever,
    RetrieverConfig,
    collate,
)
from rg.data.labels import Labels, write_labels
from rg.data.entities import is_unnamed
from rg.retrievers.inputs import build_tables, question_graph, question_graphs
from rg.data.labels import labels_by_id
from rg.jobs.weak_labels import weak_rows
from rg.supervision.labels import LabelConfig
from rg.training import TrainConfig, evaluate, fit, make_batches
from tests.synthetic_data import HashEncoder

DIM = 8


ALICE = Sample(
    id="s1",
    question="where was alice born?",
    answers=("Paris", "Lyon"),
    q_entities=("Alice",),
    a_entities=("Paris", "Lyon"),  # Lyon is not in the subgraph
    triples=(
        ("Alice", "people.person.place_of_birth", "Paris"),
        ("Alice", "people.person.spouse_s", "m.0x1"),
        ("m.0x1", "people.marriage.spouse", "Bob"),
        ("Bob", "people.person.place_of_birth", "Paris"),
        ("Paris", "location.location.containedby", "France"),
    ),
)
BOB = Sample(
    id="s2",
    question="which country is bob from?",
    answers=("France",),
    q_entities=("Bob",),
    a_entities=("France",),
    triples=(("Bob", "people.person.nationality", "France"), ("g.11x", "common.topic.notable_for", "Bob")),
)


class TestTablesAndGraphs:
    def test_tables_embed_each_string_once_and_skip_mids(self) -> None:
        encoder = HashEncoder(DIM)
        tables, index = build_tables([ALICE, BOB], encoder)
        assert index.entities == {"Alice": 0, "Paris": 1, "Bob": 2, "France": 3}
        assert list(index.relations)[:2] == ["people.person.place_of_birth", "people.person.spouse_s"]
        assert index.questions == {"s1": 0, "s2": 1}
        assert index.encoder_model_id == "hash-encoder-test"
        assert encoder.calls[1][:2] == ["people person place of birth", "people person spouse s"]
        assert encoder.calls[2] == [ALICE.question, BOB.question]
        assert (tables.entities.shape, tables.relations.shape, tables.questions.shape) == ((4, DIM), (6, DIM), (2, DIM))
        torch.testing.assert_close(tables.entities[3], torch.from_numpy(encoder.encode(["France"])[0]))

    def test_only_whole_machine_ids_are_unnamed(self) -> None:
        assert is_unnamed("m.0x1") and is_unnamed("g.11b6_x")
        assert not is_unnamed("m. night shyamalan") and not is_unnamed("g.w. bailey")  # MetaQA names
        assert not is_unnamed("Alice")

    def test_duplicate_ids_are_refused(self) -> None:
        with pytest.raises(ValueError, match="s1"):
            build_tables([ALICE, ALICE], HashEncoder(DIM))

    def test_question_graph(self) -> None:
        _, index = build_tables([ALICE, BOB], HashEncoder(DIM))
        labels = Labels(id="s1", positive_triples=(0, 4), paths=(), relation_paths=(), source="refined", selector="t")
        g = question_graph(ALICE, index, labels)
        # local ids by first appearance: Alice 0, Paris 1, m.0x1 2, Bob 3, France 4
        assert g.entity_text.tolist() == [0, 1, -1, 2, 3]
        assert g.topic.tolist() == [True, False, False, False, False]
        assert g.head.tolist() == [0, 0, 2, 3, 1]
        assert g.tail.tolist() == [1, 2, 3, 1, 4]
        assert g.rel.tolist() == [0, 1, 2, 0, 3]
        assert g.labels is not None and g.labels.tolist() == [1.0, 0.0, 0.0, 0.0, 1.0]
        assert g.answers is not None and g.answers.tolist() == [1]  # Paris; Lyon is absent
        assert g.num_answers == 2
        assert question_graph(BOB, index).entity_text.tolist() == [2, 3, -1]

    def test_labels_must_fit_the_subgraph(self) -> None:
        _, index = build_tables([ALICE], HashEncoder(DIM))
        bad = Labels(id="s1", positive_triples=(7,), paths=(), relation_paths=(), source="refined", selector="t")
        with pytest.raises(ValueError, match="outside the subgraph"):
            question_graph(ALICE, index, bad)
        # in range, but on a relation its own paths never take: labels of another build
        stale = Labels(id="s1", positive_triples=(0, 2), paths=(), relation_paths=(("people.person.place_of_birth",),), source="refined", selector="t")
        with pytest.raises(ValueError, match=r"positive triples \[2\] .*another build"):
            question_graph(ALICE, index, stale)
        with pytest.raises(KeyError, match="has no embedding"):
            question_graph(BOB, index)


class TestLabelSources:
    def test_weak(self) -> None:
        labels = weak_rows([ALICE, BOB], LabelConfig(source="weak"))
        assert labels["s1"].positive_triples == (0,)  # Alice → Paris; Lyon is not in the graph
        assert labels["s2"].positive_triples == (0,)
        assert labels["s1"].source == "weak" and labels["s1"].fallback_reason == "weak_requested"

    def test_refined_reads_a_labels_folder(self, tmp_path: Path) -> None:
        rows = [
            Labels(id="s1", positive_triples=(0, 4), paths=(), relation_paths=(), source="refined", selector="sim"),
            Labels(id="other", positive_triples=(1,), paths=(), relation_paths=(), source="refined", selector="sim"),
        ]
        write_labels(rows, tmp_path / "labels" / "part-0.parquet")
        labels = labels_by_id(tmp_path / "labels", {"s1", "s2"})
        assert list(labels) == ["s1"] and labels["s1"].positive_triples == (0, 4)
        _, index = build_tables([ALICE, BOB], HashEncoder(DIM))
        with pytest.raises(KeyError, match=r"1 sample\(s\) have no labels, e.g. \['s2'\]"):
            question_graphs([ALICE, BOB], index, labels)

    def test_refined_needs_a_path(self) -> None:
        with pytest.raises(ConfigError, match="path"):
            validate_config({"source": "refined"}, LabelConfig)


class FixedConfig(RetrieverConfig):
    kind: Literal["fixed"] = "fixed"


class FixedScores(Retriever):
    """Returns given logits: a retriever whose ranking the test decides."""

    kind = "fixed"
    config_class = FixedConfig

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__(FixedConfig())
        self.logits = logits
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, batch: GraphBatch, tables: EmbeddingTables) -> torch.Tensor:
        return self.logits + self.bias


def hand_graph(
    gid: str, edges: list[tuple[int, int]], positives: list[int], answers: list[int], num_answers: int
) -> QuestionGraph:
    n = 1 + max(max(e) for e in edges)
    labels = torch.zeros(len(edges))
    labels[positives] = 1.0
    return QuestionGraph(
        id=gid,
        question=0,
        entity_text=torch.arange(n),
        topic=torch.arange(n) == 0,
        head=torch.tensor([h for h, _ in edges]),
        rel=torch.zeros(len(edges), dtype=torch.long),
        tail=torch.tensor([t for _, t in edges]),
        labels=labels,
        answers=torch.tensor(answers, dtype=torch.long),
        num_answers=num_answers,
    )


class TestEvaluate:
    def test_recalls_on_a_hand_made_ranking(self) -> None:
        # q1 ranking: t1, t4, t2, t3, t0. Positives t0 (rank 4) and t2 (rank 2). Answer 4 is the
        # tail of t3 (rank 3); a second answer is absent from the subgraph.
        q1 = hand_graph("q1", [(0, 1), (0, 2), (1, 3), (2, 4), (0, 3)], positives=[0, 2], answers=[4], num_answers=2)
        # q2: no positive (skipped by triple recall); its answer 2 is the tail of the top triple.
        q2 = hand_graph("q2", [(0, 1), (1, 2)], positives=[], answers=[2], num_answers=1)
        model = FixedScores(torch.tensor([0.1, 0.9, 0.5, 0.3, 0.7, 0.2, 0.8]))
        tables = EmbeddingTables(torch.zeros(5, DIM), torch.zeros(1, DIM), torch.zeros(1, DIM))
        m = evaluate(model, [collate([q1, q2])], tables, ks=(1, 3, 4, 5))
        assert [m[f"triple_recall@{k}"] for k in (1, 3, 4, 5)] == [0.0, 0.5, 0.5, 1.0]
        assert [m[f"answer_recall@{k}"] for k in (1, 3, 4, 5)] == [0.5, 0.5, 0.75, 0.75]
        assert (m["questions"], m["questions_with_positives"], m["questions_with_answers"]) == (2.0, 1.0, 2.0)
        assert m["loss"] == pytest.approx(
            float(nn.functional.binary_cross_entropy_with_logits(model.logits, torch.tensor([1.0, 0, 1, 0, 0, 0, 0])))
        )

    def test_question_without_triples_misses_its_answers(self) -> None:
        q = hand_graph("q", [(0, 1)], positives=[0], answers=[1], num_answers=1)
        bare = QuestionGraph(
            id="bare",
            question=0,
            entity_text=torch.zeros(0, dtype=torch.long),
            topic=torch.zeros(0, dtype=torch.bool),
            head=torch.zeros(0, dtype=torch.long),
            rel=torch.zeros(0, dtype=torch.long),
            tail=torch.zeros(0, dtype=torch.long),
            labels=torch.zeros(0),
            answers=torch.zeros(0, dtype=torch.long),
            num_answers=2,
        )
        tables = EmbeddingTables(*(torch.zeros(2, DIM),) * 3)
        m = evaluate(FixedScores(torch.tensor([0.0])), [collate([q, bare])], tables, ks=(1,))
        assert (m["triple_recall@1"], m["answer_recall@1"], m["questions_with_answers"]) == (1.0, 0.5, 2.0)
        empty_batch = evaluate(FixedScores(torch.zeros(0)), [collate([bare])], tables, ks=(1,))
        assert empty_batch["answer_recall@1"] == 0.0

    def test_no_question_counted_gives_nan(self) -> None:
        q = hand_graph("q", [(0, 1)], positives=[], answers=[], num_answers=0)
        tables = EmbeddingTables(*(torch.zeros(2, DIM),) * 3)
        m = evaluate(FixedScores(torch.tensor([0.0])), [collate([q])], tables, ks=(1,))
        assert math.isnan(m["triple_recall@1"]) and math.isnan(m["answer_recall@1"])


def toy_set() -> tuple[list[QuestionGraph], EmbeddingTables]:
    generator = torch.Generator().manual_seed(3)
    graphs = []
    for i in range(8):
        codes = torch.randperm(6 * 2 * 6, generator=generator)[:12].tolist()
        edges = [(c // 12, c // 6 % 2, c % 6) for c in codes]
        labels = torch.zeros(12)
        labels[[i % 12, (i + 5) % 12]] = 1.0
        graphs.append(
            QuestionGraph(
                id=f"q{i}",
                question=i,
                entity_text=torch.arange(6),
                topic=torch.arange(6) == 0,
                head=torch.tensor([h for h, _, _ in edges]),
                rel=torch.tensor([r for _, r, _ in edges]),
                tail=torch.tensor([t for _, _, t in edges]),
                labels=labels,
                answers=torch.tensor([edges[i % 12][2]]),
                num_answers=1,
            )
        )
    tables = EmbeddingTables(
        entities=torch.randn(6, DIM, generator=generator),
        relations=torch.randn(2, DIM, generator=generator),
        questions=torch.randn(8, DIM, generator=generator),
    )
    return graphs, tables


def tiny_mlp() -> MLPRetriever:
    torch.manual_seed(0)
    return MLPRetriever(MLPConfig(text_dim=DIM, hidden=8, dropout=0.1))


CONFIG = TrainConfig(epochs=3, lr=0.01, questions_per_batch=3, recall_k=4, eval_ks=(2, 4), seed=7)


def without_timing(history: list[dict[str, float]]) -> list[dict[str, float]]:
    return [{k: v for k, v in h.items() if k not in ("epoch_seconds", "train_seconds")} for h in history]


def without_best(history: list[dict[str, float]]) -> list[dict[str, float]]:
    """A resumed fit only knows the epochs it ran, so its best epoch may differ."""
    return [{k: v for k, v in h.items() if k != "best_epoch"} for h in without_timing(history)]


class TestFit:
    def test_history_callback_and_selection(self) -> None:
        graphs, tables = toy_set()
        seen: list[tuple[int, float]] = []

        def on_epoch_end(epoch: int, metrics: dict[str, float], model: Retriever, optimizer: Optimizer) -> None:
            seen.append((epoch, metrics["val_triple_recall@4"]))

        result = fit(tiny_mlp(), graphs[:6], graphs[6:], tables, CONFIG, on_epoch_end=on_epoch_end)
        assert [e for e, _ in seen] == [0, 1, 2]
        assert result.metric == "val_triple_recall@4"
        values = [h["val_triple_recall@4"] for h in result.history]
        assert result.best_metric == max(values) and result.best_epoch == values.index(max(values))
        assert {"train_loss", "val_loss", "val_answer_recall@2", "best_epoch"} <= set(result.history[0])

    def test_deterministic(self) -> None:
        graphs, tables = toy_set()
        first = fit(tiny_mlp(), graphs[:6], graphs[6:], tables, CONFIG)
        second = fit(tiny_mlp(), graphs[:6], graphs[6:], tables, CONFIG)
        assert without_timing(first.history) == without_timing(second.history)
        assert all(torch.equal(first.best_state[k], second.best_state[k]) for k in first.best_state)

    def test_resume_repeats_the_uninterrupted_run(self) -> None:
        graphs, tables = toy_set()
        saved: dict[str, object] = {}

        def keep_epoch_0(epoch: int, metrics: dict[str, float], model: Retriever, optimizer: Optimizer) -> None:
            if epoch == 0:
                saved["model"] = copy.deepcopy(model.state_dict())
                saved["optimizer"] = copy.deepcopy(optimizer.state_dict())

        full_model = tiny_mlp()
        full = fit(full_model, graphs[:6], graphs[6:], tables, CONFIG, on_epoch_end=keep_epoch_0)
        resumed_model = tiny_mlp()
        resumed_model.load_state_dict(saved["model"])  # type: ignore[arg-type]
        state: dict = saved["optimizer"]  # type: ignore[assignment]
        resumed = fit(resumed_model, graphs[:6], graphs[6:], tables, CONFIG, start_epoch=1, optimizer_state=state)
        assert without_best(resumed.history) == without_best(full.history)[1:]
        final, again = full_model.state_dict(), resumed_model.state_dict()
        assert all(torch.equal(final[k], again[k]) for k in final)

    def test_questions_without_positives_are_skipped_or_refused(self) -> None:
        graphs, tables = toy_set()
        empty = [dataclasses.replace(g, labels=torch.zeros(g.num_triples)) for g in graphs]
        with pytest.raises(ValueError, match="skip_unlabelled"):
            fit(tiny_mlp(), empty, [], tables, CONFIG)
        result = fit(tiny_mlp(), empty, [], tables, CONFIG.model_copy(update={"skip_unlabelled": False, "epochs": 1}))
        assert result.best_epoch == 0 and math.isnan(result.best_metric)

    def test_select_by_answer_recall(self) -> None:
        config = validate_config({"select_by": "val_answer_recall", "recall_k": 50}, TrainConfig)
        assert config.selection_metric == "val_answer_recall@50"
        assert config.ks == (10, 20, 50, 100, 200)


def test_end_to_end_from_samples() -> None:
    encoder = HashEncoder(DIM)
    tables, index = build_tables([ALICE, BOB], encoder)
    graphs = question_graphs([ALICE, BOB], index, weak_rows([ALICE, BOB], LabelConfig()))
    torch.manual_seed(0)
    model = MLPRetriever(MLPConfig(text_dim=DIM, hidden=8))
    result = fit(model, graphs, graphs, tables, TrainConfig(epochs=2, recall_k=1, eval_ks=(1, 5)))
    assert result.history[-1]["val_triple_recall@5"] == 1.0
    assert result.history[-1]["val_answer_recall@5"] == 0.75  # s1 finds Paris but not the absent Lyon
    assert len(make_batches(graphs, 1)) == 2


def _sized(qid: str, triples: int) -> QuestionGraph:
    """A chain graph with ``triples`` triples (only the size matters here)."""
    ids = torch.arange(triples)
    return QuestionGraph(qid, 0, torch.zeros(triples + 1, dtype=torch.long), torch.zeros(triples + 1, dtype=torch.bool),
                         ids, torch.zeros(triples, dtype=torch.long), ids + 1)


def test_batches_by_size_group_similar_questions_and_pair_workers_by_size_rank() -> None:
    # two DDP workers' shards: different questions with a similar size profile, one epoch seed
    profiles = {"a": [1, 50, 2, 40, 3, 60, 4, 30], "b": [2, 55, 1, 45, 3, 65, 5, 35]}
    ranks = []
    for worker, profile in profiles.items():
        shard = [_sized(f"{worker}-{i}", size) for i, size in enumerate(profile)]
        batches = [int(b.num_triples) for b in make_batches(shard, 2, torch.Generator().manual_seed(7), "by_size")]
        assert sorted(batches) == ([3, 7, 70, 110] if worker == "a" else [3, 8, 80, 120])  # sorted pairs
        ranks.append([sorted(batches).index(n) for n in batches])
    assert ranks[0] == ranks[1] and ranks[0] != [0, 1, 2, 3]  # same size rank at every step, in shuffled order
    mixed = make_batches([_sized(str(i), n) for i, n in enumerate(profiles["a"])], 2, torch.Generator().manual_seed(7))
    assert sorted(int(b.num_triples) for b in mixed) != [3, 7, 70, 110]  # plain shuffling mixes sizes
