"""The retriever registry: kind name → (config class, model class), fixed at import.

A model class is imported when a spec first asks for it, so that listing or validating kinds (every QA
actor with the MLP) does not import PyTorch Geometric, which only PNA needs (~3 s per process).

Like PEFT's method registry: callers name a kind and pass its config, and
:func:`build_retriever` returns the model. :func:`load_retriever` picks the class from a
checkpoint's recorded kind::

    model = build_retriever("mlp", {"hidden": 128})
    model.save("ckpt/", CheckpointMeta(label_source="weak"))
    loaded = load_retriever("ckpt/")          # LoadedRetriever(model=MLPRetriever, meta=...)
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from rg.config import validate_config
from rg.retrievers.base import CheckpointMeta, Retriever, RetrieverConfig, read_meta
from rg.retrievers.graphs import QuestionGraph
from rg.retrievers.mlp.config import MLPConfig
from rg.retrievers.pna.config import PNAConfig


@dataclass(frozen=True)
class RetrieverSpec:
    """One registered retriever kind.

    Attributes:
        config_class: Its config.
        model_path: ``module:Class`` of its model, imported on first use (:attr:`model_class`).
    """

    config_class: type[RetrieverConfig]
    model_path: str

    @property
    def model_class(self) -> type[Retriever]:
        """The model class (its module is imported here the first time)."""
        module, _, name = self.model_path.partition(":")
        return getattr(importlib.import_module(module), name)


REGISTRY: Mapping[str, RetrieverSpec] = MappingProxyType(
    {
        "mlp": RetrieverSpec(MLPConfig, "rg.retrievers.mlp:MLPRetriever"),
        "pna": RetrieverSpec(PNAConfig, "rg.retrievers.pna.model:PNARetriever"),
    }
)
"""Kind → spec; read-only."""


class UnknownRetrieverError(KeyError):
    """A retriever kind that is not registered; the message lists the known kinds."""

    def __str__(self) -> str:
        return str(self.args[0])


def retriever_spec(kind: str) -> RetrieverSpec:
    """The spec registered under ``kind``.

    Raises:
        UnknownRetrieverError: naming the known kinds.
    """
    if kind not in REGISTRY:
        raise UnknownRetrieverError(
            f"unknown retriever kind {kind!r}. Fix: use one of {sorted(REGISTRY)}"
        )
    return REGISTRY[kind]


def retriever_config(kind: str, config: RetrieverConfig | Mapping[str, Any] | None = None) -> RetrieverConfig:
    """A validated config of ``kind`` from a config object, a mapping or None (defaults).

    Raises:
        UnknownRetrieverError: for an unknown kind.
        TypeError: if ``config`` is a config of another kind.
        rg.config.ConfigError: if the mapping does not validate.
    """
    spec = retriever_spec(kind)
    if config is None:
        return spec.config_class()
    if isinstance(config, RetrieverConfig):
        if not isinstance(config, spec.config_class):
            raise TypeError(
                f"retriever kind {kind!r} needs a {spec.config_class.__name__}, got {type(config).__name__}"
            )
        return config
    data = {"kind": kind, **dict(config)}
    return validate_config(data, spec.config_class, source=f"retriever {kind!r}")


def build_retriever(
    kind: str,
    config: RetrieverConfig | Mapping[str, Any] | None = None,
    train_graphs: Iterable[QuestionGraph] | None = None,
) -> Retriever:
    """Build a fresh retriever of ``kind``.

    Args:
        kind: A registered kind (``"mlp"``, ``"pna"``).
        config: Its config, a mapping of config keys, or None for the defaults.
        train_graphs: Training graphs for statistics the model needs (PNA's ``deg``), applied
            through ``model_class.prepare_config`` (iterated at most once, so a stream of them will do); None
            uses the config as given.

    Raises:
        UnknownRetrieverError: for an unknown kind (the message lists the known kinds).
    """
    spec = retriever_spec(kind)
    resolved = retriever_config(kind, config)
    if train_graphs is not None:
        resolved = spec.model_class.prepare_config(resolved, train_graphs)
    return spec.model_class(resolved)


@dataclass(frozen=True)
class LoadedRetriever:
    """A retriever read back from a checkpoint folder.

    Attributes:
        model: The model with its weights, in eval mode.
        meta: What it was trained from (kind, label source, encoder id, prompt ids, extras).
    """

    model: Retriever
    meta: CheckpointMeta


def load_retriever(directory: str | Path, map_location: str | torch.device = "cpu") -> LoadedRetriever:
    """Load any registered retriever from a folder written by :meth:`Retriever.save`.

    Raises:
        UnknownRetrieverError: if the recorded kind is not registered.
        FileNotFoundError: if the folder is not a checkpoint.
    """
    meta = read_meta(directory)
    spec = retriever_spec(str(meta.kind))
    model = spec.model_class.load(directory, map_location=map_location)
    model.eval()
    return LoadedRetriever(model=model, meta=meta)
