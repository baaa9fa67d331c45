"""The name index of a KG: normalised names for exact matching, FAISS over name embeddings for dense alignment.

PrivGemo (topic entity recognition + DRM alignment) grounds mentions in the KG by exact name
and, failing that, by embedding similarity of the mention and entity names. The index holds both
sides for one KG: every (entity id, name, kind) entry, its key under
:func:`rg.privacy.normalise.normalise` (case, accents, full-width, zero-width, punctuation and
whitespace folded), and an inner-product FAISS index with one unit vector per distinct key.
It is built once per KG and saved to a folder::

    entries.json   {"ids": [...], "names": [...], "kinds": [...], "keys": [...]}
    names.faiss    faiss.IndexFlatIP, row i = the embedding of dense_keys[i]
    meta.json      encoder id, dimension, counts, the KG key, build seconds

:func:`load_or_build_index` reloads it when the KG key and the encoder id match and builds it
again otherwise.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from rg.data.integrity import write_json_atomic
from rg.linking.names import NamedEntity
from rg.privacy.normalise import normalise
from rg.text.encoder import TextEncoder

ENTRIES_FILE = "entries.json"
FAISS_FILE = "names.faiss"
META_FILE = "meta.json"
FORMAT = 1


@dataclass
class NameIndex:
    """Names of one KG, keyed for exact and dense matching.

    Attributes:
        entries: Every (id, name, kind), sorted.
        keys: The normalised key of each entry.
        dense_keys: The distinct keys, in the order of the FAISS rows.
        faiss_index: Inner-product index over the unit embeddings of ``dense_keys``; None for an
            exact-only index (built without an encoder, for ``dense: off``).
        encoder_id: :attr:`TextEncoder.model_id` of the encoder that embedded them (None: exact-only).
        kg_key: What the caller said identifies the KG (checked on reload).
        build_seconds: Time the build took (0 when unknown).
    """

    entries: list[NamedEntity]
    keys: list[str]
    dense_keys: list[str]
    faiss_index: object | None
    encoder_id: str | None
    kg_key: str
    build_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.by_key: dict[str, list[int]] = {}
        for i, key in enumerate(self.keys):
            self.by_key.setdefault(key, []).append(i)

    def __len__(self) -> int:
        return len(self.entries)

    @classmethod
    def build(cls, names: Sequence[NamedEntity], encoder: TextEncoder | None, kg_key: str) -> "NameIndex":
        """Normalise and embed ``names`` (entries with an empty key are left out).

        Args:
            names: From :func:`rg.linking.names.store_names`.
            encoder: Embeds the distinct keys (its cache makes a rebuild cheap); None builds an
                exact-only index without FAISS.
            kg_key: Identifies the KG (e.g. the KB path with its size and modification time).
        """
        import faiss

        start = time.perf_counter()
        keyed = [(n, normalise(n.name)) for n in names]
        keyed = [(n, k) for n, k in keyed if k]
        entries, keys = [n for n, _ in keyed], [k for _, k in keyed]
        dense_keys = sorted(set(keys))
        if encoder is None:
            return cls(entries, keys, dense_keys, None, None, kg_key, time.perf_counter() - start)
        index = faiss.IndexFlatIP(encoder.dim)
        if dense_keys:
            index.add(np.ascontiguousarray(encoder.encode(dense_keys), dtype=np.float32))  # (K, D)
        return cls(entries, keys, dense_keys, index, encoder.model_id, kg_key, time.perf_counter() - start)

    def add(self, names: Sequence[NamedEntity], encoder: TextEncoder | None = None) -> int:
        """Learn more names in place (entities a KG edit added); returns the entries added.

        New keys are embedded with ``encoder`` and appended to the FAISS index (required when the
        index is dense); the saved files are left as they were (a restart replays the edits again).

        Raises:
            ValueError: for a dense index without ``encoder``, or with another encoder than built it.
        """
        have = set(zip((e.entity_id for e in self.entries), (e.name for e in self.entries)))
        fresh = [(n, normalise(n.name)) for n in names if (n.entity_id, n.name) not in have]
        fresh = [(n, k) for n, k in fresh if k]
        if not fresh:
            return 0
        new_keys = sorted({k for _, k in fresh} - set(self.by_key))
        if self.faiss_index is not None and new_keys:
            if encoder is None or encoder.model_id != self.encoder_id:
                raise ValueError(f"the name index is dense ({self.encoder_id}); adding names needs that encoder")
            self.faiss_index.add(np.ascontiguousarray(encoder.encode(new_keys), dtype=np.float32))  # (K, D)
        self.dense_keys.extend(new_keys)
        for entry, key in fresh:
            self.by_key.setdefault(key, []).append(len(self.entries))
            self.entries.append(entry)
            self.keys.append(key)
        return len(fresh)

    def save(self, folder: str | Path) -> int:
        """Write the three files; return their total size in bytes."""
        import faiss

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        data = {"ids": [e.entity_id for e in self.entries], "names": [e.name for e in self.entries],
                "kinds": [e.kind for e in self.entries], "keys": self.keys}
        write_json_atomic(data, folder / ENTRIES_FILE)
        (folder / FAISS_FILE).unlink(missing_ok=True)
        if self.faiss_index is not None:
            partial = folder / (FAISS_FILE + ".part")
            faiss.write_index(self.faiss_index, str(partial))
            partial.replace(folder / FAISS_FILE)
        dim = self.faiss_index.d if self.faiss_index is not None else None
        meta = {"format": FORMAT, "encoder": self.encoder_id, "dim": dim, "entries": len(self.entries),
                "dense_keys": len(self.dense_keys), "kg_key": self.kg_key, "build_seconds": self.build_seconds}
        write_json_atomic(meta, folder / META_FILE)  # last: a folder without it is not an index
        return index_bytes(folder)

    @classmethod
    def load(cls, folder: str | Path) -> "NameIndex":
        """Read an index written by :meth:`save`.

        Raises:
            FileNotFoundError: when the folder holds no complete index.
        """
        import faiss

        folder = Path(folder)
        meta = read_meta(folder)
        if meta is None:
            raise FileNotFoundError(f"{folder} holds no name index ({META_FILE} missing or unreadable). "
                                    "Fix: build it with load_or_build_index, or set `linking.index_dir`")
        data = json.loads((folder / ENTRIES_FILE).read_text(encoding="utf-8"))
        entries = [NamedEntity(i, n, k) for i, n, k in zip(data["ids"], data["names"], data["kinds"])]
        index = faiss.read_index(str(folder / FAISS_FILE)) if meta["encoder"] is not None else None
        return cls(entries, list(data["keys"]), sorted(set(data["keys"])), index, meta["encoder"], meta["kg_key"],
                   float(meta.get("build_seconds", 0.0)))


def read_meta(folder: str | Path) -> dict | None:
    """The index's ``meta.json`` (None when absent, unreadable or of another format)."""
    path = Path(folder) / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("format") == FORMAT else None


def index_bytes(folder: str | Path) -> int:
    """Bytes of the index files in ``folder``."""
    return sum((Path(folder) / f).stat().st_size for f in (ENTRIES_FILE, FAISS_FILE, META_FILE)
               if (Path(folder) / f).is_file())


def load_or_build_index(folder: str | Path, names_fn, encoder: TextEncoder | None,
                        kg_key: str) -> tuple[NameIndex, bool]:
    """The index saved in ``folder`` if it was built for ``kg_key`` with ``encoder``, else a new one (saved there).

    Args:
        folder: The index folder.
        names_fn: Called without arguments to list the KG's names, only when a build is needed.
        encoder: The text encoder (its id must match a saved index's); None for an exact-only
            index (a saved dense index serves too).
        kg_key: Identifies the KG.

    Returns:
        The index and whether it was built now.
    """
    meta = read_meta(folder)
    wanted = None if encoder is None else encoder.model_id
    if meta is not None and meta.get("kg_key") == kg_key and (wanted is None or meta.get("encoder") == wanted):
        return NameIndex.load(folder), False
    index = NameIndex.build(names_fn(), encoder, kg_key)
    index.save(folder)
    return index, True
