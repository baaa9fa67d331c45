"""Reusing the frozen layers' outputs (rg.training.frozen_prefix) trains exactly as recomputing them: the same
loss, the same adapter gradients and the same training history, on a tiny LLaMA built from a config."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rg.reasoning.tuned_reader import TunedReaderSettings
from rg.retrievers.planner.model import IGNORE_INDEX, Example
from rg.models.prefix import shared_prefix
from rg.training.frozen_prefix import FrozenPrefix, first_adapted_layer
from rg.training.planner_loop import batch_indices, collate
from rg.training.reader_loop import ReaderFitConfig, ReaderLoss, fit_reader


def tiny_lora(top_layers: int | None = 2, seed: int = 0):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    base = LlamaForCausalLM(config).float()
    layers = None if top_layers is None else list(range(4 - top_layers, 4))
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
                      task_type="CAUSAL_LM", layers_to_transform=layers, init_lora_weights=False)
    return get_peft_model(base, lora)


def examples() -> list[Example]:
    """Prompts of different lengths (left padding in a batch), each with a two-token target."""
    out = []
    for index, length in enumerate((7, 11, 5, 9)):
        prompt = [(3 * index + k) % 45 + 2 for k in range(length)]
        target = [index + 2, 1]
        out.append(Example(str(index), tuple(prompt + target), tuple([IGNORE_INDEX] * length + target)))
    return out


def templated(head: int = 4) -> list[Example]:
    """The same prompts behind ``head`` tokens they all share (a chat template's opening)."""
    opening = [47, 48, 49, 46][:head]
    return [Example(e.id, tuple(opening) + e.input_ids, (IGNORE_INDEX,) * head + e.labels) for e in examples()]


def test_shared_prefix_is_the_longest_common_opening():
    assert shared_prefix([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    assert shared_prefix([[1, 2], [1, 2, 3]]) == 2
    assert shared_prefix([[9, 2], [1, 2]]) == 0
    assert shared_prefix([[4, 5, 6]]) == 3
    assert shared_prefix([]) == 0
    assert shared_prefix([e.input_ids for e in templated()]) == 4


@pytest.mark.parametrize("data", [examples(), templated(), templated()[:1]], ids=["no opening", "opening", "one"])
def test_the_states_are_those_entering_the_lowest_adapted_layer(data):
    model = tiny_lora(2)
    prefix = FrozenPrefix.build(model, data, budget_mb=16)
    for example, state in zip(data, prefix.states):
        with torch.no_grad():
            full = model(input_ids=torch.tensor([example.input_ids]), output_hidden_states=True).hidden_states[2][0]
        assert state.shape == full.shape
        assert torch.allclose(state, full, atol=1e-6)


def test_the_lowest_adapted_layer_is_found():
    assert first_adapted_layer(tiny_lora(2)) == 2
    assert first_adapted_layer(tiny_lora(None)) == 0


@pytest.mark.parametrize("head", [0, 4])
def test_cached_states_give_the_full_pass_loss_and_gradients(head):
    model = tiny_lora(2)
    data = templated(head)
    prefix = FrozenPrefix.build(model, data, budget_mb=16)
    assert prefix is not None and prefix.start == 2
    assert [s.shape[0] for s in prefix.states] == [9 + head, 13 + head, 7 + head, 11 + head]
    loss_fn = ReaderLoss(model)
    grads = []
    for batch in (collate([data[0], data[1]], 0, side="left"), prefix.collate([0, 1])):
        model.zero_grad()
        loss = loss_fn(**batch)
        loss.backward()
        grads.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}))
    (full, full_grads), (cached, cached_grads) = grads
    assert torch.allclose(full, cached, atol=1e-6)
    assert full_grads.keys() == cached_grads.keys() and len(full_grads) == 8  # q and v, A and B, 2 layers
    for name in full_grads:
        assert torch.allclose(full_grads[name], cached_grads[name], atol=1e-6), name


@pytest.mark.parametrize("length_window", [1, 3])
def test_training_with_the_cache_repeats_training_without_it(length_window):
    tokenizer = SimpleNamespace(pad_token_id=0, eos_token_id=1)
    histories = []
    for budget in (0, 16):
        model = tiny_lora(2, seed=1)
        config = ReaderFitConfig(epochs=2, batch_size=2, lr=0.01, frozen_cache_mb=budget, length_window=length_window)
        histories.append(fit_reader(model, tokenizer, examples(), [], TunedReaderSettings(), config))
    without, with_cache = histories
    assert [h["frozen_layers"] for h in without] == [0.0, 0.0]
    assert [h["frozen_layers"] for h in with_cache] == [2.0, 2.0]
    assert with_cache[0]["frozen_prefix_seconds"] > 0 and with_cache[1]["frozen_prefix_seconds"] == 0
    for a, b in zip(without, with_cache):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-5)
    assert without[1]["train_loss"] < without[0]["train_loss"]


def test_no_cache_without_frozen_layers_or_over_the_budget():
    assert FrozenPrefix.build(tiny_lora(None), examples(), budget_mb=16) is None
    model = tiny_lora(2)
    assert FrozenPrefix.size_mb(model, examples()) == pytest.approx(40 * 32 * 4 / 2**20)
    assert FrozenPrefix.build(model, examples(), budget_mb=0.001) is None


def test_batch_indices_without_a_window_is_the_plain_seeded_shuffle():
    lengths = [5, 9, 3, 7, 2, 8]
    batches = batch_indices(lengths, 2, torch.Generator().manual_seed(4))
    order = torch.randperm(6, generator=torch.Generator().manual_seed(4)).tolist()
    assert batches == [order[0:2], order[2:4], order[4:6]]


def test_batch_indices_with_a_window_pairs_similar_lengths_and_keeps_every_example():
    lengths = [10, 200, 11, 205, 12, 210, 13, 215]
    batches = batch_indices(lengths, 2, torch.Generator().manual_seed(0), length_window=4)
    assert sorted(i for b in batches for i in b) == list(range(8))
    assert sorted(sorted(lengths[i] for i in b) for b in batches) == [[10, 11], [12, 13], [200, 205], [210, 215]]
    again = batch_indices(lengths, 2, torch.Generator().manual_seed(0), length_window=4)
    assert again == batches
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    plain = batch_indices(lengths, 2, torch.Generator().manual_seed(0))
    assert padded < sum(max(lengths[i] for i in b) * len(b) for b in plain)
