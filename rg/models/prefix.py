"""The tokens every prompt of one template opens with, computed once.

A chat template's system turn and a prompt template's instructions come before the question, so every
prompt of the template opens with the same tokens (31 of the demo reader's 169 on average). Under
causal attention their keys, values and hidden states are the same in every prompt: training's frozen
pass (:mod:`rg.training.frozen_prefix`) and generation (:class:`OpeningCache`) compute them once and
run each prompt's own tokens on them. The results are those of the whole prompt to float tolerance
(tests/test_frozen_prefix.py, tests/test_tuned_reader.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import nn


def shared_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest run of leading tokens that every sequence shares (0 for none or no sequence)."""
    if not sequences:
        return 0
    first, length = sequences[0], min(len(s) for s in sequences)
    for sequence in sequences[1:]:
        length = next((i for i in range(length) if sequence[i] != first[i]), length)
    return length


class OpeningCache:
    """The key/value cache of a causal LM over a fixed opening, copied for each prompt that starts with it.

    Args:
        model: A causal LM whose weights no longer change (a reader in eval mode); the cache is computed
            from them at the first prompt.
        opening: The token ids every prompt is expected to open with, or a function giving them (called at
            the first prompt, so that building a reader renders nothing).

    ``for_prompt(ids)`` gives a fresh copy (generation appends to it) when ``ids`` opens with
    ``opening`` and has tokens of its own after it, else None (the prompt then runs whole).
    """

    def __init__(self, model: nn.Module, opening: Sequence[int] | Callable[[], Sequence[int]]) -> None:
        self.model = model
        self._opening = opening
        self._cache = None

    @property
    def opening(self) -> list[int]:
        if callable(self._opening):
            self._opening = self._opening()
        return list(self._opening)

    @torch.inference_mode()
    def _computed(self):
        from transformers import DynamicCache

        if self._cache is None:
            device = next(self.model.parameters()).device
            ids = torch.tensor([self.opening], device=device)
            self._cache = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), cache=DynamicCache(),
                                     use_cache=True).cache
        return self._cache

    def for_prompt(self, ids: Sequence[int]):
        """A copy of the opening's cache for ``ids``, or None when ``ids`` does not open with it."""
        opening = self.opening
        if not opening or len(ids) <= len(opening) or list(ids[: len(opening)]) != opening:
            return None
        return copy.deepcopy(self._computed())
