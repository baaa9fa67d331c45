"""The relation-path planner: a LLaMA-architecture causal LM with a LoRA adapter.

After RoG (Luo et al., 2024, "Reasoning on Graphs: Faithful and Interpretable Large Language
Model Reasoning"), whose planning module fine-tunes LLaMA-2 to write the relation paths that
answer a question; ReG (Zou et al., 2025) uses the same planner as its path-level retriever
(ReG@Path). The LM reads ``<s> prompt <PATH>`` and is trained to continue with
``r1 <SEP> r2 </PATH>``; the loss covers the path tokens only. Only the LoRA matrices (Hu et
al., 2022) and the ``modules_to_save`` (by default the embeddings and the output layer, since
the relation tokens are new) are trained.

A checkpoint is a folder::

    config.json   the PlannerConfig
    meta.json     format version, kind 'planner', prompt id, label source, relations, extras
    tokenizer/    the tokenizer (transformers save_pretrained), relation tokens included
    adapter/      the peft adapter (save_pretrained): LoRA matrices and modules_to_save
    base/         tiny models only: the frozen random base weights and the LlamaConfig

A pretrained base is not copied: ``config.checkpoint`` names its folder.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from rg.retrievers.base import CHECKPOINT_FORMAT, CONFIG_FILE, META_FILE, CheckpointMeta, read_meta
from rg.retrievers.planner.config import PlannerConfig
from rg.retrievers.planner.prompt import PlanPrompt, brain_wording, mask_topics, planner_prompt
from rg.models.registry import resolve_model
from rg.retrievers.planner.tokenizer import PathVocab, checkpoint_tokenizer, train_tokenizer

PLANNER_KIND = "planner"
TOKENIZER_DIR = "tokenizer"
ADAPTER_DIR = "adapter"
BASE_DIR = "base"
IGNORE_INDEX = -100
"""Label of prompt and padding positions (ignored by the loss)."""


@dataclass(frozen=True)
class Example:
    """One tokenised (question, relation path) pair.

    Attributes:
        id: The question id.
        input_ids: Prompt ids then path ids.
        labels: ``-100`` over the prompt, the path ids over the path.
    """

    id: str
    input_ids: tuple[int, ...]
    labels: tuple[int, ...]


Wording = Callable[[str, Sequence[str]], str]
"""``wording(question, topics)``: a raw question masked as a privacy session masks it for the Brain."""


def name_wording(config: PlannerConfig) -> Wording | None:
    """The session masking of ``config.mask_names`` (:class:`rg.privacy.wording.SessionWording` over the schema
    of its KB, built as a memory-store Hand builds it, with its recorded protocol words public), or None without
    ``mask_names``. Reads the KB file."""
    if config.mask_names is None:
        return None
    from rg.data.sources import load_kb
    from rg.privacy.schema import KGSchema
    from rg.privacy.wording import SessionWording

    kg, _ = load_kb(config.mask_names.kb)
    return SessionWording(KGSchema.build(kg.triples()), config.mask_names.mode, frozenset(config.mask_names.protocol))


def prompt_question(config: PlannerConfig, question: str, topics: Sequence[str], wording: Wording | None = None) -> str:
    """The question as a prompt shows it: with ``wording`` (a ``mask_names`` planner's), masked as the Brain
    is sent it, then in the planner's form (:func:`brain_wording`); else topic mentions masked when
    ``config.mask_topics``."""
    if wording is not None:
        return brain_wording(wording(question, topics), config.mask_topics, mask_names=True)
    return mask_topics(question, topics) if config.mask_topics else question


def _tiny_base(config: PlannerConfig, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    tiny = config.tiny
    assert tiny is not None  # checked by the caller
    needed = config.max_prompt_tokens + config.max_path_tokens
    if tiny.max_positions < needed:
        raise ValueError(
            f"tiny.max_positions ({tiny.max_positions}) < max_prompt_tokens + 2 × max_path_len ({needed}); raise it"
        )
    llama = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=tiny.hidden,
        intermediate_size=tiny.intermediate or 2 * tiny.hidden,
        num_hidden_layers=tiny.layers,
        num_attention_heads=tiny.heads,
        num_key_value_heads=tiny.kv_heads or tiny.heads,
        max_position_embeddings=tiny.max_positions,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(tiny.seed)
        return LlamaForCausalLM(llama)


def _pretrained_base(config: PlannerConfig, tokenizer):
    from transformers import AutoModelForCausalLM

    folder = resolve_model(str(config.checkpoint))  # a registered name (e.g. smollm2-135m) or a folder
    base = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    if getattr(base.config, "model_type", None) != "llama":
        raise ValueError(f"checkpoint {folder} is a {base.config.model_type!r} model; the planner needs a LLaMA")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        base.resize_token_embeddings(len(tokenizer))
    return base


def _lora(config: PlannerConfig):
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora.rank,
        lora_alpha=config.lora.alpha,
        lora_dropout=config.lora.dropout,
        target_modules=list(config.lora.target_modules),
        modules_to_save=list(config.lora.modules_to_save) or None,
        task_type="CAUSAL_LM",
    )


class PlanEncoder:
    """What turns questions and relation paths into a planner's token ids: its config and tokenizer, no model.

    :class:`PlannerModel` encodes through one; the streamed training input
    (:mod:`rg.training.planner_stream`) ships one to Ray Data tasks, which tokenise the examples
    where the targets are.

    Args:
        config: The planner config (prompt id, ``max_prompt_tokens``, ``max_path_len``, ``mask_topics``).
        tokenizer: The planner's tokenizer (relation and path tokens included).
        wording: The session masking of ``config.mask_names`` when the caller has it built already; otherwise
            built from the config on first use (:func:`name_wording`), travelling with the encoder once built.
    """

    def __init__(self, config: PlannerConfig, tokenizer, wording: Wording | None = None) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.vocab = PathVocab.from_tokenizer(tokenizer)
        self.prompt: PlanPrompt = planner_prompt(config.prompt_id)
        self._wording = wording

    @property
    def wording(self) -> Wording | None:
        """The session masking a ``mask_names`` planner's prompts show (None without ``mask_names``)."""
        if self._wording is None and self.config.mask_names is not None:
            self._wording = name_wording(self.config)
        return self._wording

    def prompt_question(self, question: str, topics: Sequence[str]) -> str:
        """The question as the prompt shows it (:func:`prompt_question`)."""
        return prompt_question(self.config, question, topics, self.wording)

    def prompt_ids(self, questions: Sequence[str]) -> list[list[int]]:
        """``<s> prompt <PATH>`` ids per question, cut to ``max_prompt_tokens``."""
        if not questions:
            return []
        texts = [self.prompt.render(q) for q in questions]
        encoded = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        head = [] if self.vocab.bos is None else [self.vocab.bos]
        room = self.config.max_prompt_tokens - len(head) - 1
        return [head + list(ids[:room]) + [self.vocab.start] for ids in encoded]

    def examples(self, rows: Sequence[tuple[str, str, Sequence[str]]]) -> list[Example]:
        """Tokenise ``(id, question, relation_path)`` rows into training examples.

        Raises:
            KeyError: for a relation without a token.
            ValueError: for a path longer than ``max_path_len``.
        """
        prompts = self.prompt_ids([question for _, question, _ in rows])
        out = []
        for (qid, _, path), prompt in zip(rows, prompts):
            if len(path) > self.config.max_path_len:
                raise ValueError(f"{qid}: path of {len(path)} relations exceeds max_path_len {self.config.max_path_len}")
            target = self.vocab.encode(path)
            out.append(Example(qid, tuple(prompt + target), tuple([IGNORE_INDEX] * len(prompt) + target)))
        return out


class PlannerModel(nn.Module):
    """A causal LM with a LoRA adapter that writes relation paths (RoG's planner).

    Build a fresh one with :meth:`build`, read one back with :meth:`load`. ``forward`` returns
    the training loss; decoding lives in :mod:`rg.retrievers.planner.decode`.

    Args:
        config: The planner config.
        tokenizer: Its tokenizer (relation and path tokens included).
        lm: The peft-wrapped causal LM.
        relations: Stored relation names the tokenizer has tokens for.
        base_state: Tiny models only: the frozen base weights, saved with each checkpoint.
    """

    def __init__(self, config: PlannerConfig, tokenizer, lm: nn.Module, relations: Sequence[str],
                 base_state: dict[str, torch.Tensor] | None = None, wording: Wording | None = None) -> None:
        super().__init__()
        self.config = config
        self.tokenizer = tokenizer
        self.lm = lm
        self.relations = tuple(relations)
        # the text-to-ids side alone, picklable without the model
        self.encoder = PlanEncoder(config, tokenizer, wording)
        self.vocab = self.encoder.vocab
        self.prompt: PlanPrompt = self.encoder.prompt
        self._base_state = base_state
        self._merged = False

    # ------------------------------------------------------------------------------ building
    @classmethod
    def build(cls, config: PlannerConfig, questions: Iterable[str], relations: Iterable[str],
              wording: Wording | None = None) -> "PlannerModel":
        """A fresh planner: tokenizer, base model and an untrained adapter.

        Args:
            config: The planner config.
            questions: Training questions' prompt texts (a trained tokenizer learns its vocabulary from them).
            relations: Stored relation names of the training graphs; each and its inverse get a token.
            wording: ``config.mask_names``' session masking, when the caller built it for ``questions``.
        """
        from peft import get_peft_model

        relations = sorted(set(relations))
        prompt = planner_prompt(config.prompt_id)
        if config.tiny is not None:
            tokenizer = train_tokenizer((prompt.render(q) for q in questions), relations, config.tokenizer)
            base = _tiny_base(config, tokenizer)
            base_state = dict(base.state_dict())  # frozen: these tensors never change
        else:
            tokenizer = checkpoint_tokenizer(str(resolve_model(str(config.checkpoint))), relations)
            base = _pretrained_base(config, tokenizer)
            base_state = None
        lm = get_peft_model(base, _lora(config))
        return cls(config, tokenizer, lm, relations, base_state, wording)

    @classmethod
    def load(cls, directory: str | Path, trainable: bool = False, merge: bool | None = None) -> "PlannerModel":
        """Read a planner saved by :meth:`save` (in eval mode unless ``trainable``).

        Args:
            directory: The checkpoint folder.
            trainable: Make the adapter trainable (resuming training) and leave train mode on.
            merge: Fold the LoRA matrices into the base weights for faster inference (a merged
                planner cannot be trained or saved); None merges when not ``trainable``.

        Raises:
            FileNotFoundError: if the folder is not a planner checkpoint.
            ValueError: if it holds another kind or format.
        """
        from peft import PeftModel
        from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

        folder = Path(directory)
        meta = read_planner_meta(folder)
        config = PlannerConfig.model_validate_json((folder / CONFIG_FILE).read_text())
        tokenizer = PreTrainedTokenizerFast.from_pretrained(folder / TOKENIZER_DIR)
        if config.tiny is not None:
            base = LlamaForCausalLM.from_pretrained(folder / BASE_DIR)
            base_state = dict(base.state_dict())
        else:
            base = _pretrained_base(config, tokenizer)
            base_state = None
        lm = PeftModel.from_pretrained(base, folder / ADAPTER_DIR, is_trainable=trainable)
        model = cls(config, tokenizer, lm, meta.extra.get("relations", ()), base_state)
        model.train(trainable)
        if (not trainable) if merge is None else merge:
            if trainable:
                raise ValueError("a merged planner cannot be trained; load with merge=False")
            model.lm.merge_adapter()
            model._merged = True
        return model

    def save(self, directory: str | Path, meta: CheckpointMeta | None = None) -> Path:
        """Write config, metadata, tokenizer, adapter (and a tiny model's base) into ``directory``.

        Args:
            directory: The checkpoint folder (created if missing).
            meta: What the planner was trained from; ``kind``, the prompt id and the relations are filled in.
        """
        if self._merged:
            raise ValueError("this planner's adapter is merged into its base for inference; "
                             "load the checkpoint with merge=False to save it")
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        meta = meta or CheckpointMeta()
        meta = meta.model_copy(update={
            "kind": PLANNER_KIND,
            "prompt_ids": (self.prompt.full_id,),
            "extra": {**meta.extra, "relations": list(self.relations), "prompt_digest": self.prompt.digest},
        })
        (folder / CONFIG_FILE).write_text(self.config.model_dump_json(indent=2) + "\n")
        record = {"format": CHECKPOINT_FORMAT, **meta.model_dump(mode="json")}
        (folder / META_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        self.tokenizer.save_pretrained(folder / TOKENIZER_DIR)
        # embed_tokens / lm_head are saved through modules_to_save (or, for a tiny model, in base/)
        self.lm.save_pretrained(folder / ADAPTER_DIR, save_embedding_layers=False)
        if self._base_state is not None:  # a copy: save_pretrained empties the dict it is given
            self.lm.get_base_model().save_pretrained(folder / BASE_DIR, state_dict=dict(self._base_state))
        return folder

    # ----------------------------------------------------------------------------- encoding
    def prompt_question(self, question: str, topics: Sequence[str]) -> str:
        """The question as this planner's prompt shows it (:meth:`PlanEncoder.prompt_question`)."""
        return self.encoder.prompt_question(question, topics)

    def prompt_ids(self, questions: Sequence[str]) -> list[list[int]]:
        """``<s> prompt <PATH>`` ids per question, cut to ``max_prompt_tokens`` (:meth:`PlanEncoder.prompt_ids`)."""
        return self.encoder.prompt_ids(questions)

    def examples(self, rows: Sequence[tuple[str, str, Sequence[str]]]) -> list[Example]:
        """Tokenise ``(id, question, relation_path)`` rows into training examples (:meth:`PlanEncoder.examples`)."""
        return self.encoder.examples(rows)

    # ----------------------------------------------------------------------------- training
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over the path tokens (``labels != -100``).

        Shapes:
            input_ids, attention_mask, labels: (B, T) -> ()
        """
        return self.lm(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Next-token logits at every position.

        Shapes:
            input_ids, attention_mask: (B, T) -> (B, T, V)
        """
        return self.lm(input_ids=input_ids, attention_mask=attention_mask).logits

    @property
    def adapter_parameters(self) -> int:
        """Number of adapter values: LoRA matrices and modules_to_save copies."""
        return sum(p.numel() for n, p in self.named_parameters() if "lora_" in n or "modules_to_save" in n)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """CPU copies of the trained tensors (LoRA matrices and modules_to_save)."""
        return {n: p.detach().cpu().clone() for n, p in self.named_parameters() if p.requires_grad}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        """Copy tensors from :meth:`trainable_state` back in.

        Raises:
            KeyError: naming a tensor this model does not train.
        """
        params = dict(self.named_parameters())
        with torch.no_grad():
            for name, value in state.items():
                if name not in params:
                    raise KeyError(f"{name!r} is not a parameter of this planner")
                params[name].copy_(value)


def read_planner_meta(directory: str | Path) -> CheckpointMeta:
    """The metadata of a planner checkpoint.

    Raises:
        FileNotFoundError: if the folder has no ``meta.json``.
        ValueError: if it is not a planner checkpoint of a supported format.
    """
    meta = read_meta(directory)
    if meta.kind != PLANNER_KIND:
        raise ValueError(f"{directory} holds a {meta.kind!r} checkpoint, not a planner; load it with load_retriever")
    return meta


def load_planner(directory: str | Path, merge: bool = True) -> PlannerModel:
    """A saved planner in eval mode, ready for :func:`rg.retrievers.planner.plan.plan_questions`.

    Args:
        directory: The checkpoint folder.
        merge: Fold the LoRA matrices into the base weights (faster; the planner cannot be saved).
    """
    return PlannerModel.load(directory, trainable=False, merge=merge)
