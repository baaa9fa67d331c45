"""KG edits on a SPARQL store: ``DELETE DATA`` / ``INSERT DATA`` built with the store's escaping.

Every id, relation and name enters the update text only through :mod:`rg.stores.sparql_text`
(IRIs percent-encoded under the store's namespace, names as escaped literals), so a name holding
quotes, braces, newlines or non-ASCII text stays data. A new entity also gets its name triple
(``name_relation``), which is how the store, the linker and the privacy guard learn it.

A triple store is shared by every Hand replica, so the edit owner alone writes
(:class:`SparqlEditTarget` with ``writer=True``) and the replicas only move their version and drop
their caches (``writer=False``). Unlike the in-memory store it keeps no snapshots: a question that
runs while an edit lands may read both versions (see docs/kg_edits.md).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from rg.kgedits.model import EditRecord
from rg.kgedits.versioned import EditOrderError, Snapshot
from rg.stores.sparql import SparqlStore
from rg.stores.sparql_text import iri, iri_local, literal


def update_text(store: SparqlStore, record: EditRecord) -> str:
    """The SPARQL Update request applying ``record`` (deletes first, then adds with new entities' names)."""
    cfg = store.config
    ns = cfg.namespace

    def term(entity_id: str) -> str:
        return iri_local(ns, entity_id)

    def block(lines: list[str]) -> str:
        body = " ".join(lines)
        return f"GRAPH {iri(cfg.graph)} {{ {body} }}" if cfg.graph else body

    name = iri_local(ns, cfg.name_relation)
    deletes = [f"{term(h)} {iri_local(ns, r)} {term(t)} ." for h, r, t in record.deletes]
    adds = [f"{term(h)} {iri_local(ns, r)} {term(t)} ." for h, r, t in record.adds]
    adds += [f"{term(i)} {name} {literal(n)} ." for i, n in sorted(record.new_entities.items())]
    parts = []
    if deletes:
        parts.append(f"DELETE DATA {{ {block(deletes)} }}")
    if adds:
        parts.append(f"INSERT DATA {{ {block(adds)} }}")
    return " ;\n".join(parts)


class SparqlEditTarget:
    """A SPARQL store that takes edits (module docstring); every KGStore read goes to the store.

    Args:
        store: The SPARQL store.
        writer: Run the updates (the edit owner); False only moves the version and drops caches (a Hand replica).
        version: The version the endpoint holds now.
    """

    def __init__(self, store: SparqlStore, writer: bool = True, version: int = 0) -> None:
        self.sparql, self.writer, self._version = store, writer, version

    def __getattr__(self, name: str):
        return getattr(self.sparql, name)  # the KGStore reads

    @property
    def version(self) -> int:
        return self._version

    @contextmanager
    def pin(self) -> Iterator[Snapshot]:
        """The version at the question's start (a triple store keeps no snapshot to hold it to)."""
        yield Snapshot(self._version, None)  # type: ignore[arg-type]

    def _from(self) -> str:
        return f"FROM {iri(self.sparql.config.graph)} " if self.sparql.config.graph else ""

    def has_relation(self, relation: str) -> bool:
        rel = iri_local(self.sparql.config.namespace, relation)
        return self.sparql.ask(f"ASK {self._from()}WHERE {{ ?s {rel} ?o }}", "edit_relation")

    def has_triple(self, head: str, relation: str, tail: str) -> bool:
        ns = self.sparql.config.namespace
        triple = f"{iri_local(ns, head)} {iri_local(ns, relation)} {iri_local(ns, tail)}"
        return self.sparql.ask(f"ASK {self._from()}WHERE {{ {triple} }}", "edit_triple")

    def apply(self, record: EditRecord) -> bool:
        """Apply ``record`` (the writer runs its update); False when this version is applied already.

        Raises:
            EditOrderError: when ``record`` skips a version.
            StoreError: when the endpoint refuses or cannot be reached (after its bounded retries).
        """
        if record.version <= self._version:
            return False
        if record.version != self._version + 1:
            raise EditOrderError(f"edit record version {record.version} does not follow {self._version}")
        text = update_text(self.sparql, record)
        if self.writer and text:
            self.sparql.update(text)
        else:
            self.sparql.clear_cache()
        self._version = record.version
        return True
