"""Where the real datasets live: ``$RG_SHARED_DATA`` or ``../shared/data`` beside the project."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "RG_SHARED_DATA"


def shared_data_dir(project_root: str | Path | None = None) -> Path | None:
    """Return the shared data folder, or None when it is absent.

    Args:
        project_root: Folder holding ``pyproject.toml``; defaults to the checkout containing rg.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env).expanduser()
        return path if path.is_dir() else None
    root = Path(project_root) if project_root else Path(__file__).resolve().parents[2]
    path = root.parent / "shared" / "data"
    return path if path.is_dir() else None


def require_shared_data(relative: str = "") -> Path:
    """Return ``shared_data_dir()/relative`` or raise FileNotFoundError saying how to fix it."""
    base = shared_data_dir()
    if base is None:
        raise FileNotFoundError(
            f"shared data folder not found; set ${ENV_VAR} to the folder holding metaqa/ and "
            "webqsp-evidence/ (default: ../shared/data beside the project)"
        )
    path = base / relative
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist inside the shared data folder {base}")
    return path


SHARED_PREFIX = "@shared/"


def resolve_data_path(path: str | Path) -> Path:
    """Resolve a config path; ``@shared/x`` means ``x`` inside the shared data folder."""
    text = str(path)
    if text.startswith(SHARED_PREFIX):
        return require_shared_data(text[len(SHARED_PREFIX) :])
    return Path(text).expanduser()


def require_input(path: str | Path, key: str = "input") -> Path:
    """Resolve the config path ``path`` of key ``key``; raise a one-line FileNotFoundError if it is absent."""
    resolved = resolve_data_path(path)
    if not resolved.exists():
        raise FileNotFoundError(
            f"`{key}` path {resolved} (from {str(path)!r}) does not exist. Fix: set `{key}` to an existing file or "
            "folder (e.g. the build job's output_dir/<source>)"
        )
    return resolved
