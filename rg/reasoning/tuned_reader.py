"""A LoRA-tuned local reader: a pretrained causal LM that writes answer names from the evidence.

RoG's reasoning step (ReG §S(III) reads evidence chains with an LLM): the prompt holds the
question and the evidence lines in the LLM reader's chain format; the model writes answer
names one per line. Decoding is constrained by :class:`AnswerGrammar`, a token trie over the
names that end the evidence chains on the lines shown, other than the question's topic entities (as
``retriever_scores`` ranks them), so the reader can only answer with an entity its prompt shows; it
emits at most ``max_answers`` names, ranked in the order written, each scored by its constrained
log-probability. The adapter is trained by :mod:`rg.training.reader_loop` on
training questions' evidence and gold answers::

    reader = TunedReader.load("outputs/demo/reader/reader")
    reading = await reader.read(question, evidence)      # reader "tuned:smollm2-135m+lora"

A checkpoint folder holds ``adapter/`` (peft), ``reader.json`` (:class:`TunedReaderSettings`)
and the training report; the base model comes from the registry (:mod:`rg.models.registry`).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field, field_validator

from rg.config import Config
from rg.data.entities import is_unnamed
from rg.evidence import Evidence
from rg.evidence.chains import item_chains
from rg.evidence.config import EvidenceConfig
from rg.llm.prompts import PromptRegistry, PromptTemplate
from rg.models.precision import Precision, resolve_dtype
from rg.models.prefix import OpeningCache, shared_prefix
from rg.reasoning.answer_grammar import AnswerGrammar
from rg.reasoning.base import Reading, link_answers

NO_CANDIDATES = "no_candidates"
"""Fallback: the evidence ends at no entity, so there is nothing the reader may answer."""

SETTINGS_FILE = "reader.json"
ADAPTER_DIR = "adapter"
"""Written between two answer names (the tokenizer splits at newlines, so names tokenise alike
alone and in a list)."""

READ_TUNED = PromptTemplate(
    id="read_tuned",
    version=1,
    system="You answer questions with entity names from knowledge-graph evidence.",
    instructions="Each evidence line is a chain of facts, `A → [relation] → B`, read from A. "
                 "Write the entities that answer the question, one per line.",
    example="",
    task_format="Question: {question}\nEvidence:\n{evidence}",
)
"""The tuned reader's prompt: short, since every token is paid for in training and reading on a CPU."""

READ_TUNED_TERSE = PromptTemplate(
    id="read_tuned_terse",
    version=1,
    system="Answer from knowledge-graph evidence.",
    instructions="Write the answer entities, one per line.",
    example="",
    task_format="Question: {question}\nEvidence:\n{evidence}",
)
"""A 30-token shorter prompt (43 tokens around the question and evidence against 73 with SmolLM2's chat
template): a tuned adapter learns the task from its examples, not from the wording, so the tokens go to
evidence lines instead (on MetaQA 3-hop about 0.7 more lines within 288 tokens; docs/models.md)."""

READER_PROMPTS = PromptRegistry((READ_TUNED, READ_TUNED_TERSE))
"""The prompts a tuned reader can be trained with; a checkpoint records its ``prompt_id``."""


class TunedReaderSettings(Config):
    """What a tuned reader checkpoint was trained with; reading uses the same values."""

    base: str = Field("smollm2-135m", description="Registered base model or local folder the adapter belongs to.")
    max_lines: int = Field(24, ge=1, description="Evidence lines in the prompt (the first ones, in evidence order).")
    max_prompt_tokens: int = Field(640, ge=32, description="Drop trailing evidence lines beyond this prompt length.")
    max_answers: int = Field(4, ge=1, description="Names written per question, at most.")
    max_set: int | None = Field(
        None, ge=1, description="Entities shown per set of a line, the best walks' first (`{a | b | +5 more}`); "
        "the reader may answer only the ends it is shown. A multi-hop line passes through and ends at many "
        "entities, so without a cap a few long lines fill the token budget. None shows every entity."
    )
    max_name_tokens: int = Field(32, ge=1, description="Candidate names longer than this are not offered.")
    short_relations: bool = Field(
        True, description="Show a dotted Freebase relation by its last part (`film.film.directed_by` → "
        "`directed_by`): about a third fewer prompt tokens, so more evidence lines fit."
    )
    machine_ids: Literal["elided", "shown"] = Field(
        "elided", description="Bare Freebase machine ids (CVT nodes such as `m.0ljgpd`), which have no text a "
        "reader could match a question to: "
        "'elided' skips lines whose every chain ends at one, prints them as `*` inside a line and never offers "
        "them as answers (more lines fit the token budget); 'shown' keeps them as they are. Checkpoints that "
        "do not record it were trained with 'shown' (load_settings)."
    )
    precision: Precision = Field(
        "auto", description="Number format of the frozen base weights in training and reading: 'auto' (bf16 "
        "where the device multiplies bf16 natively, as CPUs with AMX or AVX512-BF16 do, else fp32), 'fp32' or "
        "'bf16' (rg.models.precision). The adapter trains in fp32 either way. Checkpoints that do not record "
        "it were trained in fp32 and are read so (load_settings)."
    )
    prompt_id: str = Field(
        READ_TUNED.full_id, description="The prompt template the adapter learns and reads with: "
        f"{', '.join(READER_PROMPTS.ids())} (READER_PROMPTS). The terse one leaves more of max_prompt_tokens to evidence."
    )

    @field_validator("prompt_id")
    @classmethod
    def _known_prompt(cls, value: str) -> str:
        if value not in READER_PROMPTS:
            raise ValueError(f"unknown tuned reader prompt {value!r}; use one of {list(READER_PROMPTS.ids())}")
        return READER_PROMPTS.get(value).full_id

    evidence: EvidenceConfig | None = Field(
        None, description="The evidence settings the reader was trained on (set by the training job from its "
        "`evidence` section; None in checkpoints written before they were recorded). QA runs compare theirs "
        "with it (evidence_mismatch).",
    )


def load_settings(checkpoint: str | Path) -> TunedReaderSettings:
    """A checkpoint's ``reader.json``; one that predates ``machine_ids`` or ``precision`` read as it was
    trained (ids shown, fp32)."""
    recorded = json.loads((Path(checkpoint) / SETTINGS_FILE).read_text())
    return TunedReaderSettings.model_validate({"machine_ids": "shown", "precision": "fp32", **recorded})


def evidence_mismatch(checkpoint: str | Path, evidence: EvidenceConfig) -> dict[str, list[Any]]:
    """The evidence settings in which a QA run differs from those the checkpoint's reader was trained on:
    ``{field: [trained, used]}``; empty when they agree or the checkpoint does not record them.

    A reader trained on lines ordered by ``expected_relevant`` reads evidence ordered by ``strength``
    without an error, but its first lines are then other lines than those it learned to answer from.
    """
    path = Path(checkpoint) / SETTINGS_FILE
    if not path.is_file():
        return {}
    trained = load_settings(checkpoint).evidence
    if trained is None:
        return {}
    was, now = trained.model_dump(mode="json"), evidence.model_dump(mode="json")
    return {key: [was[key], now.get(key)] for key in was if was[key] != now.get(key)}


class TunedReaderConfig(Config):
    """``reader: {kind: tuned, checkpoint: ...}``: answer with a tuned reader checkpoint."""

    checkpoint: str = Field(..., description="Folder written by the reader training job (holds reader.json).")
    max_answers: int | None = Field(None, ge=1, description="Override the checkpoint's max_answers.")


_DOTTED_RELATION = re.compile(r"\[(?:[A-Za-z_][A-Za-z0-9_]*\.)+([A-Za-z_][A-Za-z0-9_]*)\]")


def compact_line(line: str) -> str:
    """``[film.film.directed_by]`` → ``[directed_by]`` in a rendered evidence line (other text unchanged)."""
    return _DOTTED_RELATION.sub(r"[\1]", line)


_MACHINE_ID = r"[mg]\.[0-9a-z_]+"
_MACHINE_SET = re.compile(r"\{" + _MACHINE_ID + r"(?: \| " + _MACHINE_ID + r")*(?: \| \+[0-9]+ more)?\}")
# a whole entity of a rendered line: it starts the line, follows an arrow, "{", "| " or "& ", and ends
# the line or comes before " →", " ←", " &", "}" or " |" (rg.evidence.chains' notation)
_LONE_MACHINE_ID = re.compile(r"(^|[→←] |\{|\| |& )" + _MACHINE_ID + r"(?=$| [→←&]|\}| \|)")
ELIDED = "*"
"""What a bare machine id (or a set of nothing else) prints as in an elided line."""


def elide_machine_ids(line: str) -> str:
    """``A → [education] → m.0ljgpd → [institution] → B`` → ``A → [education] → * → [institution] → B``;
    a set of machine ids only becomes one ``*``; an entity is elided only as a whole, so names
    (``m. night shyamalan``, ``g.i joe``) stay."""
    return _LONE_MACHINE_ID.sub(r"\1" + ELIDED, _MACHINE_SET.sub(ELIDED, line))


def prompt_messages(settings: TunedReaderSettings, question: str, lines: Sequence[str]) -> list[dict[str, str]]:
    """The chat messages for ``question`` with these evidence lines (the settings' prompt template)."""
    return READER_PROMPTS.get(settings.prompt_id).render(question=question, evidence="\n".join(lines) if lines else "(none)")


def prompt_ids(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """The chat template's token ids of ``messages``, ready for the assistant's turn."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def template_opening(tokenizer, settings: TunedReaderSettings) -> list[int]:
    """The token ids every prompt of ``settings.prompt_id`` opens with: what two prompts whose questions differ
    from their first letter on share (the system turn and the instructions)."""
    a, b = (prompt_ids(tokenizer, prompt_messages(settings, question, [])) for question in ("a", "b"))
    return a[: shared_prefix([a, b])]


@dataclass(frozen=True)
class ReaderPrompt:
    """The prompt of one question and the answer candidates it shows.

    Attributes:
        ids: Prompt token ids (chat template applied, ready for the assistant's turn).
        lines: Evidence lines shown (the first ones, fewer than ``max_lines`` when over the token budget).
        candidates: Ends of the chains on those lines, in line order, minus the topic entities: what the
            reader may answer.
    """

    ids: list[int]
    lines: int
    candidates: tuple[str, ...]


def shown_items(settings: TunedReaderSettings, evidence: Evidence) -> list:
    """The evidence items a prompt may show, in order: the first ``max_lines`` (with ``machine_ids: elided``, of
    those with a named end); :func:`build_prompt` shows as many of them as fit its token budget."""
    elided = settings.machine_ids == "elided"
    items = [item for item in evidence.items
             if not elided or any(not is_unnamed(e) for chain in item_chains(item)
                                  for e in chain.shown_ends(settings.max_set))]
    return items[: settings.max_lines]


def build_prompt(tokenizer, settings: TunedReaderSettings, question: str, evidence: Evidence) -> ReaderPrompt:
    """The first ``max_lines`` evidence lines, fewer if over ``max_prompt_tokens``, and their chain ends
    other than the question's topic entities (with ``machine_ids: elided``, lines ending at machine ids
    only are skipped and such ends never offered)."""
    elided = settings.machine_ids == "elided"
    items = shown_items(settings, evidence)
    lines = [item.render(settings.max_set) for item in items]
    if settings.short_relations:
        lines = [compact_line(line) for line in lines]
    if elided:
        lines = [elide_machine_ids(line) for line in lines]

    def encode(count: int) -> list[int]:
        return prompt_ids(tokenizer, prompt_messages(settings, question, lines[:count]))

    fits = len(lines)
    ids = encode(fits)
    if len(ids) > settings.max_prompt_tokens:  # the most lines within the budget, by bisection
        low, high = 0, fits  # no lines always counts as fitting; all of them do not fit
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if len(encode(middle)) <= settings.max_prompt_tokens else (low, middle)
        fits = low
        ids = encode(fits)
    topics = set(evidence.topics)  # a chain back to its own topic (a cycle) never answers it: as retriever_scores
    candidates = tuple(dict.fromkeys(e for item in items[:fits] for chain in item_chains(item)
                                     for e in chain.shown_ends(settings.max_set)
                                     if e not in topics and not (elided and is_unnamed(e))))
    return ReaderPrompt(ids=ids, lines=fits, candidates=candidates)


def constrained_greedy(model, ids: Sequence[int], grammar: AnswerGrammar, budget: int,
                       cache=None) -> tuple[list[int], list[float]]:
    """Greedy decoding within ``grammar`` after the prompt ``ids``: the tokens written (EOS last, unless ``budget``
    ran out) and each one's log-probability under the grammar's mask, as ``generate`` with the grammar as its
    ``prefix_allowed_tokens_fn`` writes and scores them.

    Where the grammar allows one token only (the rest of a name whose opening tokens no other candidate shares),
    that token is written with log-probability 0 and the model is not asked: such runs go into the model
    together, in one forward pass before the next choice (jump-forward decoding, as SGLang's compressed grammars
    do), so a reply costs one pass per choice instead of one per token. ``cache`` may hold the prompt's opening
    (:class:`~rg.models.prefix.OpeningCache`); it is extended in place.
    """
    from transformers import DynamicCache

    cache = cache if cache is not None else DynamicCache()
    device = next(model.parameters()).device
    feed, written, logprobs = list(ids[cache.get_seq_length():]), [], []
    while len(written) < budget:
        logits = model(input_ids=torch.tensor([feed], device=device), cache=cache, use_cache=True,
                       logits_to_keep=1).logits[0, -1].float()  # (V,)
        allowed = torch.tensor(grammar.allowed(written), device=device)
        masked = torch.full_like(logits, float("-inf"))
        masked[allowed] = logits[allowed]
        token = int(masked.argmax())
        written.append(token)
        logprobs.append(float(torch.log_softmax(masked, dim=-1)[token]))
        feed = [token]
        while token != grammar.eos and len(written) < budget:
            following = grammar.allowed(written)
            if len(following) != 1:
                break
            token = following[0]
            written.append(token)
            logprobs.append(0.0)
            feed.append(token)
        if token == grammar.eos:
            break
    return written, logprobs


def eos_id(tokenizer, model) -> int:
    value = getattr(model.generation_config, "eos_token_id", None)
    value = value[0] if isinstance(value, list) else value
    return int(value if value is not None else tokenizer.eos_token_id)


class TunedReader:
    """A :class:`~rg.reasoning.base.Reader` backed by a LoRA-tuned local causal LM.

    Args:
        model: The causal LM with the adapter (merged or not).
        tokenizer: Its tokenizer (with the base's chat template).
        settings: The checkpoint's settings.
        name: Implementation name (``tuned:<base>+lora``).
    """

    def __init__(self, model, tokenizer, settings: TunedReaderSettings, name: str | None = None) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.settings = settings
        self.name = name or f"tuned:{settings.base}+lora"
        self.eos = eos_id(tokenizer, model)
        self._lock = threading.Lock()
        self.opening = OpeningCache(self.model, lambda: template_opening(tokenizer, settings))

    @classmethod
    def load(cls, checkpoint: str | Path, max_answers: int | None = None,
             cache_dir: str | Path | None = None) -> "TunedReader":
        """Base model from the registry, adapter merged from ``checkpoint/adapter``, in the checkpoint's precision.

        Raises:
            FileNotFoundError: if ``checkpoint`` is not a tuned reader folder.
        """
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from rg.models.registry import resolve_model

        folder = Path(checkpoint)
        if not (folder / SETTINGS_FILE).is_file():
            raise FileNotFoundError(f"{folder} is not a tuned reader checkpoint (no {SETTINGS_FILE}); set "
                                    "`reader.checkpoint` to the `reader` folder the reader training job wrote")
        settings = load_settings(folder)
        if max_answers is not None:
            settings = settings.model_copy(update={"max_answers": max_answers})
        base = resolve_model(settings.base, cache_dir)
        tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True, dtype=torch.float32)
        model = PeftModel.from_pretrained(model, str(folder / ADAPTER_DIR)).merge_and_unload()  # merged in fp32
        return cls(model.to(resolve_dtype(settings.precision)), tokenizer, settings)

    @classmethod
    def from_config(cls, config: TunedReaderConfig) -> "TunedReader":
        return cls.load(config.checkpoint, config.max_answers)

    def grammar(self, candidates: Sequence[str]) -> AnswerGrammar:
        """The grammar over these candidate names."""
        return AnswerGrammar(candidates, self.tokenizer, self.eos, self.settings.max_answers,
                             self.settings.max_name_tokens)

    @torch.inference_mode()
    def answer(self, question: str, evidence: Evidence) -> list[tuple[str, float]]:
        """Constrained greedy decoding over the shown lines' chain ends: names written, with log-probabilities."""
        prompt = build_prompt(self.tokenizer, self.settings, question, evidence)
        grammar = self.grammar(prompt.candidates)
        if grammar.empty:
            return []
        ids = prompt.ids
        budget = self.settings.max_answers * (self.settings.max_name_tokens + 1) + 1
        written, logprobs = constrained_greedy(self.model, ids, grammar, budget, self.opening.for_prompt(ids))
        names = grammar.parse(written)
        return [(name, _name_logprob(name, written, logprobs, grammar)) for name in names]

    async def read(self, question: str, evidence: Evidence) -> Reading:
        """Answer in a worker thread (one question at a time per model); no candidates is a fallback."""
        def run() -> list[tuple[str, float]]:
            with self._lock:
                return self.answer(question, evidence)

        written = await asyncio.to_thread(run)
        if not written:
            return Reading(self.name, prompt_id=self.settings.prompt_id, fallback=NO_CANDIDATES)
        linked = link_answers([name for name, _ in written], evidence)
        ranked = tuple(replace(a, score=score) for a, (_, score) in zip(linked, written))
        return Reading(self.name, ranked=ranked, selected=ranked, prompt_id=self.settings.prompt_id)


def _name_logprob(name: str, written: Sequence[int], logprobs: Sequence[float], grammar: AnswerGrammar) -> float:
    """Sum of the constrained log-probabilities of the tokens of ``name``'s first occurrence."""
    target = grammar.tokenizer(name, add_special_tokens=False)["input_ids"]
    for start in range(len(written) - len(target) + 1):
        if list(written[start:start + len(target)]) == target and (start == 0 or written[start - 1] == grammar.sep[0]):
            return float(sum(logprobs[start:start + len(target)]))
    return float("nan")
