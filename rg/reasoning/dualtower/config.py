"""Settings of the dual-tower (Hand/Brain) controller, validated once (PrivGemo §4.2–4.3).

One :class:`DualTowerConfig` holds the paper's search limits (W_max = 3, D_max = 3, W1 = 80,
α = 0.6), the Brain (``local``: the relation-path planner on the anonymised payload; ``llm``: an
OpenAI-compatible endpoint reached only through :func:`rg.privacy.brain_client`), the privacy
boundary (mode and structure sanitiser) and the Hand's subgraph, exploration and reader
settings (``hand``: the local reader, the LoRA-tuned local reader over the verified walks and the Hand's own
retrieval, or a trusted local LLM booked as ``side: hand``). Cross-field rules fail at load time naming the key and the fix.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from rg.config import Config
from rg.llm.config import LLMConfig, hand_side_only
from rg.privacy.config import PrivacyConfig
from rg.privacy.structure import SanitiserConfig
from rg.reasoning.retriever_reader import RetrieverReaderConfig

BrainKind = Literal["local", "llm"]
HandKind = Literal["local", "tuned", "llm"]
SimilarityKind = Literal["encoder", "lexical", "hybrid"]


LOCAL_HINT_PATHS = 5000  # the local Brain's trie: no prompt to fill
LLM_HINT_PATHS = 200  # an LLM Brain's prompt: each hint path costs tokens


class BrainConfig(Config):
    """The Brain: which implementation, and how its faults are bounded."""

    kind: BrainKind = Field(
        "local",
        description="'local': the trained relation-path planner acting on the anonymised payload; "
        "'llm': an OpenAI-compatible endpoint (`llm`, side: brain).",
    )
    planner: Optional[str] = Field(
        None, description="kind local: the planner checkpoint folder (jobs.train with a planner config writes one)."
    )
    llm: Optional[LLMConfig] = Field(None, description="kind llm: the Brain endpoint; its `side` must be 'brain'.")
    reasks: int = Field(
        1, ge=0, le=3,
        description="Re-asks after a reply that is not valid JSON of the expected shape (bounded); then the "
        "Hand-only path is taken and the fault recorded.",
    )
    beams: int = Field(3, ge=1, le=10, description="kind local: relation paths decoded per question analysis.")
    indicators: int = Field(
        1, ge=1, le=5, description="Most indicators (reasoning-tree nodes) taken from one question analysis."
    )
    predictions: int = Field(
        3, ge=1, le=10,
        description="Predict mode: most auxiliary targets the Brain is asked to name on the paths explored so far.",
    )
    max_hint_paths: Optional[int] = Field(
        None, ge=0, le=5000,
        description="Schema hints of the analysis payload: anonymised relation paths from the topic entities "
        "(no entities, shortest first), at most this many. None: 5000 for the local Brain (its decoding trie; "
        "a 2,000-triple subgraph holds ~300 paths, and a cap of 200 dropped 3-hop ones), 200 for an LLM Brain "
        "(every path costs prompt tokens).",
    )

    @model_validator(mode="after")
    def _kind_has_its_source(self) -> "BrainConfig":
        if self.kind == "llm":
            if self.llm is None:
                raise ValueError("brain.kind is 'llm' but brain.llm is not set. Fix: give brain.llm "
                                 "(base_url, model, side: brain) or set brain.kind: local")
            if self.llm.side != "brain":
                raise ValueError(f"brain.llm.side is {self.llm.side!r}; the Brain is untrusted and its calls are "
                                 "booked and guarded as such. Fix: set brain.llm.side: brain")
        if self.kind == "local" and self.llm is not None:
            raise ValueError("brain.llm is set but brain.kind is 'local'. Fix: set brain.kind: llm or drop brain.llm")
        return self

    @property
    def hint_limit(self) -> int:
        """``max_hint_paths``, or the kind's default when it is None."""
        if self.max_hint_paths is not None:
            return self.max_hint_paths
        return LOCAL_HINT_PATHS if self.kind == "local" else LLM_HINT_PATHS


class HandConfig(Config):
    """How the Hand answers from the verified raw evidence (it stays trusted and local)."""

    kind: HandKind = Field(
        "local",
        description="'local': the retriever reader over the verified walks; 'tuned': the LoRA-tuned local reader "
        "(`reader`) over the verified walks and the Hand's own retrieval (`retriever` over the raw subgraph); 'llm': "
        "a trusted local model (`llm`, side: hand) reads the verified evidence, with the local reader as its fallback.",
    )
    reader: Optional[str] = Field(
        None, description="kind tuned: the tuned reader checkpoint (the `reader` folder of the read stage / "
                          "jobs.train with a reader config).")
    retriever: Optional[str] = Field(
        None, description="kind tuned: a triple retriever checkpoint (the train stage's `retriever` folder) scoring "
                          "the raw working subgraph for the reader's evidence; None: the verified walks only.")
    top_k: int = Field(100, ge=1, le=10_000, description="kind tuned: retrieved triples the evidence chains are "
                                                          "built from (as the reader was trained).")
    retrieval_triples: Optional[int] = Field(
        2000, ge=1, description="kind tuned: the retriever scores the triples within the question's depth of the "
                                "topics, capped at this many, as the retriever's training subgraphs were cut (the demo's "
                                "build: 2,000 around the question's hops). The depth is the reader folder's depth "
                                "predictor's (hops/, written by the read stage; rg.reasoning.hops) for any subgraph; "
                                "without one, a subgraph cut from the store is cut at the verified walks' length (else "
                                "the Brain's predicted depth) and a question's own subgraph is read whole. None: the "
                                "whole working subgraph.")
    verified: Literal["included", "first"] = Field(
        "included", description="kind tuned: the verified walks' triples kept beside the top_k retrieved ones at their "
                                "own retrieval rank ('included'), or ranked above every retrieved one ('first': on the "
                                "demo's 40 validation questions Hits@1 0.575 against 0.675, since a verified path of "
                                "the wrong length then leads the prompt).")
    narrow: bool = Field(
        True, description="When the linker set aside lower-case words that name entities (`drama` in 'which drama "
                          "films did greta halvorsen write'; rg.linking), keep only the answers one edge from such an "
                          "entity, if some are and some are not; the edge is shown as the answer's support. Linked "
                          "questions only; nothing reaches the Brain.")
    llm: Optional[LLMConfig] = Field(
        None, description="kind llm: the Hand's local endpoint; its `side` must be 'hand' (it sees raw names)."
    )
    max_lines: int = Field(50, ge=1, le=2000, description="kind llm: evidence lines shown in the prompt.")
    follow_up: bool = Field(
        True, description="kind llm: ask once more for the `ans:` format when the first reply has none."
    )
    resolve_clusters: Literal["question", "planner", "all"] = Field(
        "question",
        description="When a kept view path grounds to several raw relation sequences (privacy mode: a cluster "
        "label stands for several relations): 'question' keeps those the Hand scores closest to the raw "
        "question (its DRM plus the words' overlap, topic mentions masked); 'planner' keeps those the Hand's "
        "own planner (`hand.planner`, trained on raw relations) finds most likely for the raw question; both "
        "also ground, in privacy mode, the candidates the Brain could not tell from its kept ones and order "
        "them by that score (the Hand holds the question; nothing leaves the Hand); 'all' keeps every one.",
    )
    planner: Optional[str] = Field(
        None,
        description="resolve_clusters planner: a planner checkpoint trained on raw relation paths (e.g. the "
        "plaintext local Brain's), run on the Hand to score raw relation sequences against the raw question.",
    )

    @model_validator(mode="after")
    def _kind_has_its_source(self) -> "HandConfig":
        if self.kind == "llm":
            if self.llm is None:
                raise ValueError("hand.kind is 'llm' but hand.llm is not set. Fix: give hand.llm (base_url, model, "
                                 "side: hand) of a local model or set hand.kind: local")
            hand_side_only(self.llm, "the Hand LLM")
        if self.kind != "llm" and self.llm is not None:
            raise ValueError(f"hand.llm is set but hand.kind is {self.kind!r}. Fix: set hand.kind: llm or drop hand.llm")
        if self.kind == "tuned" and self.reader is None:
            raise ValueError("hand.kind is 'tuned' but hand.reader is not set. Fix: set hand.reader to a tuned reader "
                             "checkpoint (python -m jobs.pipeline --config configs/demo.yaml writes outputs/demo/read/"
                             "reader) or set hand.kind: local")
        if self.kind != "tuned" and (self.reader is not None or self.retriever is not None):
            raise ValueError(f"hand.reader or hand.retriever is set but hand.kind is {self.kind!r}. Fix: set "
                             "hand.kind: tuned or drop them")
        return self


class DualTowerConfig(Config):
    """The dual-tower controller (PrivGemo Algorithms 2–5).

    Attributes mirror the paper's limits: ``w_max`` paths reach the Hand's verification per node,
    ``w1`` survive the fuzzy (DRM) filter, exploration goes at most ``d_max`` hops per topic.
    """

    kind: Literal["dualtower"] = Field("dualtower", description="Always 'dualtower'.")
    brain: BrainConfig = Field(default_factory=BrainConfig, description="The Brain (untrusted; anonymised payloads only).")
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig, description="Anonymisation mode of the Brain's view.")
    hand: HandConfig = Field(default_factory=HandConfig, description="How the Hand answers (local reader or a local LLM).")
    sanitiser: SanitiserConfig = Field(
        default_factory=lambda: SanitiserConfig(group=False),
        description="Structure sanitiser applied to the working subgraph before anything is shown "
        "(group: true merges entities into supernodes; the Hand grounds through them).",
    )
    w_max: int = Field(3, ge=1, le=50, description="W_max: candidates kept per node after Brain selection.")
    w1: int = Field(80, ge=1, le=5000, description="W1: candidates kept by the fuzzy DRM filter (and exploration beam).")
    selection: Literal["ambiguous", "always"] = Field(
        "ambiguous",
        description="When the Brain selects W_max of the W1 candidates: 'ambiguous' only when no candidate walks "
        "the node's indicator (its relation path exactly; one topic), since the Brain has already named that path: "
        "the Hand keeps the candidates walking it, then the rest by DRM, up to W_max; 'always' asks whenever more "
        "than W_max remain.",
    )
    d_max: int = Field(3, ge=1, le=6, description="D_max: most hops from a topic entity to the answer.")
    alpha: float = Field(0.6, ge=0.0, le=1.0, description="α of s = α·DRM(path, indicator) + (1−α)·memory term.")
    max_failures: int = Field(
        5, ge=1, le=10,
        description="A reasoning-tree node is pruned after this many failed verifications (5 reaches every step of "
        "the schedule at d_max 3: three topic depths, refine, predict).",
    )
    max_steps: int = Field(8, ge=1, le=50, description="Bound on verification loops per node.")
    subgraph_hops: Optional[int] = Field(
        None, ge=1, le=6, description="Radius of the working subgraph around the topic entities; None uses d_max."
    )
    max_subgraph_triples: Optional[int] = Field(
        20000, ge=1, description="Size cap of the working subgraph (k-hop cut); None: no cap."
    )
    similarity: SimilarityKind = Field(
        "encoder",
        description="DRM of the pruning score: 'encoder' (cosine of the sentence encoder's embeddings, PrivGemo's "
        "DRM), 'lexical' (word overlap of the texts; no model) or 'hybrid' (the mean of the two: in privacy mode "
        "the labels are opaque cluster ids such as 'rel_03 (type_05→type_04)', which the encoder hardly tells "
        "apart and the word overlap does).",
    )
    reader: RetrieverReaderConfig = Field(
        default_factory=lambda: RetrieverReaderConfig(walk_score="last", aggregate="max"),
        description="The local reader over the verified evidence (walk values: the Brain's ranking).",
    )
    max_paths_per_hub: int = Field(
        16, ge=1, le=1000, description="Multi-topic exploration: branch combinations kept per meeting entity."
    )
    walks: Literal["simple", "trails"] = Field(
        "simple",
        description="How exploration and grounding walk: 'simple' (no entity twice) or 'trails' (an entity may come "
        "again, never by a triple already taken; MetaQA's answers follow relation paths as trails: the writer of X "
        "who also directed the writer's other films is among the directors of the films written by X's writer).",
    )
    multi_topic: Literal["joint", "separate"] = Field(
        "joint",
        description="Questions with several topic entities: 'joint' (PrivGemo's tree BiBFS: every candidate is one "
        "connected path covering all topic entities) or 'separate' (each topic entity explored alone and the "
        "candidates pooled: the baseline the joint search is measured against).",
    )

    @property
    def needs_encoder(self) -> bool:
        """Whether the sentence encoder is used: by the DRM (``similarity`` encoder or hybrid) or by the tuned
        Hand's retriever."""
        return self.similarity in ("encoder", "hybrid") or (self.hand.kind == "tuned" and self.hand.retriever is not None)

    @model_validator(mode="after")
    def _widths(self) -> "DualTowerConfig":
        if self.w_max > self.w1:
            raise ValueError(f"w_max ({self.w_max}) > w1 ({self.w1}): the Brain selects W_max of the W1 kept. "
                             "Fix: lower w_max or raise w1")
        if self.subgraph_hops is not None and self.subgraph_hops < self.d_max:
            raise ValueError(f"subgraph_hops ({self.subgraph_hops}) < d_max ({self.d_max}): exploration would "
                             "leave the working subgraph. Fix: raise subgraph_hops or set it to null")
        return self

    @property
    def hops(self) -> int:
        return self.subgraph_hops if self.subgraph_hops is not None else self.d_max
