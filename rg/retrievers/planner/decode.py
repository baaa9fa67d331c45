"""Beam search over relation paths through ``transformers``' ``generate``, optionally constrained by a graph trie.

Prompts of a batch of questions are left-padded and handed to
``generate(num_beams=k, num_return_sequences=k, length_penalty=0, early_stopping="never")``,
transformers' canonical beam search: each step scores ``beam score + log p(token)`` over the
``k × V`` continuations of a question, a beam that writes ``</PATH>`` moves to a pool of finished
paths, ``k`` running beams go on, and the search stops once no running beam can beat the worst
finished one. Complete paths are ranked by their sequence log-probability, like RoG's
``num_beams`` generation without a length penalty. k = 1 is greedy search.

Constrained mode (rg) adds :class:`TrieConstraint`, a ``LogitsProcessor`` that keeps, for every
running beam, only the tokens its trie node allows and sets the rest to ``-inf``, so every
returned path exists in the question's graph; beams of probability 0 (a question with fewer
than ``k`` paths in its trie) are dropped. Unconstrained mode (RoG) lets the model write any
token; what it wrote is parsed afterwards and may be malformed or fail to ground.

Until issue 58 the planner ran its own KV-cache loop (``reorder_cache`` and friends, which tied
rg to one transformers release). That loop let a finished beam hold one of its ``k`` slots, so a
complete path could be crowded out by running beams that later scored lower; ``generate`` keeps
finished paths in their own pool, which returns the same or a higher-scoring set of ``k`` paths
(``tests/test_planner_decode.py`` pins a hand-made case; ``bench.planner_decode`` compares the
two on the demo's and MetaQA's questions).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from rg.retrievers.planner.model import PlannerModel
from rg.retrievers.planner.trie import DONE, TokenTrie

FINISHED_FLOOR = -1.0e8
"""``generate`` fills the finished pool with scores of -1e9 until real paths arrive; slots below this are dropped."""

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


Decoder = Callable[[PlannerModel, Sequence[Sequence[int]], int, Sequence[TokenTrie] | None], list[list[Beam]]]
"""A beam search with :func:`beam_search`'s signature (``bench.planner_decode`` passes an earlier one)."""


class TrieConstraint(LogitsProcessor):
    """Masks every token that a beam's trie node does not allow, for all beams of a batch at once.

    ``generate`` calls it once per step with the running sequences (prompt and the tokens written
    so far) of all ``B × k`` beams, question-major. Each beam's node is found from its parent's
    (one dictionary step, remembered per written prefix), the allowed ``(beam, token)`` pairs are
    gathered into two index lists and the scores are copied through one ``-inf`` tensor. A node
    without children (after ``</PATH>``, or a question whose trie is empty) allows nothing.

    Args:
        tries: One token trie per prompt (entered after ``<PATH>``).
        beams: Beams per prompt (the rows of one prompt are consecutive).
        prompt_width: Columns of the left-padded prompts; written tokens follow them.
        normalise: Apply ``log_softmax`` first (greedy search hands processors raw logits; beam
            search hands them log-probabilities already), so the kept scores are log-probabilities.

    Shapes:
        input_ids: (B*k, prompt_width + t); scores: (B*k, V) -> (B*k, V)
    """

    def __init__(self, tries: Sequence[TokenTrie], beams: int, prompt_width: int, normalise: bool) -> None:
        self.tries, self.beams, self.width, self.normalise = tries, beams, prompt_width, normalise
        self._allowed: dict[tuple[int, tuple[int, ...]], tuple[TokenTrie, list[int]]] = {}

    def _node(self, prompt: int, written: tuple[int, ...]) -> tuple[TokenTrie, list[int]]:
        key = (prompt, written)
        found = self._allowed.get(key)
        if found is None:
            node = self.tries[prompt] if not written else self._node(prompt, written[:-1])[0].get(written[-1], DONE)
            found = self._allowed[key] = (node, list(node))
        return found

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.normalise:
            scores = torch.log_softmax(scores.float(), dim=-1)
        rows: list[int] = []
        cols: list[int] = []
        for row, written in enumerate(input_ids[:, self.width:].tolist()):
            allowed = self._node(row // self.beams, tuple(written))[1]
            rows.extend([row] * len(allowed))
            cols.extend(allowed)
        out = torch.full_like(scores, NEG_INF)
        if rows:
            index = (torch.tensor(rows, device=scores.device), torch.tensor(cols, device=scores.device))
            out[index] = scores[index]
        return out


def _left_pad(prompts: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt):] = 1
    return ids, mask


def _beams(vocab, rows: list[list[int]], scores: list[float], batch: int, k: int) -> list[list[Beam]]:
    results: list[list[Beam]] = []
    for q in range(batch):
        found = []
        for b in range(q * k, (q + 1) * k):
            if not scores[b] > FINISHED_FLOOR:  # -inf, NaN or an unfilled slot: probability 0
                continue
            row = rows[b]
            written = tuple(row[: row.index(vocab.end) + 1] if vocab.end in row else row)
            found.append(Beam(written, scores[b], vocab.parse(written)))
        results.append(found)
    return results


@torch.inference_mode()
def beam_search(
    planner: PlannerModel,
    prompts: Sequence[Sequence[int]],
    k: int,
    tries: Sequence[TokenTrie] | None = None,
) -> list[list[Beam]]:
    """The ``k`` best relation paths per prompt (see the module docstring).

    Args:
        planner: The planner (put it in eval mode).
        prompts: Prompt ids per question, each ending with ``<PATH>``.
        k: Beam width; also the number of paths returned per question (fewer when a trie
            holds fewer paths).
        tries: One token trie per prompt (constrained decoding) or None (unconstrained).

    Returns:
        Per prompt, its beams best first, each scored by the summed log-probabilities of its
        tokens (unrenormalised: the constraint removes tokens, it does not rescale the rest);
        beams of probability 0 under the constraint are dropped.

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
    device = next(lm.parameters()).device
    ids, mask = _left_pad(prompts, vocab.pad)  # (B, T)
    width = ids.shape[1]
    greedy = k == 1
    processors = LogitsProcessorList()
    if tries is not None:
        processors.append(TrieConstraint(tries, k, width, normalise=greedy))
    elif greedy:
        processors.append(_LogSoftmax())
    search = {} if greedy else {"length_penalty": 0.0, "early_stopping": "never"}  # canonical beam search
    config = GenerationConfig(
        num_beams=k, num_return_sequences=k, max_new_tokens=planner.config.max_path_tokens, do_sample=False,
        eos_token_id=vocab.end, pad_token_id=vocab.pad, bos_token_id=None, use_cache=True,
        output_scores=True, return_dict_in_generate=True, **search,
    )  # output_scores: greedy search's per-step log-probabilities, beam search's sequences_scores
    out = lm.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config,
                      logits_processor=processors)
    rows = out.sequences[:, width:].tolist()  # (B*k, ≤ max_path_tokens)
    if not greedy:
        return _beams(vocab, rows, out.sequences_scores.tolist(), len(prompts), k)
    steps = torch.stack(out.scores, dim=1)  # (B, t, V) log-probabilities, -inf where the trie forbids
    taken = steps.gather(-1, out.sequences[:, width:, None]).squeeze(-1).tolist()  # (B, t)
    scores = []
    for row, logp in zip(rows, taken):  # greedy: sum log p(token) up to and including </PATH>
        end = row.index(vocab.end) + 1 if vocab.end in row else len(row)
        scores.append(sum(logp[:end]))
    return _beams(vocab, rows, scores, len(prompts), 1)


class _LogSoftmax(LogitsProcessor):
    """Greedy search without a trie: the raw logits as log-probabilities (the argmax is unchanged)."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return torch.log_softmax(scores.float(), dim=-1)
