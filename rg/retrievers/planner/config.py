"""Configuration of the LoRA relation-path planner (RoG-style, ReG@Path).

One :class:`PlannerConfig` names the base causal LM — a local checkpoint folder of a
LLaMA-architecture model, or a tiny LLaMA built from :class:`TinyLlamaConfig` — the tokenizer
(trained offline with the ``tokenizers`` library for a tiny model, the checkpoint's own
otherwise), the LoRA adapter and the path grammar. :class:`DecodeConfig` holds the beam search
settings, which may change per call without touching the checkpoint.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rg.config import Config
from rg.data.sources import KBSource
from rg.retrievers.planner.prompt import planner_prompt

LLAMA_LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The linear layers of a LLaMA decoder block (peft target-module names)."""


class TinyLlamaConfig(Config):
    """A small LLaMA built from a ``transformers.LlamaConfig`` (random weights, CPU-friendly).

    The vocabulary size and special-token ids come from the tokenizer; the base weights are
    saved with every checkpoint, because only the adapter is trained.
    """

    layers: int = Field(2, ge=1, description="Decoder blocks (LlamaConfig.num_hidden_layers).")
    hidden: int = Field(128, ge=8, description="Model width (hidden_size); a multiple of `heads`.")
    heads: int = Field(4, ge=1, description="Attention heads (num_attention_heads).")
    kv_heads: int | None = Field(None, ge=1, description="Key/value heads for GQA; None equals `heads`.")
    intermediate: int | None = Field(None, ge=1, description="MLP width; None is 2 × hidden.")
    max_positions: int = Field(128, ge=16, description="max_position_embeddings: prompt plus path tokens.")
    seed: int = Field(0, description="Seed of the random base weights.")

    @model_validator(mode="after")
    def _heads_divide(self) -> "TinyLlamaConfig":
        if self.hidden % self.heads:
            raise ValueError(f"tiny.hidden ({self.hidden}) must be a multiple of tiny.heads ({self.heads})")
        kv = self.kv_heads or self.heads
        if self.heads % kv:
            raise ValueError(f"tiny.heads ({self.heads}) must be a multiple of tiny.kv_heads ({kv})")
        return self


class TokenizerConfig(Config):
    """The planner's tokenizer: trained offline on the questions, or the checkpoint's own.

    Every relation and its inverse (``rel^-1``) becomes one added token, as do the path
    markers ``<PATH>``, ``<SEP>`` and ``</PATH>``, whichever kind is used.
    """

    kind: Literal["word", "bpe", "checkpoint"] = Field(
        "word",
        description="'word': word-level vocabulary of the questions; 'bpe': byte-pair merges learnt from them; "
        "'checkpoint': the tokenizer saved in `checkpoint` (needed for a pretrained model).",
    )
    vocab_size: int = Field(8000, ge=16, description="Most frequent words / BPE tokens kept ('word', 'bpe').")
    min_frequency: int = Field(1, ge=1, description="Words or merges seen fewer times are left out.")
    lowercase: bool = Field(True, description="Lowercase the text before splitting ('word', 'bpe').")


class LoraSettings(Config):
    """The LoRA adapter (Hu et al., 2022) as peft's ``LoraConfig``."""

    rank: int = Field(8, ge=1, description="LoRA rank r.")
    alpha: float = Field(16.0, gt=0, description="LoRA alpha; updates are scaled by alpha / rank.")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: tuple[str, ...] = Field(
        LLAMA_LINEAR_MODULES, min_length=1, description="Module names that get LoRA matrices."
    )
    modules_to_save: tuple[str, ...] = Field(
        ("embed_tokens", "lm_head"),
        description="Modules trained in full and saved with the adapter. The relation and path tokens are new, "
        "so their embeddings and output rows must learn; () trains LoRA matrices only.",
    )


class NameMask(Config):
    """Which KG's names a planner's prompts mask as a privacy session does (``PlannerConfig.mask_names``)."""

    kb: KBSource = Field(
        description="The KG file whose entities are masked where a question writes them, by their ids as a memory "
        "store names them (a file of MIDs masks nothing besides the topics); its schema (which words stay public) "
        "is built as the dual tower's Hand builds it for a memory store over the same file.")
    mode: Literal["utility", "privacy"] = Field(
        "utility", description="The privacy mode of the endpoint the planner serves: it decides the public words.")
    protocol: tuple[str, ...] = Field(
        (), description="The Brain protocol's words, public in the session's masking. Leave it empty: the training "
        "job records rg.reasoning.dualtower.prompts.protocol_words() here, and the local Brain warns when the "
        "protocol has changed since (retrain then).")


class PlannerConfig(Config):
    """Settings of :class:`~rg.retrievers.planner.model.PlannerModel`.

    Set exactly one of ``checkpoint`` (a pretrained LLaMA-architecture model on disk, e.g.
    Llama-2-7b-chat as in RoG) or ``tiny`` (a small model built from a config; the default).
    """

    kind: Literal["planner"] = Field("planner", description="Always 'planner'.")
    checkpoint: str | None = Field(
        None, description="A registered base model (e.g. `smollm2-135m`, see rg.models) or a local folder of a "
        "LLaMA-architecture causal LM and its tokenizer (no downloads)."
    )
    tiny: TinyLlamaConfig | None = Field(None, description="Build a small LLaMA from this config instead.")
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig, description="The tokenizer.")
    lora: LoraSettings = Field(default_factory=LoraSettings, description="The LoRA adapter.")
    max_path_len: int = Field(
        3, ge=1, description="Most relations in a path: longer training paths are skipped, decoding stops here."
    )
    max_prompt_tokens: int = Field(64, ge=4, description="Prompts are cut to this many tokens (the path start kept).")
    mask_topics: bool = Field(
        False,
        description="Replace each topic entity's mention in the question by '<e>' in the prompt, in training and "
        "decoding alike: the planner then chooses relations from the wording alone, and constrained decoding "
        "still grounds them from the entities.",
    )
    mask_names: NameMask | None = Field(
        None,
        description="Train on each question as the dual tower's privacy session masks it for the Brain: every "
        "other KG name it writes becomes '<n>' (MetaQA's tags include the words its questions are made of, such as "
        "'writer'). A planner so trained is a local Brain for that KG; None shows those words as written.",
    )
    prompt_id: str = Field("plan_relation_paths@v1", description="Id of the planner prompt template.")

    @model_validator(mode="before")
    @classmethod
    def _one_source(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        checkpoint, tiny = data.get("checkpoint"), data.get("tiny")
        if checkpoint is not None and tiny is not None:
            raise ValueError(
                "set either `checkpoint` (a local model folder) or `tiny` (a model built from a config), not both"
            )
        if checkpoint is None and tiny is None:
            data["tiny"] = {}
        if checkpoint is not None and "tokenizer" not in data:
            data["tokenizer"] = {"kind": "checkpoint"}
        return data

    @model_validator(mode="after")
    def _tokenizer_fits_source(self) -> "PlannerConfig":
        if self.checkpoint is not None and self.tokenizer.kind != "checkpoint":
            raise ValueError(
                "a pretrained `checkpoint` keeps its own tokenizer; set `tokenizer.kind: checkpoint`"
            )
        if self.checkpoint is None and self.tokenizer.kind == "checkpoint":
            raise ValueError("`tokenizer.kind: checkpoint` needs `checkpoint`; use 'word' or 'bpe' with `tiny`")
        missing = [m for m in ("embed_tokens", "lm_head") if m not in self.lora.modules_to_save]
        if self.checkpoint is not None and missing:
            raise ValueError(
                f"a pretrained `checkpoint` gets new relation tokens whose rows must be trained and saved; "
                f"add {missing} to `lora.modules_to_save`"
            )
        planner_prompt(self.prompt_id)
        if self.mask_names is not None and not self.mask_topics:
            raise ValueError("`mask_names` masks questions as a privacy session does, which masks the topics too; "
                             "set `mask_topics: true`")
        needed = self.max_prompt_tokens + self.max_path_tokens
        if self.tiny is not None and self.tiny.max_positions < needed:
            raise ValueError(
                f"tiny.max_positions ({self.tiny.max_positions}) < max_prompt_tokens + 2 × max_path_len ({needed}); "
                "raise tiny.max_positions or lower max_prompt_tokens"
            )
        return self

    @property
    def max_path_tokens(self) -> int:
        """Tokens of the longest path after ``<PATH>``: relations, separators and ``</PATH>``."""
        return 2 * self.max_path_len


class DecodeConfig(Config):
    """Beam search over relation paths (RoG decodes unconstrained; rg adds a graph trie)."""

    beam_width: int = Field(5, ge=1, description="Beams k: the k best paths are returned per question.")
    mode: Literal["constrained", "unconstrained"] = Field(
        "constrained",
        description="'constrained': next tokens restricted by a trie of the relation paths that exist from the "
        "question's topic entities, so every path grounds; 'unconstrained': any token (RoG's decoding).",
    )
    questions_per_batch: int = Field(16, ge=1, description="Questions decoded together (k beams each).")
    max_groundings: int | None = Field(
        256, ge=1, description="Walks kept per (topic entity, path) when grounding (ground's max_paths)."
    )
