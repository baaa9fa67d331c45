"""The planner's log-likelihood of given relation paths (teacher forcing, no search).

Beam search (:mod:`rg.retrievers.planner.decode`) finds the paths a planner believes most; here
the planner scores paths someone else proposes — e.g. the anonymised candidate paths the
dual-tower Hand explored (:mod:`rg.reasoning.dualtower.local_brain`). The score of a path is the
sum of the log-probabilities of its tokens ``r1 <SEP> r2 ... </PATH>`` after the prompt, the same
quantity a finished beam carries.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rg.retrievers.planner.model import PlannerModel

NEG_INF = float("-inf")


@torch.inference_mode()
def path_log_likelihood(planner: PlannerModel, prompt: Sequence[int], paths: Sequence[Sequence[str]]) -> list[float]:
    """``log p(path | prompt)`` for each path; ``-inf`` for an empty path or one with a label the
    planner has no token for.

    Args:
        planner: The planner (eval mode).
        prompt: One prompt's ids, ending with ``<PATH>`` (:meth:`PlannerModel.prompt_ids`).
        paths: Relation-path labels (``r^-1`` for a backward step).

    Shapes:
        paths: N label sequences -> N floats
    """
    vocab = planner.vocab
    rows: list[list[int]] = []
    where: list[int] = []
    for i, path in enumerate(paths):
        if path and all(vocab.has(label) for label in path):
            rows.append(list(prompt) + vocab.encode(path))
            where.append(i)
    out = [NEG_INF] * len(paths)
    if not rows:
        return out
    device = next(planner.lm.parameters()).device
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), vocab.pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[r, : len(row)] = 1
    ids, mask = ids.to(device), mask.to(device)
    logp = torch.log_softmax(planner.logits(ids, mask).float(), dim=-1)  # (N, W, V)
    taken = logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)  # (N, W-1): log p of token t+1
    start = len(prompt) - 1  # the position whose next token is the path's first
    for r, (row, i) in enumerate(zip(rows, where)):
        out[i] = float(taken[r, start : len(row) - 1].sum())
    return out
