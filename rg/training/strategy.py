"""How the LoRA trainers (planner, reader) run on Ray Train: DDP, or a DeepSpeed engine on GPU nodes.

``train.strategy: ddp`` (the default) wraps the model with ``ray.train.torch.prepare_model``
(DDP on gloo or NCCL) and steps a torch AdamW. ``train.strategy: deepspeed`` follows Ray Train's
DeepSpeed guide (the worker loop calls ``deepspeed.initialize`` itself, no ``prepare_model``):
the engine config is read from a JSON file (``configs/deepspeed_zero2.json`` by default: ZeRO
stage 2) and its ``"auto"`` entries are filled from the typed config, so batch size, gradient
accumulation, learning rate, weight decay, clipping and precision are set in one place::

    engine_cfg = engine_config(json.load(f), source="zero2.json", workers=4, micro_batch=8,
                               accumulation=2, lr=2e-3, weight_decay=0.0, grad_clip=1.0, precision="bf16")
    # train_batch_size 64 = 4 workers × 8 × 2; optimizer AdamW(lr=2e-3); bf16 on, fp16 off

A number in the JSON that contradicts the typed config is refused with one line naming both,
rather than silently winning. DeepSpeed needs CUDA devices and the ``deepspeed`` package (the
``deepspeed`` extra, for GPU nodes; not part of the default install): both are checked when the
job config is loaded (:func:`check_strategy`).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from rg.config import Config
from rg.run.paths import resolve_data_path

DEFAULT_DEEPSPEED_CONFIG = "configs/deepspeed_zero2.json"
INSTALL_DEEPSPEED = "pip install -e '.[deepspeed]'"
AUTO = "auto"

Strategy = Literal["ddp", "deepspeed"]


class DeepSpeedSettings(Config):
    """The DeepSpeed engine of ``train.strategy: deepspeed`` (ignored with ``ddp``)."""

    config: str = Field(
        DEFAULT_DEEPSPEED_CONFIG,
        description="DeepSpeed JSON (ZeRO stage, buckets, ...); its \"auto\" entries are filled from the typed "
        "config; a relative path is read from the working directory, else from the rg checkout.",
    )
    gradient_accumulation_steps: int = Field(
        1, ge=1, description="Micro-batches (train.batch_size each) per optimiser step; the engine accumulates."
    )
    precision: Literal["bf16", "fp16", "fp32"] = Field(
        "bf16", description="Engine precision; fills the JSON's bf16/fp16 `enabled: auto` (bf16 needs Ampere or later)."
    )


def deepspeed_installed() -> bool:
    """Whether the ``deepspeed`` package can be imported (without importing it)."""
    return importlib.util.find_spec("deepspeed") is not None


def config_path(path: str) -> Path:
    """The DeepSpeed JSON file: as given (``@shared/`` allowed), else relative to the rg checkout.

    Raises:
        FileNotFoundError: naming the key and the fix when neither exists.
    """
    given = resolve_data_path(path)
    if given.is_file():
        return given
    checkout = Path(__file__).resolve().parents[2] / path
    if not given.is_absolute() and checkout.is_file():
        return checkout
    raise FileNotFoundError(f"`train.deepspeed.config` file {path!r} does not exist. Fix: point it at a DeepSpeed "
                            f"JSON such as {DEFAULT_DEEPSPEED_CONFIG}")


def _fill(config: dict[str, Any], key: str, value: float, field: str, source: str) -> None:
    """Set ``config[key]`` to ``value`` when absent or "auto"; refuse a different number."""
    got = config.get(key, AUTO)
    if got == AUTO:
        config[key] = value
        return
    if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isclose(float(got), float(value),
                                                                                      rel_tol=1e-9, abs_tol=0.0):
        raise ValueError(f"{source}: `{key}` is {got!r} but {field} gives {value!r}. Fix: set `{key}` to \"auto\" in "
                         f"the JSON or change {field}")


def engine_config(
    base: Mapping[str, Any],
    *,
    source: str,
    workers: int,
    micro_batch: int,
    accumulation: int,
    lr: float,
    weight_decay: float,
    grad_clip: float | None,
    precision: str,
) -> dict[str, Any]:
    """The DeepSpeed engine config: ``base`` with its "auto" entries filled from the typed config.

    Args:
        base: The JSON file's mapping (keys starting with ``_`` are comments and are dropped).
        source: Where ``base`` came from (named in errors).
        workers: Ray Train workers (data-parallel ranks).
        micro_batch: Examples per worker and forward pass (``train.batch_size``).
        accumulation: Micro-batches per optimiser step.
        lr, weight_decay: AdamW's (the optimizer section is added when the JSON has none).
        grad_clip: Gradient-norm clip; None is no clipping (DeepSpeed's 0).
        precision: 'bf16', 'fp16' or 'fp32'.

    Returns:
        A new dict for ``deepspeed.initialize(config=...)``: ``train_batch_size`` =
        ``workers × micro_batch × accumulation``.

    Raises:
        ValueError: one line naming the JSON key and the typed field it contradicts, or a
            ``scheduler`` section (the trainers set the learning rate per epoch themselves).
    """
    config = copy.deepcopy({k: v for k, v in base.items() if not str(k).startswith("_")})
    _fill(config, "train_micro_batch_size_per_gpu", micro_batch, "train.batch_size", source)
    _fill(config, "gradient_accumulation_steps", accumulation, "train.deepspeed.gradient_accumulation_steps", source)
    _fill(config, "train_batch_size", workers * micro_batch * accumulation,
          "num_workers × train.batch_size × train.deepspeed.gradient_accumulation_steps", source)
    _fill(config, "gradient_clipping", 0.0 if grad_clip is None else grad_clip, "train.grad_clip", source)
    for mode in ("bf16", "fp16"):
        section = dict(config.get(mode) or {})
        wanted = precision == mode
        enabled = section.get("enabled", AUTO)
        if enabled == AUTO:
            section["enabled"] = wanted
        elif bool(enabled) != wanted:
            raise ValueError(f"{source}: `{mode}.enabled` is {enabled!r} but train.deepspeed.precision is "
                             f"{precision!r}. Fix: set `{mode}.enabled` to \"auto\" or change train.deepspeed.precision")
        config[mode] = section
    if "scheduler" in config:
        raise ValueError(f"{source}: has a `scheduler` section, but the trainers set the learning rate per epoch "
                         "(train.lr_schedule). Fix: remove `scheduler` from the JSON")
    optimizer = copy.deepcopy(config.get("optimizer") or {"type": "AdamW", "params": {}})
    params = dict(optimizer.get("params") or {})
    _fill(params, "lr", lr, "train.lr", f"{source} optimizer.params")
    _fill(params, "weight_decay", weight_decay, "the trainer's AdamW weight decay", f"{source} optimizer.params")
    optimizer["params"] = params
    config["optimizer"] = optimizer
    return config


def load_engine_config(settings: DeepSpeedSettings, *, workers: int, micro_batch: int, lr: float,
                       weight_decay: float, grad_clip: float | None) -> dict[str, Any]:
    """:func:`engine_config` of the JSON file ``settings.config``."""
    path = config_path(settings.config)
    try:
        base = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"`train.deepspeed.config` file {path} is not valid JSON: {err}") from None
    if not isinstance(base, dict):
        raise ValueError(f"`train.deepspeed.config` file {path} must hold a JSON object")
    return engine_config(base, source=str(path), workers=workers, micro_batch=micro_batch,
                         accumulation=settings.gradient_accumulation_steps, lr=lr, weight_decay=weight_decay,
                         grad_clip=grad_clip, precision=settings.precision)


def check_strategy(strategy: Strategy, settings: DeepSpeedSettings, *, use_gpu: bool, workers: int,
                   micro_batch: int, lr: float, weight_decay: float, grad_clip: float | None) -> None:
    """Refuse ``strategy: deepspeed`` where it cannot run, at config load (one line naming the field and the fix).

    Raises:
        ValueError: without ``use_gpu``, without the ``deepspeed`` package, or when the JSON
            contradicts the typed config.
    """
    if strategy != "deepspeed":
        return
    if not use_gpu:
        raise ValueError("train.strategy: deepspeed needs `use_gpu: true` (the DeepSpeed engine runs on CUDA "
                         "devices). Fix: set use_gpu: true on a GPU cluster, or train.strategy: ddp")
    if not deepspeed_installed():
        raise ValueError(f"train.strategy: deepspeed needs the deepspeed package, which is not installed. Fix: "
                         f"{INSTALL_DEEPSPEED} on the GPU nodes, or set train.strategy: ddp")
    load_engine_config(settings, workers=workers, micro_batch=micro_batch, lr=lr, weight_decay=weight_decay,
                       grad_clip=grad_clip)


def deepspeed_engine(module, trainable: Sequence, engine_cfg: dict[str, Any]):
    """``deepspeed.initialize`` over ``module`` with the optimizer on ``trainable`` only; returns the engine.

    Called inside a Ray Train worker, whose process group DeepSpeed reuses; the engine moves
    ``module`` to the worker's GPU and to the configured precision. ``engine(**batch)`` is the
    module's forward, ``engine.backward(loss)`` / ``engine.step()`` replace ``loss.backward()`` /
    ``optimizer.step()`` (accumulation and clipping happen inside), ``engine.module`` is ``module``.
    """
    import deepspeed

    engine, _optimizer, _loader, _scheduler = deepspeed.initialize(
        model=module, model_parameters=list(trainable), config=engine_cfg
    )
    return engine
