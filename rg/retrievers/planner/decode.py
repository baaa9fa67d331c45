"""Beam search over relation paths with the KV cache, optionally constrained by a graph trie.

A manual loop rather than ``generate``: prompts of a batch of questions are left-padded and
prefilled once, the cache is expanded to ``k`` beams per question, and each step feeds one
token per beam, scores ``beam score + log p(token)`` over all ``k × V`` continuations of a
question, keeps the best ``k`` and reorders the cache. A beam that wrote ``</PATH>`` is finished
and carries its score unchanged (it may only write padding at log-probability 0), so the search
ranks complete paths by their sequence log-probability, like RoG's ``num_beams`` generation
without a length penalty.

Constrained mode (rg) masks every token that the beam's trie node does not allow, so every
returned path exists in the question's graph. Unconstrained mode (RoG) lets the model write any
token; what it wrote is parsed afterwards and may be malformed or fail to ground.

Why not ``generate``: :func:`library_beam_search` runs the same search through
``generate(num_beams=k, num_return_sequences=k, prefix_allowed_tokens_fn=...)`` with
``length_penalty=0`` (transformers' canonical settings). It does not return the same beams: the
library keeps finished sequences in a pool of their own and always continues ``k`` running
beams, while this loop lets a finished beam hold one of its ``k`` slots, so a complete path can
be crowded out by running beams that later score lower. The two agree for k = 1 and often for
k > 1, but not always (``tests/test_planner_decode.py`` pins a hand-made case;
``bench.planner_decode`` counts them). Keeping the planner's measured behaviour, the hand loop
stays, and ``pyproject.toml`` pins the transformers release it was run against (its cache API:
``batch_repeat_interleave``, ``reorder_cache``, the ``cache`` keyword, ``logits_to_keep``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rg.retrievers.planner.model import PlannerModel
from rg.retrievers.planner.trie import DONE, TokenTrie

FINISHED_FLOOR = -1.0e8
"""``generate`` marks unfinished or empty slots with scores near -1e9; those below this are dropped."""

NEG_INF = float("-inf")


@dataclass(frozen=True)
class Beam:
    """One decoded sequence.

    Attributes:
        tokens: Ids written after ``<PATH>`` (up to and including ``</PATH>`` when finished).
        score: Sum of the tokens' log-probabilities.
        relation_path: The parsed relation path, None when the sequence is malformed or unfinished.
    """

    tokens: tuple[int, ...]
    score: float
    relation_path: tuple[str, ...] | None


def _left_pad(prompts: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt):] = 1
    return ids, mask


@torch.inference_mode()
def beam_search(
    planner: PlannerModel,
    prompts: Sequence[Sequence[int]],
    k: int,
    tries: Sequence[TokenTrie] | None = None,
) -> list[list[Beam]]:
    """The ``k`` best relation paths per prompt.

    Args:
        planner: The planner (put it in eval mode).
        prompts: Prompt ids per question, each ending with ``<PATH>``.
        k: Beam width; also the number of paths returned per question (fewer when a trie
            holds fewer paths).
        tries: One token trie per prompt (constrained decoding) or None (unconstrained).

    Returns:
        Per prompt, its beams best first; beams of probability 0 under the constraint are dropped.

    Shapes:
        prompts: B lists -> B lists of ≤ k beams
    """
    if k < 1:
        raise ValueError(f"beam width k must be >= 1, got {k}")
    if tries is not None and len(tries) != len(prompts):
        raise ValueError(f"{len(tries)} tries for {len(prompts)} prompts; give one trie per prompt")
    if not prompts:
        return []
    vocab, lm = planner.vocab, planner.lm
    batch, beams = len(prompts), len(prompts) * k
    device = next(lm.parameters()).device
    ids, mask = _left_pad(prompts, vocab.pad)
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)
    out = lm(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    cache = out.cache
    cache.batch_repeat_interleave(k)
    logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1).repeat_interleave(k, dim=0)  # (B*k, V)
    mask = mask.repeat_interleave(k, dim=0)  # (B*k, T)
    next_pos = positions[:, -1].repeat_interleave(k) + 1  # (B*k,)
    scores = torch.full((batch, k), NEG_INF, device=device)
    scores[:, 0] = 0.0
    scores = scores.view(-1)  # (B*k,)
    tokens = torch.empty((beams, 0), dtype=torch.long, device=device)
    finished = torch.zeros(beams, dtype=torch.bool, device=device)
    states: list[TokenTrie] | None = None if tries is None else [tries[b // k] for b in range(beams)]
    offsets = (torch.arange(batch, device=device) * k).repeat_interleave(k)  # (B*k,)
    vocab_size = logp.shape[-1]

    for _ in range(planner.config.max_path_tokens):
        if states is not None:
            rows = [b for b in range(beams) for _ in states[b]]
            cols = [t for b in range(beams) for t in states[b]]
            allowed = torch.full_like(logp, NEG_INF)
            if rows:
                allowed[rows, cols] = 0.0
            logp = logp + allowed
        if finished.any():
            logp[finished] = NEG_INF
            logp[finished, vocab.pad] = 0.0
        candidates = (scores[:, None] + logp).view(batch, k * vocab_size)  # (B, k*V)
        top, index = candidates.topk(k, dim=-1)  # (B, k)
        source = (index // vocab_size).view(-1) + offsets  # (B*k,)
        token = (index % vocab_size).view(-1)  # (B*k,)
        scores = top.view(-1)
        dead = torch.isinf(scores)
        was_finished = finished[source]
        tokens = torch.cat([tokens[source], token[:, None]], dim=1)
        finished = was_finished | dead | (token == vocab.end)
        if states is not None:
            stop = (dead | was_finished).tolist()
            src, tok = source.tolist(), token.tolist()
            states = [DONE if stop[b] else states[src[b]][tok[b]] for b in range(beams)]
        if bool(finished.all()):
            break
        cache.reorder_cache(source)
        mask = torch.cat([mask[source], torch.ones((beams, 1), dtype=mask.dtype, device=device)], dim=1)
        next_pos = next_pos[source]
        out = lm(
            input_ids=token[:, None], attention_mask=mask, position_ids=next_pos[:, None],
            cache=cache, use_cache=True,
        )
        next_pos = next_pos + 1
        logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)

    results: list[list[Beam]] = []
    scores_list, token_rows = scores.tolist(), tokens.tolist()
    for q in range(batch):
        found = []
        for b in range(q * k, (q + 1) * k):
            if scores_list[b] == NEG_INF:
                continue
            row = token_rows[b]
            written = tuple(row[: row.index(vocab.end) + 1] if vocab.end in row else row)
            found.append(Beam(written, scores_list[b], vocab.parse(written)))
        results.append(found)
    return results


def _beams_from_rows(vocab, rows: list[list[int]], scores: list[float], batch: int, k: int) -> list[list[Beam]]:
    results: list[list[Beam]] = []
    for q in range(batch):
        found = []
        for b in range(q * k, (q + 1) * k):
            if scores[b] == NEG_INF or scores[b] < FINISHED_FLOOR:
                continue
            row = rows[b]
            written = tuple(row[: row.index(vocab.end) + 1] if vocab.end in row else row)
            found.append(Beam(written, scores[b], vocab.parse(written)))
        results.append(found)
    return results


@torch.inference_mode()
def library_beam_search(
    planner: PlannerModel,
    prompts: Sequence[Sequence[int]],
    k: int,
    tries: Sequence[TokenTrie] | None = None,
) -> list[list[Beam]]:
    """The same search through ``transformers``' ``generate`` (the reference :func:`beam_search` is compared with).

    ``num_beams=k``, ``num_return_sequences=k``, ``length_penalty=0``, ``early_stopping="never"``
    (transformers' canonical beam search), the trie as ``prefix_allowed_tokens_fn``; k = 1 is
    greedy search, scored from the raw logits. Not used for planning: see the module docstring.

    Args, Returns: as :func:`beam_search`.
    """
    from transformers import GenerationConfig

    if k < 1:
        raise ValueError(f"beam width k must be >= 1, got {k}")
    if tries is not None and len(tries) != len(prompts):
        raise ValueError(f"{len(tries)} tries for {len(prompts)} prompts; give one trie per prompt")
    if not prompts:
        return []
    vocab, lm = planner.vocab, planner.lm
    device = next(lm.parameters()).device
    ids, mask = _left_pad(prompts, vocab.pad)
    width = ids.shape[1]

    def allowed(row: int, sequence: torch.Tensor) -> list[int]:
        node = tries[row]
        for token in sequence[width:].tolist():
            node = node.get(token, DONE)
        return list(node) or [vocab.pad]

    config = GenerationConfig(
        num_beams=k, num_return_sequences=k, max_new_tokens=planner.config.max_path_tokens, do_sample=False,
        length_penalty=0.0, early_stopping="never", eos_token_id=vocab.end, pad_token_id=vocab.pad,
        output_scores=True, output_logits=k == 1, return_dict_in_generate=True,
    )
    out = lm.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config,
                      prefix_allowed_tokens_fn=None if tries is None else allowed)
    rows = out.sequences[:, width:].tolist()
    if k > 1:
        return _beams_from_rows(vocab, rows, out.sequences_scores.tolist(), len(prompts), k)
    scores = []
    for b, row in enumerate(rows):  # greedy: sum log p(token) of the raw logits, as the hand loop scores
        total = 0.0
        for step, token in enumerate(row[: len(out.logits)]):
            total += float(torch.log_softmax(out.logits[step][b].float(), dim=-1)[token])
            if token == vocab.end:
                break
        scores.append(total)
    return _beams_from_rows(vocab, rows, scores, len(prompts), 1)
