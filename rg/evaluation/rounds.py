"""Question rewriting for memory rounds of ``evaluate_qa`` (``memory.round_kind``).

``same``: every round asks the same questions. ``paraphrase``: round 1 asks them as written and
round ``r ≥ 2`` asks the ``(r−2)``-th seeded paraphrase of each (:meth:`rg.data.paraphrase.TemplateBank.paraphrases`;
same topic entities and relation path, other words). ``same_template``: round ``r ≥ 2`` asks,
instead of each question, the ``(r−2)``-th seeded question of its family about another topic
entity of its own subgraph, with gold answers walked on that subgraph
(:meth:`~rg.data.paraphrase.TemplateBank.same_template`). When fewer variants exist than rounds,
they repeat in order; a question with none (no matching family) is asked unchanged and not
counted as rewritten. Rewriting happens in the Ray Data actors, where the subgraphs are; the new
gold answers travel back to the driver beside the prediction, never to the reasoner.
"""

from __future__ import annotations

from dataclasses import replace

from rg.data.paraphrase import ParaphraseConfig, TemplateBank
from rg.data.sample import Sample


class RoundRewriter:
    """Rewrites the samples of one round (module docstring).

    Args:
        kind: ``paraphrase`` or ``same_template``.
        config: The families' source and seed.
        round_no: The round (≥ 2; round 1 is never rewritten).
        rounds: How many rounds there are (the variants asked per question).
    """

    def __init__(self, kind: str, config: ParaphraseConfig, round_no: int, rounds: int,
                 bank: TemplateBank | None = None) -> None:
        if kind not in ("paraphrase", "same_template") or round_no < 2:
            raise ValueError(f"nothing to rewrite for round kind {kind!r} in round {round_no}")
        self.kind = kind
        self.config = config
        self.index = round_no - 2
        self.variants = rounds - 1
        self.bank = bank if bank is not None else config.build()

    def __call__(self, sample: Sample) -> tuple[Sample, bool]:
        """The sample to ask this round, and whether it differs from ``sample``."""
        cfg = self.config
        if self.kind == "paraphrase":
            texts = self.bank.paraphrases(sample.question, sample.q_entities, self.variants, cfg.seed)
            if not texts:
                return sample, False
            return replace(sample, question=texts[self.index % len(texts)]), True
        others = self.bank.same_template(sample.question, sample.q_entities, sample.triples, self.variants, cfg.seed,
                                         cfg.max_answers)
        if not others:
            return sample, False
        q = others[self.index % len(others)]
        return replace(sample, question=q.question, q_entities=q.q_entities, answers=q.answers, a_entities=q.answers,
                       hops=q.hops, relation_paths=q.relation_paths), True
