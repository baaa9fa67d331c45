"""Pretraining the gated walk's gates on relation paths (rg.training.gate_pretrain), on a tiny KB."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from rg.jobs.weak_labels import voted_paths
from rg.supervision.answer_paths import search_kb
from rg.data.sample import Sample
from rg.retrievers.walk import GatedWalk
from rg.supervision.weak import WeakConfig
from rg.training.gate_pretrain import GatePretrainConfig, gate_target_tensor, pretrain_walk, step_accuracy

DIM = 32
RELATIONS = {"directed_by": 0, "written_by": 1}


class WordEncoder:
    """A stand-in for TextEncoder: the sum of a fixed pseudo-random vector per word."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        def word(w: str) -> np.ndarray:
            return np.random.default_rng(int.from_bytes(hashlib.sha256(w.encode()).digest()[:8], "little")).normal(size=DIM)

        return np.asarray([sum(word(w) for w in t.split()) for t in texts], dtype=np.float32)


def test_targets_by_step_and_direction():
    paths = [(("directed_by", "directed_by^-1", "written_by"),), (("written_by",), ("unknown_relation",))]
    targets = gate_target_tensor(paths, RELATIONS, steps=2)
    assert targets.shape == (2, 4, 2)
    assert targets[0].tolist() == [[1, 0], [0, 0], [0, 0], [1, 0]]  # step 3 is past the walk
    assert targets[1].tolist() == [[0, 1], [0, 0], [0, 0], [0, 0]]  # a relation no subgraph has is left out


def test_step_accuracy_needs_every_step_right():
    targets = torch.zeros(2, 4, 2)
    targets[:, 0, 0] = 1  # step 1: directed_by forward
    targets[:, 3, 1] = 1  # step 2: written_by backward
    logits = torch.full((2, 4, 2), -5.0)
    logits[:, 0, 0] = 5
    logits[0, 3, 1] = 5  # question 0: both steps right
    logits[1, 2, 0] = 5  # question 1: step 2 forward instead of backward
    assert step_accuracy(logits, targets) == 0.5


def kb_file(tmp_path) -> str:
    lines = [f"F{i}|directed_by|D{i}\nF{i}|written_by|W{i}\n" for i in range(1, 7)]
    path = tmp_path / "kb.txt"
    path.write_text("".join(lines))
    return str(path)


def question(qid: str, verb: str, film: int) -> Sample:
    answer = f"{'D' if verb == 'directed' else 'W'}{film}"
    return Sample(qid, f"who {verb} F{film}", (answer,), (f"F{film}",), (answer,), (), hops=1)


def test_pretraining_learns_the_relation_of_each_wording(tmp_path):
    weak = WeakConfig(rule="answer_f1", max_path_len=1, kb={"path": kb_file(tmp_path), "format": "metaqa"})
    train = [question(f"d{i}", "directed", i) for i in range(1, 5)] + [question(f"w{i}", "wrote", i) for i in range(1, 5)]
    val = [question("d5", "directed", 5), question("w6", "wrote", 6)]
    encoder = WordEncoder()
    relations = torch.as_tensor(encoder.encode(list(RELATIONS)))
    torch.manual_seed(0)
    walk = GatedWalk(DIM, steps=1, width=8, hidden=32)
    config = GatePretrainConfig(questions=8, steps=300, batch_size=8, lr=0.01)
    paths = voted_paths([*train, *val], weak, {s.id for s in train}, search_kb(weak))
    report = pretrain_walk(walk, train, val, RELATIONS, relations, encoder, paths, config)
    assert report["with_paths"] == 8 and report["val_questions_with_paths"] == 2
    assert report["train_step_accuracy"] == 1.0 and report["val_step_accuracy"] == 1.0
    assert report["val_step_accuracy_by_hops"] == {"1": 1.0}
    assert report["losses"][-1] < report["losses"][0]
    with torch.no_grad():
        gates = torch.sigmoid(walk.relation_logits(torch.as_tensor(encoder.encode(["who directed F6"])), relations))
    assert gates[0, 0, 0] > 0.9 and gates[0, 0, 1] < 0.1  # forward directed_by open, written_by shut


def test_pretraining_without_any_path_is_an_error(tmp_path):
    weak = WeakConfig(rule="answer_f1", max_path_len=1, kb={"path": kb_file(tmp_path), "format": "metaqa"})
    lost = [Sample("x", "who directed F1", ("Nobody",), ("F1",), ("Nobody",), ())]
    walk = GatedWalk(DIM, steps=1, width=8, hidden=32)
    relations = torch.zeros(2, DIM)
    with pytest.raises(ValueError, match="none of the 1 walk_pretrain questions has an answer-F1 relation path"):
        paths = voted_paths(lost, weak, {"x"}, search_kb(weak))
        pretrain_walk(walk, lost, [], RELATIONS, relations, WordEncoder(), paths, GatePretrainConfig(questions=1))


def test_job_config_checks_what_pretraining_needs():
    from rg.jobs.train_retriever import TrainJobConfig

    base = {"input": "x", "run_name": "r", "output_dir": "o", "walk_pretrain": {"questions": 100}}
    with pytest.raises(ValueError, match="set retriever.walk_steps > 0"):
        TrainJobConfig.model_validate(base)
    with pytest.raises(ValueError, match="set labels.weak.kb"):
        TrainJobConfig.model_validate({**base, "retriever": {"kind": "mlp", "walk_steps": 2}})
    kb = {"weak": {"rule": "answer_f1", "kb": {"path": "kb.txt", "format": "metaqa"}}}
    ok = TrainJobConfig.model_validate({**base, "retriever": {"kind": "mlp", "walk_steps": 2}, "labels": kb})
    assert ok.walk_pretrain.questions == 100 and ok.walk_pretrain.steps == 3000 and ok.walk_pretrain.freeze
