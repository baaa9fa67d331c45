"""Typed configs: YAML → validated objects, checked once at the entry point.

Every component has one config class derived from :class:`Config`. Unknown keys, wrong types
and bad values fail at load time with a message that names the key and says how to fix it::

    cfg = load_config("configs/build_metaqa.yaml", BuildSubgraphsConfig)

Each YAML file in ``configs/`` opens with a comment holding the exact command that runs it and
declares ``kind:`` so that :func:`load_any_config` can validate it without knowing the caller.
"""

from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Any, Sequence, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

C = TypeVar("C", bound="Config")


class ConfigError(ValueError):
    """A config failed validation; the message names each bad key and its fix."""


def _numeric_not_bool(annotation: Any) -> bool:
    """Whether a field type takes numbers but not booleans (``int``, ``float | None``, ...)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return _numeric_not_bool(args[0])
    if args and typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_numeric_not_bool(a) for a in args) and bool not in args
    return annotation in (int, float)


class Config(BaseModel):
    """Base of all rg configs: frozen, strict about unknown keys, documented fields.

    Numeric fields refuse booleans (YAML ``true`` is not the integer 1).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name) if isinstance(name, str) else None
                if isinstance(value, bool) and field is not None and _numeric_not_bool(field.annotation):
                    raise ValueError(f"`{name}` expects a number, got the boolean {str(value).lower()} "
                                     f"(true is not 1). Fix: set `{name}` to a number")
        return data


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Valid keys at ``loc`` (a pydantic error location) inside ``model``, best effort."""
    current: Any = model
    for part in loc[:-1]:
        fields = getattr(current, "model_fields", None)
        if fields is None or part not in fields:
            return []
        annotation = fields[part].annotation
        current = next(
            (a for a in getattr(annotation, "__args__", (annotation,)) if hasattr(a, "model_fields")),
            annotation,
        )
    return list(getattr(current, "model_fields", {}).keys())


def format_validation_error(err: ValidationError, model: type[BaseModel], source: str) -> str:
    """Turn a pydantic error into lines of ``source: key: problem. Fix: ...``."""
    lines = [f"invalid config {source} for {model.__name__}:"]
    for e in err.errors():
        loc = tuple(e["loc"])
        key = ".".join(str(p) for p in loc) or "<root>"
        name = str(loc[-1]) if loc else "the keys named in the message"
        kind = e["type"]
        if kind == "extra_forbidden":
            valid = _field_names(model, loc)
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"valid keys here: {sorted(valid)}"
            lines.append(f"  {key}: unknown key. Fix: remove it or rename it; {hint}")
        elif kind == "missing":
            lines.append(f"  {key}: required key is missing. Fix: add `{name}:` with a value")
        elif not loc:
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"  {msg}" if "Fix:" in msg else f"  {msg}. Fix: change the keys it names")
        else:
            got = e.get("input")
            lines.append(f"  {key}: {e['msg']} (got {got!r}). Fix: set `{name}` to a valid value")
    return "\n".join(lines)


def validate_config(data: dict[str, Any], model: type[C], source: str = "<dict>") -> C:
    """Validate a mapping against ``model``; raise :class:`ConfigError` with readable lines."""
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {source}: expected a mapping of keys, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, model, source)) from None


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; raise :class:`ConfigError` on a missing file or bad syntax."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory. Fix: pass a YAML file, e.g. {path}/<name>.yaml")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist. Fix: pass an existing YAML path")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return data


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``key.sub=value`` strings (values parsed as YAML) to a nested mapping, in place.

    Raises:
        ConfigError: for an override without ``=`` or one that descends into a non-mapping.
    """
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not key=value. Fix: write e.g. subgraph.max_triples=2000")
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section. Fix: check the key path")
            node = child
        node[parts[-1]] = yaml.safe_load(raw)
    return data


def load_config(path: str | Path, model: type[C], overrides: Sequence[str] = ()) -> C:
    """Load ``path`` as ``model``; the optional top-level ``kind`` key is checked and dropped.

    Args:
        path: YAML file.
        model: The config class expected.
        overrides: ``key.sub=value`` strings applied after reading (``--set`` flags).
    """
    data = apply_overrides(read_yaml(path), overrides)
    kind = data.pop("kind", None)
    data.pop("storage_root", None)  # read by rg.cli for submitted jobs (rg.run.storage)
    expected = getattr(model, "KIND", None)
    if kind is not None and expected is not None and kind != expected:
        raise ConfigError(
            f"config file {path} declares kind {kind!r} but this entry point expects {expected!r}. "
            f"Fix: pass a config with `kind: {expected}`"
        )
    return validate_config(data, model, source=str(path))


CONFIG_KINDS: dict[str, str] = {
    "build_subgraphs": "rg.jobs.build_subgraphs:BuildSubgraphsConfig",
    "synthetic": "rg.data.synthetic:SyntheticConfig",
    "refine": "rg.jobs.refine:RefineConfig",
    "evaluate": "rg.jobs.evaluate:EvaluateConfig",
    "evaluate_qa": "rg.jobs.evaluate_qa:QAEvaluateConfig",
    "pipeline": "rg.pipeline:PipelineConfig",
    "train": "rg.jobs.train_retriever:TrainJobConfig",
    "train_planner": "rg.jobs.train_planner:PlannerTrainConfig",
    "train_reader": "rg.jobs.train_reader:ReaderTrainConfig",
    "sweep_qa": "rg.jobs.sweep_qa:SweepQAConfig",
    "sweep_train": "rg.jobs.sweep_train:SweepTrainConfig",
    "privacy_report": "rg.jobs.privacy_report:PrivacyReportConfig",
    "load_kg": "rg.jobs.load_kg:LoadKGConfig",
}
"""YAML ``kind`` → ``module:Class`` of its config (imported on use, so rg.config stays light)."""


def config_class(kind: str) -> type[Config]:
    """The config class registered for ``kind``; raises ConfigError listing the known kinds."""
    import importlib

    if kind not in CONFIG_KINDS:
        raise ConfigError(f"unknown config kind {kind!r}. Fix: use one of {sorted(CONFIG_KINDS)}")
    module, name = CONFIG_KINDS[kind].split(":")
    return getattr(importlib.import_module(module), name)


def load_any_config(path: str | Path) -> Config:
    """Load a YAML file by its declared ``kind`` (used to validate every file in configs/)."""
    data = read_yaml(path)
    kind = data.get("kind")
    if kind is None:
        raise ConfigError(f"config file {path} has no `kind:`. Fix: add e.g. `kind: build_subgraphs`")
    return load_config(path, config_class(kind))
