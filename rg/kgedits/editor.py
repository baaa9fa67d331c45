"""The single writer of a KG's edits: validate a batch, log it durably, then apply it.

:class:`KGEditor` holds the :class:`~rg.kgedits.log.EditLog` and the store the edits go to (a
:class:`~rg.kgedits.versioned.VersionedStore`, or a SPARQL store's :class:`~rg.kgedits.sparql.SparqlEditTarget`).
Opening it replays the log over the store (a restart loses no acknowledged edit). :meth:`KGEditor.edit`
runs one batch at a time: resolve against the current version (all or nothing), append and fsync,
apply, return the record: the caller acknowledges only after the append returned.
"""

from __future__ import annotations

import threading
from typing import Protocol, Sequence

from rg.kgedits.config import KGEditsConfig
from rg.kgedits.log import EditLog
from rg.kgedits.model import EditBatch, EditRecord
from rg.kgedits.resolve import EditTarget, resolve_batch


class EditableStore(EditTarget, Protocol):
    """A store edits are applied to, in version order."""

    @property
    def version(self) -> int: ...

    def apply(self, record: EditRecord) -> bool: ...


class KGEditor:
    """One KG's edit writer (module docstring).

    Args:
        store: Where edits are applied (at the configured KG's version 0, or any version the log reaches).
        log: The open edit log; its records are applied to ``store`` now.
        config: Batch limits and the new-relation rule.
    """

    def __init__(self, store: EditableStore, log: EditLog, config: KGEditsConfig) -> None:
        self.store, self.log, self.config = store, log, config
        self._lock = threading.Lock()
        self.replayed = 0
        for record in log.records:
            self.replayed += int(store.apply(record))

    @property
    def version(self) -> int:
        return self.log.version

    def edit(self, batch: EditBatch) -> EditRecord:
        """Validate, log (durably) and apply one batch; returns its record.

        Raises:
            EditRejected: naming each bad edit; nothing of the batch is logged or applied.
        """
        with self._lock:
            record = resolve_batch(batch, self.store, self.config, self.log.version)
            self.log.append(record)  # durable from here: a crash before apply is repaired by the replay on open
            self.store.apply(record)
            return record

    def since(self, version: int) -> Sequence[EditRecord]:
        """Records after ``version`` that are applied to the store, in order (what a replica at ``version`` applies).

        A record is logged before it is applied; a replica reading a shared triple store must not move to its
        version before the update has landed there.
        """
        return self.log.records_since(version)[: max(0, self.store.version - version)]

    def close(self) -> None:
        self.log.close()


def editable_store(store, writer: bool = True) -> EditableStore:
    """The store edits are applied to: a versioned copy of an in-memory KG (each process holds its own), or the
    SPARQL store itself (one shared store: ``writer`` runs the updates, the others follow the version)."""
    from rg.kgedits.versioned import VersionedStore
    from rg.stores.memory import MemoryStore

    if isinstance(store, MemoryStore):
        return VersionedStore(store)
    from rg.kgedits.sparql import SparqlEditTarget

    return SparqlEditTarget(store, writer=writer)
