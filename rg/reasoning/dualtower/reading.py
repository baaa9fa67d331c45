"""The Hand's answer step over the verified raw evidence (PrivGemo §4.3, "answer").

``hand.kind: local`` reads with :class:`~rg.reasoning.retriever_reader.RetrieverReader` (the
Brain's ranking as walk values). ``hand.kind: tuned`` reads with the LoRA-tuned local reader
(:class:`~rg.reasoning.tuned_reader.TunedReader`, evidence-constrained decoding) the evidence the
Hand builds itself: its triple retriever (``hand.retriever``, the MLP the reader was trained
behind) scores the raw working subgraph, and the top ``hand.top_k`` plus the triples of the
verified walks become evidence chains as in the reader's training (its recorded evidence
settings); ``hand.verified: first`` raises the verified triples above every other instead. With
nothing verified the reader still reads the Hand's retrieval. Nothing of it leaves the Hand.
``hand.kind: llm`` asks a trusted local model behind an
OpenAI-compatible endpoint (``side: hand``: it sees raw names, so a Brain-side endpoint is refused
at load time) with the LLM reader's prompt. The Hand LLM is asked only when there is verified
evidence; when its call fails for good or its replies carry no answer line, the local reader
answers instead and the reason is returned, so no question is lost. Its calls are booked in the
question's ledger (stage ``read``, side ``hand``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rg.data.sample import Sample, Triple
from rg.evidence import Evidence, EvidenceConfig
from rg.graph import KnowledgeGraph
from rg.evidence.build import build_evidence, top_k_triples
from rg.llm.client import OpenAICompatibleClient
from rg.llm.journal import UsageJournal
from rg.llm.usage import UsageLedger
from rg.reasoning.base import Reading
from rg.reasoning.dualtower.config import DualTowerConfig
from rg.reasoning.hops import FOLDER as HOPS_FOLDER
from rg.reasoning.hops import HopPredictor
from rg.reasoning.llm_reader import LLMReader, LLMReaderConfig
from rg.reasoning.retriever_reader import RetrieverReader
from rg.text.encoder import TextEncoder

LOCAL_FALLBACK = "local_reader"
"""What answers when the Hand LLM gave no answer (the fault's ``fallback``)."""


class TunedHand:
    """``hand.kind: tuned`` (module docstring): the tuned reader and, when configured, the Hand's retriever,
    loaded once.

    Args:
        config: The controller's settings (``hand.reader``, ``hand.retriever``, ``hand.top_k``).
        encoder: The sentence encoder the retriever was trained with (default: the default encoder).
    """

    def __init__(self, config: DualTowerConfig, encoder: TextEncoder | None = None) -> None:
        from rg.evaluation.retriever_scorer import RetrieverScorer
        from rg.reasoning.tuned_reader import TunedReader

        hand = config.hand
        assert hand.reader is not None  # checked by HandConfig
        self.reader = TunedReader.load(hand.reader)
        self.encoder = encoder if encoder is not None else TextEncoder()
        self.scorer = RetrieverScorer(hand.retriever, self.encoder) if hand.retriever is not None else None
        depth = Path(hand.reader) / HOPS_FOLDER
        self.depth = HopPredictor.load(depth) if HopPredictor.exists(depth) else None
        self.top_k, self.verified, self.cap = hand.top_k, hand.verified, hand.retrieval_triples
        self.evidence_config = self.reader.settings.evidence or EvidenceConfig()
        self.name = self.reader.name

    def evidence(self, question: str, triples: Sequence[Triple], topics: Sequence[str],
                 verified: Sequence[Triple], hops: int | None = None, template: str | None = None) -> Evidence:
        """The reader's evidence (:func:`hand_evidence`) with the retriever's scores of the triples within ``hops``
        of the topics, at most ``hand.retrieval_triples`` of them. With a depth predictor in the reader's folder
        (``hops/``, written by the read stage) and the question's ``template``, its depth replaces ``hops``."""
        if self.depth is not None and template is not None:
            [hops] = self.depth.predict([template], self.encoder)
        if self.cap is not None and hops is not None:
            kg = KnowledgeGraph.from_triples(triples)
            present = [t for t in topics if kg.has_entity(t)]
            if present:
                cut = kg.k_hop(present, hops, self.cap, "both")
                triples = list(dict.fromkeys([*kg.triples(cut.triple_ids), *(t for t in verified if t in set(triples))]))
        scores = None
        if self.scorer is not None:
            sample = Sample("hand", question, (), tuple(topics), (), tuple(triples))
            scores = np.asarray(self.scorer.score([sample])[0], dtype=np.float64)
        return hand_evidence(triples, scores, topics, verified, self.top_k, self.evidence_config,
                             first=self.verified == "first")


def hand_evidence(triples: Sequence[Triple], scores: np.ndarray | None, topics: Sequence[str],
                  verified: Sequence[Triple], top_k: int, config: EvidenceConfig, first: bool = True) -> Evidence:
    """Evidence chains over the ``top_k`` triples by ``scores`` (a retriever's, one per triple), the ``verified``
    triples raised above every other so their chains come first (``first``), or kept beside the ``top_k`` at their
    own score (``first=False``: the retriever's order rules); without scores, the verified triples only.

    Shapes:
        scores: (T,) or None
    """
    raw = np.full(len(triples), -np.inf) if scores is None else np.asarray(scores, dtype=np.float64)
    top = float(np.max(raw[np.isfinite(raw)], initial=0.0)) + 1.0
    wanted = set(verified)
    if not first and scores is not None:
        keep = set(np.argsort(-raw, kind="stable")[:top_k].tolist()) | {i for i, t in enumerate(triples) if t in wanted}
        order = sorted(keep, key=lambda i: (-raw[i], i))
        return build_evidence(tuple(triples[i] for i in order), tuple(float(raw[i]) for i in order), tuple(topics),
                              config)
    raised = np.array([top if t in wanted else s for t, s in zip(triples, raw)])
    kept, kept_scores = top_k_triples(triples, raised, top_k, None if scores is not None else top)
    return build_evidence(kept, kept_scores, tuple(topics), config)


class HandReader:
    """The Hand's reader (module docstring).

    Args:
        config: The controller's settings (``hand`` and ``reader``).
        client: An existing Hand-side client (tests); by default one is created on first use, in
            the process that reads, and shared by every question's twin.
        journal: The created client appends each completed call here (``rg.llm.journal``).
    """

    def __init__(self, config: DualTowerConfig, client: OpenAICompatibleClient | None = None,
                 journal: UsageJournal | None = None, tuned: TunedHand | None = None) -> None:
        self.local = RetrieverReader(config.reader)
        hand = config.hand
        self.llm_config = (
            None if hand.kind != "llm"
            else LLMReaderConfig(llm=hand.llm, max_lines=hand.max_lines, follow_up=hand.follow_up)
        )
        self.tuned = tuned if tuned is not None or hand.kind != "tuned" else TunedHand(config)
        self._client = client
        self.journal = journal
        self.name = (f"llm:{hand.llm.model}" if hand.llm is not None
                     else self.tuned.name if self.tuned is not None else "local")

    def _reader(self, ledger: UsageLedger) -> LLMReader:
        assert self.llm_config is not None
        if self._client is None:
            self._client = OpenAICompatibleClient(self.llm_config.llm, journal=self.journal)
        return LLMReader(self.llm_config, self._client.with_ledger(ledger))  # one pool; this question's ledger

    async def read(self, question: str, evidence: Evidence, ledger: UsageLedger,
                   raw: Sequence[Triple] = (), topics: Sequence[str] = (),
                   verified: Sequence[Triple] = (), hops: int | None = None,
                   template: str | None = None) -> tuple[Reading, str | None]:
        """The reading and, when the Hand LLM gave no answer, why (else None). The tuned reader reads its own
        evidence (:meth:`TunedHand.evidence`) over the ``raw`` subgraph with the ``verified`` triples first
        (entities written by their names)."""
        if self.tuned is not None and raw:
            evidence = self.tuned.evidence(question, raw, topics, verified, hops, template)
            return await self.tuned.reader.read(question, evidence), None
        if self.llm_config is None or not evidence.chains():
            return await self.local.read(question, evidence), None
        reading = await self._reader(ledger).read(question, evidence)
        if reading.ok:
            return reading, None
        local = await self.local.read(question, evidence)
        return dataclasses.replace(local, usage=reading.usage + local.usage), str(reading.fallback)
