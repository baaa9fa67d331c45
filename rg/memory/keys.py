"""The memory's encryption key: from an environment variable or a key file, never the repository.

A key is 32 random bytes (AES-256-GCM), written as 64 hex characters or URL-safe base64. Make one
with ``python -m rg.memory.keys`` and export it (``RG_MEMORY_KEY``) or write it to a file outside
the repository named by ``memory.key.file``.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import sys
from pathlib import Path
from typing import Optional

from pydantic import Field, model_validator

from rg.config import Config

KEY_BYTES = 32


class MemoryKeyError(RuntimeError):
    """The key is missing, malformed or not the one the file was sealed with (the message says the fix)."""


class KeyConfig(Config):
    """Where the key comes from (exactly one source is read: the file when set, else the variable)."""

    env: Optional[str] = Field(
        "RG_MEMORY_KEY", description="Environment variable holding the key (64 hex characters or base64)."
    )
    file: Optional[str] = Field(
        None, description="File holding the key (raw 32 bytes, hex or base64); keep it outside the repository."
    )

    @model_validator(mode="after")
    def _one_source(self) -> "KeyConfig":
        if self.env is None and self.file is None:
            raise ValueError("memory.key has neither env nor file. Fix: set memory.key.env (e.g. RG_MEMORY_KEY) "
                             "or memory.key.file")
        return self


def parse_key(raw: bytes, source: str) -> bytes:
    """32 key bytes from raw bytes, hex text or base64 text; :class:`MemoryKeyError` naming ``source``."""
    if len(raw) == KEY_BYTES:
        return raw
    text = raw.strip()
    try:
        if len(text) == 2 * KEY_BYTES:
            return binascii.unhexlify(text)
        decoded = base64.urlsafe_b64decode(text + b"=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as err:
        raise MemoryKeyError(f"{source} is not a key ({err}). Fix: write 64 hex characters, e.g. the output of "
                             "`python -m rg.memory.keys`") from None
    if len(decoded) != KEY_BYTES:
        raise MemoryKeyError(f"{source} holds {len(decoded)} bytes, not {KEY_BYTES}. Fix: use the output of "
                             "`python -m rg.memory.keys`")
    return decoded


def load_key(config: KeyConfig) -> bytes:
    """The key ``config`` names.

    Raises:
        MemoryKeyError: when the file or variable is missing or malformed, naming the setting.
    """
    if config.file is not None:
        path = Path(config.file)
        if not path.is_file():
            raise MemoryKeyError(f"memory.key.file {path} does not exist. Fix: write a key there "
                                 "(`python -m rg.memory.keys > FILE`) or set memory.key.file: null to use memory.key.env")
        return parse_key(path.read_bytes(), f"memory.key.file {path}")
    assert config.env is not None  # KeyConfig requires a source
    value = os.environ.get(config.env)
    if not value:
        raise MemoryKeyError(f"memory.key.env: the environment variable {config.env} is not set. Fix: "
                             f"export {config.env}=$(python -m rg.memory.keys) or set memory.key.file")
    return parse_key(value.encode(), f"environment variable {config.env}")


def new_key_hex() -> str:
    """A fresh random key as 64 hex characters."""
    return secrets.token_hex(KEY_BYTES)


if __name__ == "__main__":
    sys.stdout.write(new_key_hex() + "\n")
