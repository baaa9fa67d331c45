"""Cluster-safe paths: relative paths of a submitted Ray job resolve against a storage root.

``ray job submit --working-dir .`` runs the job inside Ray's per-package copy of the working
folder, and the next submission after any edit gets a new copy: outputs written to relative
paths would land in a temporary folder and be lost to the next job (a training run would start
again from epoch 0). So when a job runs under ``ray job submit`` (detected from the
``RAY_JOB_CONFIG_JSON_ENV_VAR`` the job supervisor sets), every relative input, output and
storage path of its config is resolved against the storage root: ``$RG_STORAGE_ROOT`` or the
config's top-level ``storage_root:`` key, an absolute path on storage every node shares or a
pyarrow-filesystem URI (``s3://``, ``gs://``): Ray Train writes ``storage_path`` there itself,
and the jobs stage the other URI paths in local folders (:mod:`rg.run.remote`); a relative
``cache_dir`` (a local cache) then resolves under the staging root. Without a root, a
submitted job with a relative path exits before any work, naming the path and the fix.
``@shared/`` data paths need ``$RG_SHARED_DATA`` in a submitted job.
"""

from __future__ import annotations

import json
import os
from typing import Any, TypeVar

from pydantic import BaseModel

from rg.run.paths import ENV_VAR as SHARED_ENV, SHARED_PREFIX

ROOT_ENV = "RG_STORAGE_ROOT"
ROOT_KEY = "storage_root"
JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
PATH_KEYS = frozenset({"output_dir", "input", "path", "storage_path", "file", "reference_labels", "checkpoint",
                       "questions_file", "cache_dir", "planner", "schema_dir"})
"""Config keys that hold file or folder paths (anywhere in a config's tree)."""
LOCAL_KEYS = frozenset({"cache_dir"})
"""Keys whose values are local caches: with a URI root they resolve under :func:`staging_root`."""
STAGING_ENV = "RG_STAGING_DIR"

M = TypeVar("M", bound=BaseModel)


class StorageRootError(ValueError):
    """A submitted job has a relative path but no usable storage root; the message names the fix."""


def submitted_job() -> str | None:
    """The submission id when this process is the entrypoint of ``ray job submit``, else None."""
    raw = os.environ.get(JOB_ENV)
    if not raw:
        return None
    try:
        metadata = json.loads(raw).get("metadata") or {}
    except ValueError:
        return None
    return metadata.get("job_submission_id") or None


def _is_absolute(value: str) -> bool:
    return os.path.isabs(os.path.expanduser(value)) or "://" in value


def _resolve(value: str, key: str, root: str | None, strict_shared: bool = True) -> str:
    if value.startswith(SHARED_PREFIX):
        if strict_shared and not os.environ.get(SHARED_ENV):
            raise StorageRootError(
                f"`{key}: {value}` names shared data, but a submitted job does not see ../shared/data. "
                f"Fix: pass --runtime-env-json '{{\"env_vars\": {{\"{SHARED_ENV}\": \"/path/to/data\"}}}}'"
            )
        return value
    if _is_absolute(value):
        return value
    if root is None:
        raise StorageRootError(
            f"`{key}: {value}` is relative, and in a submitted Ray job it would land in Ray's temporary copy of "
            f"the working dir (lost on the next submit). Fix: set {ROOT_ENV} (--runtime-env-json "
            f"'{{\"env_vars\": {{\"{ROOT_ENV}\": \"/shared/rg\"}}}}') or `{ROOT_KEY}:` in the config, or give an "
            "absolute path"
        )
    if "://" in root and key in LOCAL_KEYS:  # a local cache: beside the staging folders
        return os.path.join(staging_root(), "cache", value)
    return f"{root.rstrip('/')}/{value}" if "://" in root else os.path.join(root, value)


def _walk(node: Any, key: str, root: str | None, strict_shared: bool = True) -> Any:
    if isinstance(node, dict):
        return {k: _walk(v, k, root, strict_shared) for k, v in node.items()}
    if key in PATH_KEYS and isinstance(node, str):
        return _resolve(node, key, root, strict_shared)
    if key in PATH_KEYS and isinstance(node, list) and all(isinstance(x, str) for x in node):
        return [_resolve(x, key, root, strict_shared) for x in node]
    if isinstance(node, list):
        return [_walk(x, key, root, strict_shared) for x in node]
    return node


def resolve_paths(cfg: M, root: str | None) -> M:
    """``cfg`` with every relative path resolved against ``root`` (see the module docstring).

    Raises:
        StorageRootError: for a relative path without a root, a URI root for a file-I/O key, or
            ``@shared/`` data without ``$RG_SHARED_DATA``.
    """
    data = _walk(cfg.model_dump(), "", root)
    return type(cfg).model_validate(data)


def resolve_mapping(data: dict[str, Any], root: str | None) -> dict[str, Any]:
    """A raw config mapping (e.g. a sweep's base config) with every relative path resolved against ``root``.

    ``@shared/`` paths need ``$RG_SHARED_DATA`` only inside a submitted job; elsewhere they resolve
    beside the project as usual.

    Raises:
        StorageRootError: as :func:`resolve_paths`.
    """
    return _walk(data, "", root, strict_shared=submitted_job() is not None)


def paths_root(config_value: str | None) -> str | None:
    """Where a driver's relative config paths resolve before its work moves to other folders.

    Under ``ray job submit`` the storage root (:func:`storage_root`; None without one, so resolving
    a relative path raises, naming the fix); otherwise the current folder, which Ray Tune trials
    leave for their own trial folders.
    """
    return storage_root(config_value) if submitted_job() else os.getcwd()


def staging_root() -> str:
    """The local folder under which URI paths are staged: ``$RG_STAGING_DIR`` or ``~/.cache/rg/staging``."""
    return os.path.abspath(os.path.expanduser(os.environ.get(STAGING_ENV) or "~/.cache/rg/staging"))


def storage_root(config_value: str | None) -> str | None:
    """The storage root: ``$RG_STORAGE_ROOT``, else the config's ``storage_root:``, else None."""
    root = os.environ.get(ROOT_ENV) or config_value
    if root and not _is_absolute(root):
        raise StorageRootError(f"storage root {root!r} must be an absolute path or a URI such as s3://bucket/rg")
    return root or None
