"""Refuse to resume a Ray Train run under a config it was not started with.

A training job resumes whenever a run of the same ``run_name`` exists under ``storage_path``.
Resubmitting after editing the model, the labels or the split would silently continue the old
run's checkpoints under the new settings and report a mixture. :func:`check_run_config` writes
the settings that define a run into the run folder on the first submission and, on every later
one, compares them and stops with the keys that differ and how to proceed. Settings that only
say how long or where to run (``train.epochs``, workers, Ray, output and evaluation) may change,
and keys that only one side has (fields added or removed by another rg version) are not compared,
except those in :data:`FORMER_DEFAULTS`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rg.config import Config, ConfigError

RUN_CONFIG_FILE = "rg_run_config.json"
"""Written into ``<storage_path>/<run_name>/`` on a run's first submission."""
RESUMABLE_KEYS = frozenset(
    {"train.epochs", "num_workers", "use_gpu", "resources_per_worker", "max_failures", "keep_checkpoints", "output_dir", "evaluation", "ray"}
)
"""Dotted keys (and their sub-keys) that may differ between submissions of one run."""
FORMER_DEFAULTS: Mapping[str, Any] = {"reader.machine_ids": "shown"}
"""Fields added with a new default that changes training, and the value a run recorded before them was
trained with: a record without the key compares as that value, so such a run does not resume under the
new default (the tuned reader's prompts elide machine ids since ``reader.machine_ids``)."""


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: value}


def _resumable(key: str, allowed: Iterable[str]) -> bool:
    return any(key == a or key.startswith(f"{a}.") for a in allowed)


def defining_settings(config: Config, allowed: Iterable[str] = RESUMABLE_KEYS) -> dict[str, Any]:
    """The config as flat dotted keys, without the keys that may change on resume."""
    allowed = tuple(allowed)
    return {k: v for k, v in _flatten(config.model_dump(mode="json")).items() if not _resumable(k, allowed)}


def check_run_config(storage_path: str, run_name: str, config: Config) -> bool:
    """Record the run's defining settings, or check them against the recorded ones.

    Args:
        storage_path: The job's resolved ``storage_path``; remote URIs (``s3://``...) are not
            checked (the record lives beside the checkpoints only on a file system).
        run_name: The job's ``run_name``.
        config: The job's validated config.

    Returns:
        True when a record existed and matched (a resubmission), False when it was written now
        or the storage is remote.

    Raises:
        ValueError: naming every differing key with both values and the two ways forward.
    """
    if "://" in storage_path:
        return False
    folder = Path(storage_path) / run_name
    record = folder / RUN_CONFIG_FILE
    current = defining_settings(config)
    if not record.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(current, indent=1, sort_keys=True))
        return False
    recorded = json.loads(record.read_text())
    before = {**{k: v for k, v in FORMER_DEFAULTS.items() if k in current}, **recorded}
    # keys on one side only come from another rg version's config fields, not from the user
    changed = sorted(k for k in set(before) & set(current) if before[k] != current[k])
    if changed:
        lines = "; ".join(f"{k}: {before.get(k)!r} -> {current.get(k)!r}" for k in changed[:8])
        more = f" (and {len(changed) - 8} more)" if len(changed) > 8 else ""
        raise ConfigError(
            f"run {run_name!r} under {storage_path} was started with other settings, so it cannot resume: "
            f"{lines}{more}. Fix: set a new `run_name` to start a separate run, or delete {folder} to start this "
            f"one over (only {sorted(RESUMABLE_KEYS)} may change between submissions)"
        )
    return True
