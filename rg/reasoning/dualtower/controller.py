"""The dual-tower controller: ``answer(question) -> DualTowerResult`` (PrivGemo Algorithms 2–5).

Per question, inside a fresh :class:`rg.privacy.PrivacySession` (key and maps dropped at the end):

1. **Hand**: topic entities, working subgraph, the Brain's view (``expose``: guarded, anonymised,
   sanitised), topic anchors and schema hints;
2. **question analysis**: the Brain gets a sealed :class:`AnalysisPayload` and returns indicators
   and D_predict — or, on a Brain fault, the Hand analyses alone (indicator: the question itself,
   D_predict 1) and the fault is recorded;
3. **reasoning tree**: per indicator node, until verified or pruned: explore the view in the node's
   mode and depth, fuzzy-prune to W1, let the Brain select W_max when more remain (on a fault: the
   W_max best by the pruning score), ground the kept paths on the raw subgraph and check sufficiency;
   on failure :func:`~rg.reasoning.dualtower.tree.next_step`. In ``refine`` mode the Brain answers the
   Hand's follow-up with a refined indicator, in ``predict`` mode it names auxiliary targets to explore
   from (:mod:`~rg.reasoning.dualtower.phases`); on a fault there the Hand explores alone;
4. **answer**: the Hand's reader over the verified evidence (the local reader, or a trusted local
   LLM with the local reader as its fallback; :mod:`rg.reasoning.dualtower.reading`).

Brain faults never lose a question: the client retries 429/5xx/timeouts (bounded), the Brain
re-asks malformed replies (bounded), and then the Hand goes on alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rg.data.sample import Triple
from rg.graph import KnowledgeGraph, Path
from rg.llm.journal import UsageJournal
from rg.llm.usage import Usage, UsageLedger
from rg.privacy.guard import EgressRefused
from rg.privacy.names import NameBook
from rg.privacy.schema import KGSchema
from rg.privacy.session import PrivacySession
from rg.reasoning.dualtower.brain import Analysis, Brain, BrainError, ExploringBrain, Indicator
from rg.reasoning.dualtower.brains import BrainFactory
from rg.reasoning.dualtower.config import DualTowerConfig
from rg.reasoning.dualtower.explore import Candidate, Walking, band, explore, explore_each, explore_via, extend
from rg.reasoning.dualtower.hand import (
    Grounded,
    Hand,
    HandError,
    RawScorer,
    planner_scorer,
    question_scorer,
    with_twins,
)
from rg.reasoning.dualtower.memory import (
    ExperienceMemory,
    GatingMemory,
    MemoryHints,
    MemoryUnavailable,
    NoMemory,
    RecalledAnalysis,
    Trace,
    settle,
)
from rg.reasoning.dualtower.payload import (
    AnalysisPayload,
    CandidateView,
    SealedPayload,
    SelectionPayload,
    TopicView,
    seal,
)
from rg.reasoning.dualtower.phases import (
    FOLLOW_UP_FALLBACK,
    PREDICT_FALLBACK,
    Tried,
    follow_up_payload,
    lacked,
    place,
    prediction_payload,
)
from rg.reasoning.dualtower.prune import PruneScorer, agreeing, fuzzy_top
from rg.reasoning.dualtower.prompts import protocol_words
from rg.reasoning.base import Answer
from rg.reasoning.dualtower.result import BrainFault, DualTowerResult
from rg.reasoning.dualtower.similarity import Similarity
from rg.reasoning.dualtower.template import reader_question, tag_topics, topic_template
from rg.reasoning.dualtower.tree import ReasoningTree, TreeNode, next_step
from rg.reasoning.dualtower.reading import LOCAL_FALLBACK, HandReader, TunedHand

if TYPE_CHECKING:
    from rg.memory.edges import EdgeMemory, Replay


def privacy_tag(config: DualTowerConfig) -> str:
    """The privacy mode and budget a memory trace is compatible with: ``mode|ratio|grouped``."""
    return f"{config.privacy.mode}|{config.privacy.ratio}|{int(config.sanitiser.group)}"


STAGES = ("link", "subgraph", "anonymise", "explore", "brain", "verify", "read")


class _Question:
    """The state of one question inside its session (the Hand's working memory)."""

    def __init__(self, question: str, session: PrivacySession, ledger: UsageLedger) -> None:
        self.question = question
        self.session = session
        self.ledger = ledger
        self.payloads: list[str] = []
        self.faults: list[BrainFault] = []
        self.timings = {stage: 0.0 for stage in STAGES}
        self.grounded: list[Grounded] = []
        self.memory: dict[str, object] = {}
        self.local_paths: frozenset[tuple[tuple[str, ...], ...]] = frozenset()
        self.indicator_selections = 0  # Brain selections skipped: candidates walked the indicator's path
        self.warnings: tuple[tuple[str, int], ...] = ()
        self.session_topics: tuple[str, ...] = ()
        self.hints: tuple[tuple[str, ...], ...] = ()
        self.names = NameBook()

    def timed(self, stage: str, started: float) -> None:
        self.timings[stage] += time.perf_counter() - started


def walks_indicator(candidates: Sequence[Candidate], indicator: Indicator) -> list[Candidate]:
    """The candidates that walk the indicator's relation path exactly (every one when it names no relation);
    a joint candidate of several topics (several branches) counts as walking it."""
    if not indicator.relations:
        return list(candidates)
    path = (tuple(indicator.relations),)
    return [c for c in candidates if c.relation_paths == path or len(c.relation_paths) > 1]


class DualTowerController:
    """The Hand/Brain controller (module docstring).

    Args:
        config: Limits and settings.
        schema: The KG's coarse types and relation clusters (computed once per KG).
        hand: The trusted tower.
        brains: Makes each question's Brain.
        similarity: The DRM of the pruning score.
        memory: The experience memory (None: the memory term is 0). A
            :class:`~rg.reasoning.dualtower.memory.GatingMemory` (``rg.memory.PoolMemory``) also
            gates Brain calls, steers the tree and stores each question's anonymised trace.
        edges: The edge memory (``rg.memory.EdgeMemory``; None: no replay). Replayed paths seed
            the analysis and selection locally; after each question the evidence used is memorised.
        journal: A Hand LLM appends each completed call to this usage journal (``rg.llm.journal``).
        tuned: ``hand.kind: tuned``: the loaded tuned reader and retriever (loaded here when not given).
    """

    def __init__(self, config: DualTowerConfig, schema: KGSchema, hand: Hand, brains: BrainFactory,
                 similarity: Similarity, memory: ExperienceMemory | None = None,
                 edges: "EdgeMemory | None" = None, journal: UsageJournal | None = None,
                 tuned: TunedHand | None = None) -> None:
        if config.hand.resolve_clusters == "planner" and hand.planner is None:
            raise ValueError("hand.resolve_clusters is 'planner' but the Hand has no planner. Fix: build the controller "
                             "with rg.reasoning.dualtower.build_controller and set hand.planner")
        self.config = config
        self.schema = schema
        self.hand = hand
        self.brains = brains
        self.similarity = similarity
        self.memory = memory if memory is not None else NoMemory()
        self.edges = edges
        self.reader = HandReader(config, journal=journal, tuned=tuned)

    def answer(self, question: str, topics: Sequence[str] = (), triples: Sequence[Triple] | None = None) -> DualTowerResult:
        """Answer one question from synchronous code (see :meth:`aanswer`)."""
        return asyncio.run(self.aanswer(question, topics, triples))

    async def aanswer(self, question: str, topics: Sequence[str] = (),
                      triples: Sequence[Triple] | None = None) -> DualTowerResult:
        """Answer one question.

        Args:
            question: The raw question (stays on the Hand).
            topics: Its topic entities; linked by the Hand when empty.
            triples: The question's own subgraph; None cuts it from the Hand's store.
        """
        ledger = UsageLedger()
        with PrivacySession(self.config.privacy, self.schema, protocol=protocol_words()) as session:
            state = _Question(question, session, ledger)
            try:
                return await self._run(state, topics, triples)
            except HandError as err:
                return self._result(state, (), (), (), err.reason, ())

    # ------------------------------------------------------------------------------ steps
    async def _run(self, q: _Question, given: Sequence[str], triples: Sequence[Triple] | None) -> DualTowerResult:
        started = time.perf_counter()
        linked = self.hand.topics(q.question, given)
        topics = linked.entities
        named = self.hand.mentioned(q.question, self.schema)  # every KG entity the question names, topic or not
        for entity, texts in linked.mentions.items():
            named[entity] = tuple(dict.fromkeys((*named.get(entity, ()), *texts)))
        q.timed("link", started)
        started = time.perf_counter()
        raw = self.hand.subgraph(topics, triples)
        # names before anything is built for the Brain: a triple store names entities apart from their ids
        q.names = self.hand.names(raw, topics, named, from_store=triples is None)
        raw = self.hand.exposable(raw, q.names, by_name=triples is None)
        kg = KnowledgeGraph.from_triples(raw)
        topics = tuple(t for t in topics if kg.has_entity(t))
        if not topics:
            raise HandError("no_topics", "no topic entity is in the working subgraph")
        q.timed("subgraph", started)
        started = time.perf_counter()
        q.session.learn_names(q.names)
        view = self.hand.view(q.session, raw, topics)
        anchors = self.hand.anchors(q.session, view, topics)
        # every name of the subgraph that the question mentions is masked, not only the topics': the
        # guard would refuse the payload over any of them (WebQSP: "what is los angeles california time zone")
        masked = q.session.mask_question(q.question, topics, names=[*kg.entity_names.tolist(), *named])
        text = masked.text if q.session.anonymising else tag_topics(q.question, topics, q.names)
        tags = tuple(f"TE_{i + 1}" for i in range(len(topics)))
        hints = q.hints = self.hand.hints(view, anchors)
        q.timed("anonymise", started)

        brain = self.brains(q.session, q.ledger)
        template = topic_template(q.question, topics, q.names)
        q.session_topics = tuple(topics)
        gate, replay, qvec = await self._recall(q, template, raw, topics)
        analysis, source = self._from_memory(q, gate, replay)
        asked = len(q.faults)  # an analysis fault after this point: the Hand analysed alone
        if analysis is None:
            analysis = await self._analyse(q, brain, text, tags, anchors, hints)
            q.local_paths = self._agreeing(q, replay, analysis)
        tree, verified = await self._tree(q, brain, analysis, gate if source != "brain" else None, text,
                                          template, view, anchors, tags, kg, topics)
        if not verified and source != "brain":  # the memory's path failed: ask the Brain after all
            q.memory["memory_fallback"] = True
            source, asked = "brain", len(q.faults)
            analysis = await self._analyse(q, brain, text, tags, anchors, hints)
            q.local_paths = self._agreeing(q, replay, analysis)
            tree, verified = await self._tree(q, brain, analysis, None, text, template, view, anchors, tags, kg,
                                              topics)
        if self.edges is not None or isinstance(self.memory, GatingMemory):
            # without memory, results stay as they were; "hand": the Brain was asked but refused or failed
            fell_back = source == "brain" and any(f.stage == "analysis" for f in q.faults[asked:])
            q.memory["analysis"] = "hand" if fell_back else source
        started = time.perf_counter()
        evidence = self.hand.evidence(kg, topics, verified, q.names)
        walked = {t for g in verified for w in g.walks for t in w.triple_ids}
        # a store's subgraph is cut at d_max hops, wider than the question subgraphs the Hand's retriever learnt
        # on: it retrieves within the question's depth (the tuned reader's depth predictor reads the template;
        # without one, the verified walks' length, else the Brain's predicted depth)
        hops = max((len(w) for g in verified for w in g.walks), default=analysis.depth) if triples is None else None
        reading, hand_fault = await self.reader.read(
            reader_question(q.question, topics, q.names), evidence, q.ledger, raw=q.names.display_triples(raw), topics=[q.names.display(t) for t in topics],
            verified=q.names.display_triples(kg.triple(t) for t in sorted(walked)), hops=hops, template=template)
        if hand_fault is not None:
            q.faults.append(BrainFault("hand_read", hand_fault, reading.usage.calls, LOCAL_FALLBACK))
        q.timed("read", started)
        fallback = None if verified else "unverified"
        lines = tuple(c.render() for c in evidence.chains())
        support = {a.text: tuple(dict.fromkeys(c.render() for c in a.chains)) for a in reading.selected}
        answers = reading.answers
        if self.config.hand.narrow and linked.set_aside:
            answers, joins = self._narrow(q, reading.selected, linked.set_aside, raw)
            support = {a: (*joins.get(a, ()), *support[a]) for a in answers}
            lines = (*dict.fromkeys(line for a in answers for line in joins.get(a, ())), *lines)
        await self._write_back(q, tree, analysis, verified, template, topics, kg, answers, replay, qvec)
        return self._result(q, answers, lines, tuple(tree.to_dict()), fallback, topics, support)

    def _narrow(self, q: _Question, selected: Sequence[Answer], set_aside: Mapping[str, Sequence[str]],
                raw: Sequence[Triple]) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
        """The selected answers :meth:`Hand.narrow` keeps, and per kept answer the edges that kept it, rendered."""
        ids = {q.names.display(e): e for h, _, t in raw for e in (h, t)}
        by_id = {ids[a.entity]: a.text for a in selected if a.entity in ids}
        kept = self.hand.narrow(list(by_id), set_aside, raw)
        texts = tuple(a.text for a in selected)
        if kept is None:
            return texts, {}
        joins = {by_id[e]: tuple(Path((h, t), (r,), (True,), (0,)).render()
                                 for h, r, t in q.names.display_triples(edges)) for e, edges in kept.items()}
        return tuple(t for t in texts if t in joins or t not in by_id.values()), joins

    # ------------------------------------------------------------------------------ memory
    async def _recall(self, q: _Question, template: str, raw: Sequence[Triple], topics: Sequence[str]):
        """Experience hints before analysis (question key) and the edge memory's replay; a memory that
        cannot be reached counts as empty (noted in ``q.memory``)."""
        gate = MemoryHints()
        if isinstance(self.memory, GatingMemory):
            try:
                gate = await settle(self.memory.hints(template, None, privacy_tag(self.config)))
                q.memory["experience_score"] = round(gate.score, 4)
            except MemoryUnavailable as err:
                q.memory["memory_unavailable"] = str(err)
        replay, qvec = None, None
        if self.edges is not None:
            started = time.perf_counter()
            try:
                qvec = await settle(self.edges.query(q.question))
                replay = await settle(self.edges.replay(raw, topics, qvec))
            except MemoryUnavailable as err:
                q.memory["memory_unavailable"] = str(err)
                return gate, None, None
            q.memory["replay_edges"] = len(replay.edges)
            q.memory["replay_seconds"] = time.perf_counter() - started
        return gate, replay, qvec

    def _from_memory(self, q: _Question, gate: MemoryHints, replay: "Replay | None") -> tuple[Analysis | None, str]:
        """Analysis without the Brain: a confident, unambiguous verified trace of a matching question
        (PrivGemo's memory-gated Brain usage, ``ExperiencePool.hints``); ``replay`` when a replayed chain
        of this question's edges also walks the trace's relations (both memories agree), else ``experience``.

        A replay alone never replaces the analysis (ReMindRAG §3: the replayed subgraph is a start that
        is still judged against the question): edges enhanced for another question about the same topic
        replay for this one too, and a shorter chain than this question needs would verify and answer it
        with the first hop's entity. Replayed chains only select candidates locally, and only those that
        agree with the analysis (:meth:`_agreeing`). A reworded question's trace (``gate.needs_replay``)
        is reused only when such a chain confirms it; otherwise the Brain is asked (``unconfirmed_match``).
        """
        if not (gate.skip_brain and gate.analysis is not None):
            return None, "brain"
        a = gate.analysis
        indicator = Indicator(text=a.indicator, relations=a.relations, depth=min(max(a.depth, 1), self.config.d_max),
                              answer_type=a.answer_type)
        analysis = Analysis((), (indicator,), indicator.depth)
        replayed = self._agreeing(q, replay, analysis)
        if gate.needs_replay and not replayed:
            q.memory["unconfirmed_match"] = True
            return None, "brain"
        q.warnings = gate.warnings
        # the chain this question's own evidence left is the most specific memory; a record's templates
        # hold every path that verified for its template (other answers' paths too)
        q.local_paths = replayed or gate.relation_paths
        return analysis, "replay" if replayed else "experience"

    def _agreeing(self, q: _Question, replay: "Replay | None", analysis: Analysis) -> frozenset[tuple[tuple[str, ...], ...]]:
        """The replayed chains (as the view writes relations) that agree with the analysis of THIS question:
        from its single topic, as long as its predicted depth and, when the indicator names relations, the
        same relations. They become local selection paths (verified like any other candidate)."""
        if not replay or len(q.session_topics) != 1 or not analysis.indicators:
            return frozenset()
        indicator = analysis.indicators[0]
        chains = {tuple(q.session.relation(s.edge[1]) + ("" if s.forward else "^-1") for s in p[:analysis.depth])
                  for p in replay.paths if len(p) >= analysis.depth}  # a maximal path's prefix is replayed too
        agree = {c for c in chains if not indicator.relations or c == indicator.relations}
        if agree:
            q.memory["replay_agreed"] = len(agree)
        return frozenset((c,) for c in agree)

    async def _tree(self, q: _Question, brain: Brain, analysis: Analysis, gate: MemoryHints | None, masked: str,
                    template: str, view, anchors, tags, kg: KnowledgeGraph, topics: Sequence[str]):
        tree = ReasoningTree.build(analysis.indicators[: self.config.brain.indicators], self.config.d_max)
        if gate is not None and gate.init is not None:  # InitPolicy from experience
            for node in tree.nodes:
                node.mode, node.depth = gate.init[0], min(max(gate.init[1], 1), self.config.d_max)
        verified: list[Grounded] = []
        for node in tree.nodes:
            verified += await self._verify_node(q, brain, node, analysis.depth, masked, view.triples, anchors,
                                                tags, kg, topics, view, template, ask_brain=gate is None)
        return tree, verified

    async def _write_back(self, q: _Question, tree: ReasoningTree, analysis: Analysis, verified: Sequence[Grounded],
                    template: str, topics: Sequence[str], kg: KnowledgeGraph, answers: Sequence[str],
                    replay: "Replay | None", qvec) -> None:
        """Store the anonymised trace (experience) and memorise the evidence used (edges); a memory that
        cannot be reached misses this question (noted in ``q.memory``)."""
        if isinstance(self.memory, GatingMemory) and tree.nodes and not any(f.stage == "analysis" for f in q.faults):
            node = tree.nodes[0]
            ok = node.status == "verified"
            indicator = topic_template(node.indicator.text, topics, q.names)
            trace = Trace(
                question=template,
                analysis=RecalledAnalysis(indicator, node.indicator.relations, analysis.depth, node.indicator.answer_type),
                trajectory=tuple(node.tried), sufficient=ok,
                templates=tuple(dict.fromkeys((g.candidate.pattern(q.session.pattern_label), g.candidate.relation_paths)
                                              for g in verified)),
                warnings=tuple(node.tried[:-1] if ok else node.tried), privacy=privacy_tag(self.config),
                brain_calls=q.ledger.by_side().get("brain", Usage()).calls)
            try:
                await settle(self.memory.remember(trace))
                q.memory["remembered"] = True
            except MemoryUnavailable as err:
                q.memory["memory_unavailable"] = str(err)
        if self.edges is not None and qvec is not None:
            best = [g for g in verified if g.value == max(v.value for v in verified)] if verified else []
            used = {t for g in best for w in g.walks if answers and q.names.display(w.end) == answers[0]
                    for t in w.triple_ids}
            seen = {t for g in q.grounded for w in g.walks for t in w.triple_ids}
            effective = {kg.triple(t) for t in used}
            traversed = {kg.triple(t) for t in seen} | (replay.edges if replay else set())
            try:
                enhanced, penalised = await settle(self.edges.memorise(qvec, effective, traversed))
                q.memory["edges_enhanced"], q.memory["edges_penalised"] = enhanced, penalised
            except MemoryUnavailable as err:
                q.memory["memory_unavailable"] = str(err)

    async def _analyse(self, q: _Question, brain: Brain, masked: str, tags: Sequence[str], anchors: Sequence[str],
                       hints: tuple[tuple[str, ...], ...]) -> Analysis:
        payload = AnalysisPayload(question=masked, topics=tuple(TopicView(tag=t, node=a) for t, a in zip(tags, anchors)),
                                  relation_paths=hints, max_depth=self.config.d_max)
        started = time.perf_counter()
        try:
            sealed = seal(payload, q.session.guard)
            q.payloads.append(sealed.text)
            analysis = await brain.analyse(sealed)
        except (BrainError, EgressRefused) as err:
            q.faults.append(self._fault("analysis", err, "hand_analysis"))
            analysis = Analysis((), (Indicator(text=masked, depth=1),), 1)
        finally:
            q.timed("brain", started)
        depth = min(max(analysis.depth, 1), self.config.d_max)
        return Analysis(analysis.sub_questions, analysis.indicators, depth)

    @staticmethod
    def _fault(stage: str, err: BrainError | EgressRefused, fallback: str) -> BrainFault:
        if isinstance(err, EgressRefused):
            return BrainFault(stage, "egress_refused", 0, fallback)
        return BrainFault(stage, err.reason, err.attempts, fallback)

    async def _verify_node(self, q: _Question, brain: Brain, node: TreeNode, d_predict: int, masked: str,
                           view_triples, anchors: Sequence[str], tags: tuple[str, ...], kg: KnowledgeGraph,
                           topics: Sequence[str], view, template: str | None = None,
                           ask_brain: bool = True) -> list[Grounded]:
        """Algorithm 3 for one node: explore, prune, select, ground, check, step — until verified or pruned.

        ``ask_brain``: refine and predict modes ask the Brain (follow-up, prediction); False when the analysis
        came from memory, which gates the Brain: the Hand refines and predicts alone, and when the node
        fails the controller asks the Brain for a fresh analysis instead.
        """
        cfg = self.config
        key = template if template is not None else masked
        try:
            exemplars = agreeing(await settle(self.memory.exemplars(key, node.indicator.text)), node.indicator)
            if exemplars:
                q.memory["exemplars"] = len(exemplars)
        except MemoryUnavailable as err:
            q.memory["memory_unavailable"] = str(err)
            exemplars = []
        scorer = PruneScorer(self.similarity, node.indicator.text, exemplars, cfg.alpha)
        label = q.session.pattern_label  # patterns by type in every mode (no raw name, no group size)
        rejected: list[Candidate] = []
        tried: dict[str, Tried] = {}  # every kept candidate that failed verification (P̃_t ∪ P̃_r), by its text
        action = (node.mode, node.depth)
        for _ in range(cfg.max_steps):
            node.mode, node.depth = action
            node.tried.append(action)
            indicator, step_scorer = node.indicator, scorer
            m = len(anchors)
            separate = cfg.multi_topic == "separate" and m > 1
            found: list[Candidate] | None = None
            guided = None
            if node.mode == "refine" and ask_brain:  # the Brain's I+ for the Hand's follow-up guides this step
                guided = refined = await self._follow_up(q, brain, node, masked, anchors, tags, list(tried.values()))
                if refined is not None:
                    indicator, step_scorer = refined, PruneScorer(self.similarity, refined.text, exemplars, cfg.alpha)
            elif node.mode == "predict" and ask_brain:  # explore from T_aug = topics ∪ the Brain's predicted targets
                guided = await self._predict(q, brain, node, masked, anchors, tags, list(tried.values()))
                if guided is not None:
                    via, predicted = guided
                    if predicted is not None:
                        indicator = predicted
                        step_scorer = PruneScorer(self.similarity, predicted.text, exemplars, cfg.alpha)
            follow = indicator.relations if m == 1 else ()
            walking = Walking(follow=follow, trails=cfg.walks == "trails")
            if node.mode == "predict" and guided is not None:
                groups = [([i], via[i:i + 1]) for i in range(m)] if separate else [(list(range(m)), via)]
                started = time.perf_counter()
                found = [c for ids, v in groups
                         for c in explore_via(view_triples, [anchors[i] for i in ids], [tags[i] for i in ids], v,
                                              cfg.d_max, cfg.w1, step_scorer, cfg.max_paths_per_hub, label, walking)]
                q.timed("explore", started)
            started = time.perf_counter()
            if found is None and node.mode == "topic" and separate:
                found = explore_each(view_triples, anchors, tags, node.depth, band(1, node.depth), cfg.w1, scorer, label,
                                     walking)
            elif found is None and node.mode == "topic":
                found = explore(view_triples, anchors, tags, node.depth, band(m, node.depth), cfg.w1, scorer,
                                cfg.max_paths_per_hub, label, walking)
            elif found is None and node.mode == "refine" and separate:
                found = explore_each(view_triples, anchors, tags, cfg.d_max, (0, cfg.d_max), cfg.w1, step_scorer, label,
                                     walking)
            elif found is None and node.mode == "refine":
                found = explore(view_triples, anchors, tags, cfg.d_max, (0, m * cfg.d_max), cfg.w1, step_scorer,
                                cfg.max_paths_per_hub, label, walking)
            elif found is None:
                found = extend(view_triples, rejected, anchors, max(cfg.d_max - 1, 1), cfg.w1, scorer, label, walking)
            if guided is not None:  # a Brain-guided refine/predict pool holds new candidates only
                found = [c for c in found if c.text() not in tried]
            ranked = fuzzy_top(found, step_scorer, cfg.w1, label, follow)
            q.timed("explore", started)
            kept = await self._select(q, brain, masked, indicator, ranked)
            node.candidates = tuple(c.text() for c in kept)
            if cfg.privacy.mode == "privacy" and cfg.hand.resolve_clusters != "all":
                kept = with_twins(kept, [c for c, _ in ranked], cfg.w1)
            started = time.perf_counter()
            grounded = self.hand.ground(q.session, view, kg, dict(zip(tags, topics)), kept, indicator,
                                        self._resolver(q.question, [q.names.display(t) for t in topics]), q.names)
            q.grounded += grounded
            q.timed("verify", started)
            good = [g for g in grounded if g.reason is None]
            if good:
                node.status = "verified"
                node.evidence = tuple(w.render() for g in good for w in g.walks)
                return good
            for g in grounded:
                tried.setdefault(g.candidate.text(), Tried(g.candidate, lacked(g.candidate, g.reason or "", indicator)))
            node.failures += 1
            rejected = kept or rejected
            step = next_step(node, d_predict, cfg.d_max, cfg.max_failures, q.warnings)
            if step is None:
                break
            action = step
        node.status = "pruned"
        return []

    def _resolver(self, question: str, topics: Sequence[str]) -> RawScorer | None:
        """How the Hand chooses among the raw relations a cluster label stands for (``hand.resolve_clusters``)."""
        how = self.config.hand.resolve_clusters
        if how == "all":
            return None
        if how == "planner":
            assert self.hand.planner is not None  # checked in __init__
            return planner_scorer(self.hand.planner, question, topics)
        return question_scorer(self.similarity, question, topics)

    async def _follow_up(self, q: _Question, brain: Brain, node: TreeNode, masked: str, anchors: Sequence[str],
                         tags: Sequence[str], tried: list[Tried]) -> Indicator | None:
        """Refine mode (GenFollowUp): the Hand's follow-up for what the rejected candidates lacked, answered by
        the Brain with a refined indicator I+; None (the fault recorded) when the Hand must refine alone."""
        started = time.perf_counter()
        try:
            if not isinstance(brain, ExploringBrain):
                raise BrainError("unsupported", f"{self.brains.name} answers no follow-up", attempts=0)
            topics = tuple(TopicView(tag=t, node=a) for t, a in zip(tags, anchors))
            payload = follow_up_payload(masked, node.indicator, topics, tried, q.hints, self.config.d_max)
            sealed = seal(payload, q.session.guard)
            q.payloads.append(sealed.text)
            q.session.exposure.record_structure("brain_follow_up", paths=len(payload.tried))
            answer = await brain.follow_up(sealed)
        except (BrainError, EgressRefused) as err:
            q.faults.append(self._fault("follow_up", err, FOLLOW_UP_FALLBACK))
            return None
        finally:
            q.timed("brain", started)
        refined = answer.indicator
        node.follow_up = refined.text
        return Indicator(text=refined.text, relations=refined.relations,
                         depth=min(max(refined.depth, 1), self.config.d_max), answer_type=refined.answer_type)

    async def _predict(self, q: _Question, brain: Brain, node: TreeNode, masked: str, anchors: Sequence[str],
                       tags: Sequence[str], tried: list[Tried]):
        """Predict mode: the Brain's targets on the paths explored so far, placed on the shown walks.

        Returns:
            (per topic, the walks to the predicted anchors; I_pred or None), or None (the fault recorded,
            or nothing was explored to show) when the Hand grows past the rejected hubs alone.
        """
        if not tried:
            return None  # nothing explored: no node the Brain could name
        started = time.perf_counter()
        try:
            if not isinstance(brain, ExploringBrain):
                raise BrainError("unsupported", f"{self.brains.name} makes no prediction", attempts=0)
            topics = tuple(TopicView(tag=t, node=a) for t, a in zip(tags, anchors))
            payload = prediction_payload(masked, node.indicator, topics, tried, q.hints, self.config.brain.predictions,
                                         self.config.d_max)
            sealed = seal(payload, q.session.guard)
            q.payloads.append(sealed.text)
            q.session.exposure.record_structure("brain_predict", paths=len(payload.paths))
            prediction = await brain.predict(sealed)
            via, placed = place(prediction.targets, tried, list(tags), anchors)
            if not placed:
                raise BrainError("no_targets", "no predicted target is a node of the paths shown")
        except (BrainError, EgressRefused) as err:
            q.faults.append(self._fault("prediction", err, PREDICT_FALLBACK))
            return None
        finally:
            q.timed("brain", started)
        node.predicted = tuple(placed)
        indicator = prediction.indicator
        if indicator is not None:
            indicator = Indicator(text=indicator.text, relations=indicator.relations,
                                  depth=min(max(indicator.depth, 1), self.config.d_max),
                                  answer_type=indicator.answer_type)
        return via, indicator

    async def _select(self, q: _Question, brain: Brain, masked: str, indicator: Indicator,
                      ranked: list[tuple[Candidate, float]]) -> list[Candidate]:
        """Brain selection of W_max among the W1 kept, when more than W_max remain (Algorithm 5) and it is needed:
        not when memory names the paths (``q.local_paths``) and candidates walk them and the indicator (a
        record's templates also hold paths that verified for other questions of its key), nor, with
        ``selection: ambiguous``, when candidates walk the indicator's relation path exactly (the Hand keeps
        those first, then the rest by DRM)."""
        keep = self.config.w_max
        if len(ranked) <= keep:
            return [c for c, _ in ranked]
        if q.local_paths:  # verified templates / replayed paths: the Hand selects locally
            # a record's templates hold paths other questions verified: only the indicator's
            local = walks_indicator([c for c, _ in ranked if c.relation_paths in q.local_paths], indicator)
            if local:
                q.memory["local_selections"] = int(q.memory.get("local_selections", 0)) + 1
                return local[:keep]
        if self.config.selection == "ambiguous" and indicator.relations:
            path = (tuple(indicator.relations),)
            walking = [c for c, _ in ranked if c.relation_paths == path]
            if walking:  # the Brain named this path already; the other slots go to the best of the rest by DRM
                q.indicator_selections += 1
                return (walking + [c for c, _ in ranked if c.relation_paths != path])[:keep]
        shown = [CandidateView(id=i + 1, text=c.text(), branches=c.relation_paths) for i, (c, _) in enumerate(ranked)]
        payload = SelectionPayload(question=masked, indicator=indicator.text, candidates=tuple(shown), keep=keep)
        started = time.perf_counter()
        try:
            sealed: SealedPayload = seal(payload, q.session.guard)
            q.payloads.append(sealed.text)
            q.session.exposure.record_structure("brain_select", paths=len(shown))
            choice = await brain.select(sealed)
            return [ranked[i - 1][0] for i in choice.ids]
        except (BrainError, EgressRefused) as err:
            q.faults.append(self._fault("selection", err, "fuzzy_top"))
            return [c for c, _ in ranked[:keep]]
        finally:
            q.timed("brain", started)

    def _result(self, q: _Question, answers, evidence, tree, fallback: str | None,
                topics: Sequence[str], support: dict[str, tuple[str, ...]] | None = None) -> DualTowerResult:
        return DualTowerResult(
            question=q.question, answers=tuple(answers), evidence=tuple(evidence), brain_payloads=tuple(q.payloads),
            brain=self.brains.name, brain_calls=q.ledger.by_side().get("brain", Usage()).calls, usage=q.ledger.to_dict(),
            exposure=q.session.exposure.to_dict(), faults=tuple(q.faults), tree=tuple(tree),
            timings=dict(q.timings), fallback=fallback, topics=tuple(topics), memory=dict(q.memory),
            indicator_selections=q.indicator_selections, support=dict(support or {}))
