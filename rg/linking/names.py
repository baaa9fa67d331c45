"""Every named entity of a KG store: what the name index is built from."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Literal, Mapping, Sequence

from rg.stores.base import KGStore

NameKind = Literal["name", "alias"]


@dataclass(frozen=True)
class NamedEntity:
    """One name of one entity.

    Attributes:
        entity_id: The entity's id in the store.
        name: A display name (as stored) or an alias.
        kind: ``name`` for a name the store holds, ``alias`` for an alternative name.
    """

    entity_id: str
    name: str
    kind: NameKind = "name"


def store_names(store: KGStore, unnamed_pattern: str | None = None,
                aliases: Mapping[str, Sequence[str]] | None = None) -> list[NamedEntity]:
    """Every name and alias of ``store`` (:meth:`~rg.stores.KGStore.iter_names`,
    :meth:`~rg.stores.KGStore.iter_aliases`) plus ``aliases``, sorted, each once.

    Args:
        store: Any KG store.
        unnamed_pattern: Regex of names that are machine ids (Freebase ``m.``/``g.``), left out.
        aliases: More id → alternative names than the store holds.
    """
    pairs: Iterable[tuple[str, str, NameKind]] = ((i, n, "name") for i, n in store.iter_names())
    alias_pairs = [(i, a, "alias") for i, a in store.iter_aliases()]
    alias_pairs += [(i, a, "alias") for i, names in (aliases or {}).items() for a in names]
    skip = re.compile(unnamed_pattern) if unnamed_pattern else None
    out = {NamedEntity(str(i), str(n), k) for i, n, k in [*pairs, *alias_pairs]  # type: ignore[misc]
           if str(n).strip() and not (skip and skip.match(str(n)))}
    return sorted(out, key=lambda e: (e.entity_id, e.kind != "name", e.name))
