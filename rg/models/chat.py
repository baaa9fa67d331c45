"""A local chat model that answers a batch of chat requests in one ``generate`` call.

:class:`LocalChatModel` is what the local OpenAI-compatible server runs; it needs no Ray and no
HTTP, so tests and benchmarks use it directly. Requests in one batch may differ in length,
``max_tokens``, ``temperature`` and ``stop`` strings: prompts are left-padded, a per-row
stopping criterion ends each row at its own limit or stop string (rows that finish early stop
costing attention work once every row is done), and a per-row logits processor applies each
row's temperature (temperature 0 is greedy inside a sampled batch). Token counts come from the
model's tokenizer, as an OpenAI-compatible ``usage`` block reports them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from rg.models.registry import resolve_model


class PromptTooLongError(ValueError):
    """A request's prompt plus ``max_tokens`` exceeds the model's context window."""


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion to produce.

    Attributes:
        messages: OpenAI-style ``{"role", "content"}`` messages.
        max_tokens: Completion-token limit.
        temperature: 0 for greedy decoding, else the sampling temperature.
        stop: Strings that end the completion (not included in the text).
    """

    messages: Sequence[dict[str, str]]
    max_tokens: int = 256
    temperature: float = 0.0
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChatResult:
    """The completion of one :class:`ChatRequest` with its token counts."""

    text: str
    finish_reason: Literal["stop", "length"]
    prompt_tokens: int
    completion_tokens: int


@dataclass
class _Rows:
    """Per-row decoding state shared by the stopping criterion and the logits processor."""

    prompt_len: int
    limits: list[int]
    stops: list[tuple[str, ...]]
    temperatures: list[float]
    done: list[bool] = field(default_factory=list)


class _RowStops:
    """Stopping criterion: a row is done at its own ``max_tokens`` or when a stop string appears."""

    def __init__(self, rows: _Rows, tokenizer) -> None:
        self.rows = rows
        self.tokenizer = tokenizer

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        generated = input_ids.shape[1] - self.rows.prompt_len
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        for row in range(input_ids.shape[0]):
            if generated >= self.rows.limits[row]:
                done[row] = True
            elif self.rows.stops[row]:
                tail = self.tokenizer.decode(input_ids[row, self.rows.prompt_len:], skip_special_tokens=True)
                done[row] = any(stop in tail for stop in self.rows.stops[row])
        return done


class _RowTemperatures:
    """Logits processor: divide each row by its temperature; temperature 0 keeps only the argmax."""

    def __init__(self, temperatures: Sequence[float]) -> None:
        self.temperatures = list(temperatures)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        out = scores.clone()
        for row, temperature in enumerate(self.temperatures):
            if temperature > 0:
                out[row] = scores[row] / temperature
            else:
                keep = scores[row].argmax()
                out[row] = float("-inf")
                out[row, keep] = 0.0
        return out


class LocalChatModel:
    """A causal LM with a chat template, answering batches of :class:`ChatRequest`.

    Args:
        model: A ``transformers`` causal LM (eval mode is set here).
        tokenizer: Its tokenizer, with a chat template.
        name: The model name reported in responses (e.g. ``smollm2-135m`` or ``smollm2-135m+reader``).
    """

    def __init__(self, model, tokenizer, name: str) -> None:
        if tokenizer.chat_template is None:
            raise ValueError(f"model {name!r} has no chat template; the chat server needs an instruct model")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self.context = int(getattr(model.config, "max_position_embeddings", 2048))

    @classmethod
    def load(cls, base: str, adapter: str | Path | None = None, *, cache_dir: str | Path | None = None,
             name: str | None = None) -> "LocalChatModel":
        """Load a registered or local base model, optionally with a LoRA adapter merged in.

        Args:
            base: Registry name or local folder (see :func:`rg.models.registry.resolve_model`).
            adapter: A peft adapter folder trained on this base.
            cache_dir: The models cache (default ``$RG_MODELS_DIR`` or ``~/.cache/rg/models``).
            name: Reported model name (default: ``base``, plus ``+<adapter folder name>``).
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = resolve_model(base, cache_dir)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
        if adapter is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
        label = name or (base if adapter is None else f"{base}+{Path(adapter).name}")
        return cls(model, tokenizer, label)

    def prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The prompt's token ids: the chat template applied, ready for the assistant's turn."""
        ids = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # newer transformers return a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)

    def checked_prompt(self, request: ChatRequest) -> list[int]:
        """The request's prompt ids, after checking that prompt plus ``max_tokens`` fit the context.

        Raises:
            PromptTooLongError: naming both numbers and the fix.
        """
        ids = self.prompt_ids(request.messages)
        if len(ids) + request.max_tokens > self.context:
            raise PromptTooLongError(
                f"{len(ids)} prompt tokens + max_tokens {request.max_tokens} exceed the model's context of "
                f"{self.context} tokens. Fix: shorten `messages` or lower `max_tokens`"
            )
        return ids

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` without special tokens."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @torch.inference_mode()
    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Complete every request in one batched ``generate`` call.

        Raises:
            PromptTooLongError: if a prompt plus its ``max_tokens`` does not fit the context.
        """
        if not requests:
            return []
        prompts = [self.checked_prompt(r) for r in requests]
        width = max(len(ids) for ids in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            mask[row, width - len(ids):] = 1
        rows = _Rows(prompt_len=width, limits=[r.max_tokens for r in requests],
                     stops=[tuple(r.stop) for r in requests], temperatures=[r.temperature for r in requests])
        sampled = any(t > 0 for t in rows.temperatures)
        from transformers import LogitsProcessorList, StoppingCriteriaList

        output = self.model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            max_new_tokens=max(rows.limits),
            do_sample=sampled,
            logits_processor=LogitsProcessorList([_RowTemperatures(rows.temperatures)]) if sampled else None,
            stopping_criteria=StoppingCriteriaList([_RowStops(rows, self.tokenizer)]),
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            top_k=None,
            top_p=None,
            temperature=None,
        )
        return [self._result(output[row, width:].tolist(), len(prompts[row]), requests[row])
                for row in range(len(requests))]

    def _result(self, generated: list[int], prompt_tokens: int, request: ChatRequest) -> ChatResult:
        """Cut one row at its end-of-sequence token, its limit or its first stop string."""
        reason: Literal["stop", "length"] = "length"
        kept: list[int] = []
        for token in generated[: request.max_tokens]:
            kept.append(token)
            if token in self.eos_ids:
                reason = "stop"
                break
        text = self.tokenizer.decode(kept, skip_special_tokens=True)
        cuts = [text.find(stop) for stop in request.stop if stop and stop in text]
        if cuts:
            text, reason = text[: min(cuts)], "stop"
            # Generation ended at the token that completed the stop string: count up to it.
            while len(kept) > 1 and any(
                stop in self.tokenizer.decode(kept[:-1], skip_special_tokens=True) for stop in request.stop if stop
            ):
                kept.pop()
        return ChatResult(text=text, finish_reason=reason, prompt_tokens=prompt_tokens, completion_tokens=len(kept))


def _eos_ids(model, tokenizer) -> list[int]:
    """End-of-turn token ids: the generation config's, else the tokenizer's."""
    value = getattr(model.generation_config, "eos_token_id", None)
    if value is None:
        value = tokenizer.eos_token_id
    ids = value if isinstance(value, list) else [value]
    return [int(i) for i in ids if i is not None]

