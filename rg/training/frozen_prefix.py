"""The frozen layers of a LoRA model, run once per training example instead of once per step.

With ``lora.top_layers`` the adapter lives in the last decoder layers only; the layers below it have
no trainable tensor and no dropout, so what they output for a prompt is the same in every epoch.
:class:`FrozenPrefix` runs them once per example (one example at a time) and keeps
the hidden states that enter the lowest adapted layer; training steps then run only the adapted
layers on those states (``ReaderLoss(..., hidden=...)``)::

    prefix = FrozenPrefix.build(model, examples, budget_mb=2048)   # None when nothing is frozen or too big
    for batch in prefix.batches([[0, 3], [1, 2]]):
        loss = ReaderLoss(model)(**batch)   # runs the layers from prefix.start up

The states are kept in the model's dtype (bf16 or fp32) exactly as the full forward pass computes
them, so the loss is the one the full pass gives (to float tolerance: tests/test_frozen_prefix.py).

The tokens all examples open with (a template's opening, :mod:`rg.models.prefix`) run once; each
example's own tokens then run on their keys and values (a cache cropped back to them after each example).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from rg.models.prefix import shared_prefix
from rg.retrievers.planner.model import IGNORE_INDEX, Example

_LAYER = re.compile(r"\.layers\.(\d+)\.")


def first_adapted_layer(model: nn.Module) -> int:
    """Index of the lowest decoder layer holding a trainable tensor (0 when none is found by name)."""
    layers = [int(m.group(1)) for name, p in model.named_parameters() if p.requires_grad
              for m in [_LAYER.search(name)] if m is not None]
    return min(layers) if layers else 0


@contextmanager
def decoder_slice(decoder: nn.Module, start: int, stop: int | None, norm: bool = True) -> Iterator[nn.Module]:
    """``decoder`` running only its layers ``start:stop`` (and its final norm only when ``norm``).

    The decoder's own forward (``inputs_embeds=`` the hidden states entering layer ``start``) then
    builds the causal mask and rotary embeddings as it always does, so the slice computes what those
    layers compute inside the full pass.
    """
    layers, final_norm = decoder.layers, decoder.norm
    decoder.layers = nn.ModuleList(list(layers)[start:stop])
    if not norm:
        decoder.norm = nn.Identity()
    try:
        yield decoder
    finally:
        decoder.layers, decoder.norm = layers, final_norm


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded batch: 0 at each row's first real token."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


@dataclass
class FrozenPrefix:
    """Per-example hidden states entering decoder layer ``start``.

    Attributes:
        start: The lowest adapted layer.
        states: One ``(T_i, H)`` tensor per example, in the examples' order.
        examples: The examples (their labels and lengths).
        seconds: Wall time of the one pass through the frozen layers.
    """

    start: int
    states: list[torch.Tensor]
    examples: Sequence[Example]
    seconds: float

    @staticmethod
    def size_mb(model: nn.Module, examples: Sequence[Example]) -> float:
        """Memory the states of ``examples`` would take."""
        config = model.config if hasattr(model, "config") else model.get_base_model().config
        dtype = next(p for p in model.parameters() if not p.requires_grad).dtype
        tokens = sum(len(e.input_ids) for e in examples)
        return tokens * config.hidden_size * torch.finfo(dtype).bits / 8 / 2**20

    @classmethod
    @torch.no_grad()
    def build(cls, model: nn.Module, examples: Sequence[Example], budget_mb: float,
              share_opening: bool = True) -> "FrozenPrefix | None":
        """Run the frozen layers of ``model`` (a peft model) once over each example.

        One example at a time, without padding (batches of similar length were no faster on a
        2-core CPU, and padding would change the states by float rounding); the leading tokens all
        examples share run once (:func:`shared_prefix`), each example's own tokens on their cache
        (``share_opening=False`` runs every example whole: the baseline of ``bench.read_stage``).
        Returns None when no layer is frozen below the adapter, or when the states would take more
        than ``budget_mb`` (training then runs every layer at each step, as without a cache).
        """
        from transformers import DynamicCache

        start = first_adapted_layer(model)
        if start == 0 or cls.size_mb(model, examples) > budget_mb:
            return None
        decoder = model.get_decoder()
        began, states = time.perf_counter(), []
        device = next(model.parameters()).device
        shortest = min((len(e.input_ids) for e in examples), default=0)
        shared = min(shared_prefix([e.input_ids for e in examples]), shortest - 1) if share_opening else 0
        was_training = model.training
        model.eval()
        with decoder_slice(decoder, 0, start, norm=False):
            cache, head = DynamicCache(), None
            if shared > 0:
                ids = torch.tensor([examples[0].input_ids[:shared]], device=device)
                ones = torch.ones_like(ids)
                head = decoder(input_ids=ids, attention_mask=ones, position_ids=positions_of(ones), cache=cache,
                               use_cache=True).last_hidden_state[0]  # (P, H)
            for example in examples:
                ids = torch.tensor([example.input_ids[shared:]], device=device)
                mask = torch.ones((1, len(example.input_ids)), dtype=torch.long, device=device)
                out = decoder(input_ids=ids, attention_mask=mask, position_ids=positions_of(mask)[:, shared:],
                              cache=cache if shared else None, use_cache=bool(shared))
                own = out.last_hidden_state[0]  # (T_i - P, H)
                states.append(own if head is None else torch.cat([head, own]))
                if shared:
                    cache.crop(shared - cache.get_seq_length())  # back to the shared tokens (negative: tokens removed)
        model.train(was_training)
        return cls(start, states, examples, time.perf_counter() - began)

    def collate(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        """Left-padded ``hidden`` (N, T, H), ``attention_mask`` and ``labels`` of these examples."""
        width = max(len(self.examples[i].input_ids) for i in indices)
        first = self.states[indices[0]]
        hidden = torch.zeros((len(indices), width, first.shape[-1]), dtype=first.dtype, device=first.device)
        labels = torch.full((len(indices), width), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(indices), width), dtype=torch.long)
        for row, index in enumerate(indices):
            n = len(self.examples[index].input_ids)
            hidden[row, width - n:] = self.states[index]
            labels[row, width - n:] = torch.tensor(self.examples[index].labels)
            mask[row, width - n:] = 1
        return {"hidden": hidden, "attention_mask": mask, "labels": labels}

    def batches(self, chunks: Sequence[Sequence[int]]) -> list[dict[str, torch.Tensor]]:
        """One collated batch per list of example indices (``planner_loop.batch_indices``)."""
        return [self.collate(chunk) for chunk in chunks]
