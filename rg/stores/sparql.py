"""A :class:`~rg.stores.base.KGStore` over a SPARQL 1.1 endpoint in the Freebase layout.

Entities are IRIs under a namespace (``http://rdf.freebase.com/ns/m.0abc``, id ``m.0abc``);
names are ``ns:type.object.name`` literals; relations are IRIs under the same namespace and are
traversed in both directions. Triples whose object is a literal or an IRI outside the namespace
(and the name relation itself) are attributes, not edges.

Every search fetches only what it needs, a whole BFS frontier per query (``VALUES`` blocks of
``batch_size`` ids), into a small in-memory :class:`~rg.graph.KnowledgeGraph`, and then runs the
graph engine's own search on it, so results equal :class:`~rg.stores.memory.MemoryStore`'s on
the same graph by construction:

- k-hop: all incidences of every BFS frontier up to the round that overflows the cap (the
  engine's cut needs the whole round and the frontier degrees, both fetched);
- shortest paths: a bidirectional BFS over the endpoint until the two balls meet; every shortest
  path lies in the fetched triples, and the engine enumerates them there;
- grounding: one predicate-bound query per step from the current end set.

Queries go through one ``requests.Session`` (connection reuse) with a timeout each, bounded
retries with exponential backoff on transport errors, 5xx and 429, a bounded per-entity
incidence cache and a per-question ledger of queries and latency (:mod:`rg.stores.ledger`).
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from contextlib import contextmanager
from typing import Iterator, Sequence

import requests

from rg.graph import KnowledgeGraph, Path, split_relation
from rg.graph.search import CutOrder
from rg.stores.base import Direction, StoreError, StoreSubgraph, Triple, content_keys, sorted_paths, subgraph_of
from rg.stores.config import SparqlStoreConfig
from rg.stores.ledger import QueryLedger, QueryRecord
from rg.stores.sparql_text import iri, iri_local, literal, local_name, values_block

RETRY_STATUS = {429, 500, 502, 503, 504}

__all__ = ["SparqlStore", "StoreError"]


Incidence = tuple[Triple, str, str]
"""``(triple, entity it was reached from, entity at its other end)``."""


class SparqlStore:
    """Freebase-layout graph search over a SPARQL endpoint (see the module docstring).

    Args:
        config: Endpoint, graph, namespace, batching, timeouts, retries and cache size.
        session: Optional ``requests.Session`` (tests pass one to count connections).
    """

    def __init__(self, config: SparqlStoreConfig, session: requests.Session | None = None) -> None:
        self.config = config
        self.session = session or requests.Session()
        self.ledger = QueryLedger()
        self._question: str | None = None
        self._cache: OrderedDict[tuple[str, str, str | None], tuple[Incidence, ...]] = OrderedDict()
        self._labels: OrderedDict[str, tuple[str | None, tuple[str, ...]]] = OrderedDict()
        self._name_pred = iri_local(config.namespace, config.name_relation)
        self._alias_pred = iri_local(config.namespace, config.alias_relation) if config.alias_relation else None

    def __repr__(self) -> str:
        return f"SparqlStore({self.config.endpoint}, graph={self.config.graph})"

    def close(self) -> None:
        """Close the HTTP session."""
        self.session.close()

    @contextmanager
    def question(self, question_id: str) -> Iterator[None]:
        """Record the queries made inside the block under ``question_id`` in :attr:`ledger`."""
        previous, self._question = self._question, question_id
        try:
            yield
        finally:
            self._question = previous

    def clear_cache(self) -> None:
        self._cache.clear()
        self._labels.clear()

    # ------------------------------------------------------------------------ transport
    def select(self, query: str, kind: str, bindings: int = 0) -> list[dict[str, dict[str, str]]]:
        """Run a SELECT query; return its SPARQL JSON bindings (typed terms, exact literals).

        Raises:
            StoreError: as :meth:`_post` does.
        """
        return self._post(query, kind, bindings, "application/sparql-results+json",
                          lambda text: json.loads(text)["results"]["bindings"])

    def ping(self) -> None:
        """Ask the endpoint ``ASK {}`` (with the usual retries): a cheap check that it answers.

        Raises:
            StoreError: as :meth:`_post` does.
        """
        self._post("ASK {}", "ping", 0, "application/sparql-results+json", lambda text: [json.loads(text)["boolean"]])

    def select_iris(self, query: str, kind: str, bindings: int = 0) -> list[list[str]]:
        """Run a SELECT query whose every bound value is an IRI; return rows of IRI strings.

        Uses the tab-separated results format (several times cheaper for Virtuoso to write than
        JSON). IRIs hold no tab, newline or quote, so each field is one IRI, written ``<iri>``
        (SPARQL 1.1 TSV) or ``"iri"`` (Virtuoso); any other field fails as ``bad_result``.

        Raises:
            StoreError: as :meth:`_post` does, or ``bad_result`` for a field that is not an IRI.
        """
        return self._post(query, kind, bindings, "text/tab-separated-values", _parse_iri_tsv)

    def ask(self, query: str, kind: str) -> bool:
        """Run an ASK query (with the usual retries).

        Raises:
            StoreError: as :meth:`_post` does.
        """
        return bool(self._post(query, kind, 0, "application/sparql-results+json",
                               lambda text: [json.loads(text)["boolean"]])[0])

    def update(self, text: str, kind: str = "update") -> None:
        """Run a SPARQL 1.1 Update request (``INSERT DATA`` / ``DELETE DATA``: set operations, so a retry after a
        lost reply is safe), then drop the caches. Virtuoso needs ``GRANT SPARQL_UPDATE TO "SPARQL"`` for it.

        Raises:
            StoreError: as :meth:`_post` does (``bad_query`` for an endpoint that refuses updates).
        """
        self._post(text, kind, 0, "application/sparql-results+json,text/plain,*/*", lambda _: [], form="update")
        self.clear_cache()

    def _post(self, query: str, kind: str, bindings: int, accept: str, parse, form: str = "query") -> list:
        """POST ``query``, parse the answer with ``parse`` and record it in the ledger.

        Retries transport errors, timeouts, 429 and 5xx answers up to ``max_retries`` times
        with exponential backoff; every attempt sequence is one ledger record.

        Raises:
            StoreError: ``unreachable`` / ``timeout`` / ``http_<status>`` after the retries,
                ``bad_query`` on a 4xx answer, ``truncated`` when the server capped the rows.
        """
        cfg = self.config
        start = time.perf_counter()
        reason, detail, attempts = "", "", 0
        for attempt in range(cfg.max_retries + 1):
            attempts = attempt + 1
            if attempt:
                time.sleep(cfg.backoff_s * 2 ** (attempt - 1))
            try:
                r = self.session.post(cfg.endpoint, data={form: query}, timeout=cfg.timeout_s,
                                      headers={"Accept": accept})
            except requests.Timeout as err:
                reason, detail = "timeout", str(err)
                continue
            except requests.ConnectionError as err:
                reason, detail = "unreachable", str(err)
                continue
            if r.status_code in RETRY_STATUS:
                reason, detail = f"http_{r.status_code}", r.text[:300]
                continue
            if r.status_code != 200:
                self._record(kind, bindings, 0, start, attempts, "bad_query")
                raise StoreError("bad_query", f"HTTP {r.status_code}: {r.text[:300]}")
            r.encoding = "utf-8"
            try:
                rows = parse(r.text)
            except ValueError as err:
                self._record(kind, bindings, 0, start, attempts, "bad_result")
                raise StoreError("bad_result", str(err)[:300]) from None
            if len(rows) >= cfg.max_rows:
                self._record(kind, bindings, len(rows), start, attempts, "truncated")
                raise StoreError("truncated", f"{len(rows)} rows reached max_rows; lower batch_size or raise "
                                              "the server's ResultSetMaxRows and max_rows together")
            self._record(kind, bindings, len(rows), start, attempts, None)
            return rows
        self._record(kind, bindings, 0, start, attempts, reason)
        raise StoreError(reason, f"{attempts} attempts to {cfg.endpoint} failed; last: {detail[:300]}")

    def _record(self, kind: str, bindings: int, rows: int, start: float, attempts: int, error: str | None) -> None:
        self.ledger.add(QueryRecord(self._question, kind, bindings, rows, time.perf_counter() - start,
                                    attempts, error))

    def _from(self) -> str:
        return f"FROM {iri(self.config.graph)} " if self.config.graph else ""

    def _id(self, value: str) -> str | None:
        return local_name(self.config.namespace, value)

    def _term(self, entity_id: str) -> str:
        return iri_local(self.config.namespace, entity_id)

    # ------------------------------------------------------------------------- lookups
    def entity_ids_by_name(self, name: str) -> list[str]:
        terms = [literal(name)] + ([literal(name, self.config.name_lang)] if self.config.name_lang else [])
        q = (f"SELECT DISTINCT ?e {self._from()}WHERE {{ {values_block('n', terms)} "
             f"?e {self._name_pred} ?n }}")
        ids = {self._id(row["e"]["value"]) for row in self.select(q, "name_lookup", len(terms))
               if row["e"]["type"] == "uri"}
        return sorted(i for i in ids if i is not None)

    def entity_names(self, ids: Sequence[str]) -> dict[str, str | None]:
        """Name of each id (the least of several; None for none), from :meth:`labels`."""
        return {eid: name for eid, (name, _) in self.labels(ids).items()}

    def entity_aliases(self, ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """Every other string each id goes by: its names beyond :meth:`entity_names`' one and the literals of
        ``alias_relation`` (Freebase ``common.topic.alias``), sorted; from :meth:`labels`."""
        return {eid: aliases for eid, (_, aliases) in self.labels(ids).items()}

    def labels(self, ids: Sequence[str]) -> dict[str, tuple[str | None, tuple[str, ...]]]:
        """``(name, other names and aliases)`` of each id: one query per ``batch_size`` ids not in the bounded
        label cache (``cache_size``; the Hand asks for every entity of every working subgraph)."""
        out: dict[str, tuple[str | None, tuple[str, ...]]] = {}
        wanted = []
        for eid in dict.fromkeys(ids):
            hit = self._labels.get(eid)
            if hit is None:
                wanted.append(eid)
            else:
                self._labels.move_to_end(eid)
                out[eid] = hit
        preds = [self._name_pred] + ([self._alias_pred] if self._alias_pred else [])
        for chunk in _chunks(sorted(wanted), self.config.batch_size):
            q = (f"SELECT ?e ?p ?n {self._from()}WHERE {{ {values_block('e', map(self._term, chunk))} "
                 f"{values_block('p', preds)} ?e ?p ?n }}")
            names: dict[str, set[str]] = {}
            aliases: dict[str, set[str]] = {}
            for row in self.select(q, "labels", len(chunk)):
                eid = self._id(row["e"]["value"])
                if eid is None or row["n"]["type"] not in ("literal", "typed-literal"):
                    continue
                into = names if self._id(row["p"]["value"]) == self.config.name_relation else aliases
                into.setdefault(eid, set()).add(row["n"]["value"])
            for eid in chunk:
                first = min(names[eid]) if eid in names else None  # deterministic when an entity has several
                out[eid] = (first, tuple(sorted((names.get(eid, set()) | aliases.get(eid, set())) - {first})))
                if self.config.cache_size:
                    self._labels[eid] = out[eid]
                    if len(self._labels) > self.config.cache_size:
                        self._labels.popitem(last=False)
        return {eid: out[eid] for eid in ids}

    def iter_names(self, page_size: int = 10_000, max_pages: int = 100_000) -> Iterator[tuple[str, str]]:
        """Every ``(id, name)`` of the name relation, in pages ordered by entity and name.

        Args:
            page_size: Rows per query (keep it below the server's ResultSetMaxRows).
            max_pages: Bound on the queries made.

        Raises:
            StoreError: as :meth:`select` does, or ``truncated`` when ``max_pages`` pages did not
                reach the end.
        """
        return self._iter_literals(self._name_pred, "all_names", page_size, max_pages)

    def iter_aliases(self, page_size: int = 10_000, max_pages: int = 100_000) -> Iterator[tuple[str, str]]:
        """Every ``(id, alias)`` of ``alias_relation`` (none when it is not set), paged as :meth:`iter_names`."""
        if self._alias_pred is None:
            return iter(())
        return self._iter_literals(self._alias_pred, "all_aliases", page_size, max_pages)

    def _iter_literals(self, pred: str, kind: str, page_size: int, max_pages: int) -> Iterator[tuple[str, str]]:
        lang = self.config.name_lang
        for page in range(max_pages):
            q = (f"SELECT ?e ?n {self._from()}WHERE {{ ?e {pred} ?n }} ORDER BY ?e ?n "
                 f"LIMIT {int(page_size)} OFFSET {int(page) * int(page_size)}")
            rows = self.select(q, kind)
            for row in rows:
                term = row["n"]
                if row["e"]["type"] != "uri" or term["type"] not in ("literal", "typed-literal"):
                    continue
                if "xml:lang" in term and term["xml:lang"] != lang:
                    continue
                eid = self._id(row["e"]["value"])
                if eid is not None:
                    yield eid, term["value"]
            if len(rows) < page_size:
                return
        raise StoreError("truncated", f"more than {max_pages} pages of {page_size} {kind}; raise max_pages")

    def has_entity(self, entity_id: str) -> bool:
        return bool(self._incidences([entity_id], "both", None, limit_one=True))

    def neighbours(self, ids: Sequence[str], direction: Direction = "both") -> list[Triple]:
        return sorted({tr for tr, _, _ in self._incidences(ids, direction, None)})

    # ---------------------------------------------------------------------- incidences
    def _incidences(self, ids: Sequence[str], direction: Direction, relation: str | None,
                    limit_one: bool = False) -> list[Incidence]:
        """Incidences of ``ids`` (through ``relation`` only when given), from the cache or batched queries."""
        ways = ("out", "in") if direction == "both" else (direction,)
        out: list[Incidence] = []
        for way in ways:
            missing = []
            for eid in dict.fromkeys(ids):
                hit = self._cache.get((eid, way, relation))
                if hit is None:
                    missing.append(eid)
                else:
                    self._cache.move_to_end((eid, way, relation))
                    out.extend(hit)
            for chunk in _chunks(missing, self.config.batch_size):
                fetched = self._fetch(chunk, way, relation, limit_one)
                if limit_one:
                    if fetched:
                        return fetched
                    continue
                by_entity: dict[str, list[Incidence]] = {e: [] for e in chunk}
                for inc in fetched:
                    by_entity[inc[1]].append(inc)
                for eid, incs in by_entity.items():
                    self._remember((eid, way, relation), tuple(incs))
                out.extend(fetched)
        return out

    def _remember(self, key: tuple[str, str, str | None], value: tuple[Incidence, ...]) -> None:
        if self.config.cache_size == 0:
            return
        self._cache[key] = value
        if len(self._cache) > self.config.cache_size:
            self._cache.popitem(last=False)

    def _fetch(self, chunk: Sequence[str], way: str, relation: str | None, limit_one: bool) -> list[Incidence]:
        """One query: triples with a ``chunk`` entity as head (``out``) or tail (``in``)."""
        near, far = ("s", "o") if way == "out" else ("o", "s")
        pred = self._term(relation) if relation is not None else "?p"
        # Literal objects (names, dates) are attributes, not edges; IRIs outside the namespace
        # are dropped below (cheaper than a string filter on the server).
        q = (f"SELECT ?s {'?p ' if relation is None else ''}?o {self._from()}WHERE {{ "
             f"{values_block(near, map(self._term, chunk))} ?s {pred} ?o . FILTER(isIRI(?{far})) }}"
             + (" LIMIT 1" if limit_one else ""))
        kind = "exists" if limit_one else ("step" if relation is not None else "incident")
        incs = []
        for row in self.select_iris(q, f"{kind}_{way}", len(chunk)):
            s, o = self._id(row[0]), self._id(row[-1])
            p = relation if relation is not None else self._id(row[1])
            if s is None or o is None or p is None or p == self.config.name_relation:
                continue
            incs.append(((s, p, o), s, o) if way == "out" else ((s, p, o), o, s))
        return incs

    # -------------------------------------------------------------------------- search
    def k_hop(self, seeds: Sequence[str], hops: int, max_triples: int | None = None,
              direction: Direction = "both", cut: CutOrder = "walk") -> StoreSubgraph:
        if hops < 0:
            raise ValueError(f"hops must be >= 0, got {hops}")
        fetched: set[Triple] = set()
        seen = set(seeds)
        frontier = sorted(seen)
        for d in range(hops):
            if not frontier:
                break
            incs = self._incidences(frontier, direction, None)
            fetched.update(tr for tr, _, _ in incs)
            if (max_triples is not None and len(fetched) > max_triples) or d == hops - 1:
                break  # the engine cuts this round (or stops here): later rounds are not needed
            new = {other for _, _, other in incs} - seen
            seen |= new
            frontier = sorted(new)
        kg = KnowledgeGraph.from_triples(sorted(fetched))
        return subgraph_of(kg, seeds, hops, max_triples, direction, cut, content_keys(kg))

    def shortest_paths(self, source: str, target: str, direction: Direction = "out",
                       max_len: int | None = None) -> list[Path]:
        if not (self.has_entity(source) and self.has_entity(target)):
            return []
        if source == target:
            return [Path((source,), (), (), ())]
        back: Direction = {"out": "in", "in": "out", "both": "both"}[direction]  # type: ignore[assignment]
        dist_s, dist_t = {source: 0}, {target: 0}
        fs, ft, ks, kt = [source], [target], 0, 0
        fetched: set[Triple] = set()
        met = False
        while fs and ft and not met:
            if max_len is not None and ks + kt >= max_len:
                return []
            grow_source = len(fs) <= len(ft)
            frontier, way, dist, other = (fs, direction, dist_s, dist_t) if grow_source else (ft, back, dist_t, dist_s)
            incs = self._incidences(frontier, way, None)
            fetched.update(tr for tr, _, _ in incs)
            new = sorted({o for _, _, o in incs} - dist.keys())
            step = (ks if grow_source else kt) + 1
            for e in new:
                dist[e] = step
            met = any(e in other for e in new)
            if grow_source:
                fs, ks = new, step
            else:
                ft, kt = new, step
        if not met:
            return []
        kg = KnowledgeGraph.from_triples(sorted(fetched))
        return _strip_ids(kg.shortest_paths(source, target, direction, max_len))

    def ground(self, start: str, relation_path: Sequence[str]) -> list[Path]:
        ends = [start]
        fetched: set[Triple] = set()
        for label in relation_path:
            rel, fwd = split_relation(label)
            incs = self._incidences(ends, "out" if fwd else "in", rel)
            if not incs:
                return []
            fetched.update(tr for tr, _, _ in incs)
            ends = sorted({o for _, _, o in incs})
        if not relation_path:
            return [Path((start,), (), (), ())] if self.has_entity(start) else []
        kg = KnowledgeGraph.from_triples(sorted(fetched))
        return _strip_ids(kg.ground(start, relation_path))


def _parse_iri_tsv(text: str) -> list[list[str]]:
    """Rows of a tab-separated SELECT result whose values are all IRIs (header line dropped)."""
    lines = text.split("\n")
    rows = []
    for line in lines[1:]:
        if not line:
            continue
        row = []
        for field in line.rstrip("\r").split("\t"):
            if len(field) >= 2 and ((field[0], field[-1]) in (("<", ">"), ('"', '"'))) and '"' not in field[1:-1] \
                    and "\\" not in field:
                row.append(field[1:-1])
            else:
                raise ValueError(f"not an IRI field in a tab-separated result: {field[:80]!r}")
        rows.append(row)
    return rows


def _strip_ids(paths: Sequence[Path]) -> list[Path]:
    """Paths with their (local, meaningless) triple ids replaced by -1, sorted by content."""
    return sorted_paths([Path(p.entities, p.relations, p.forward, tuple(-1 for _ in p.triple_ids)) for p in paths])


def _chunks(items: Sequence[str], size: int) -> Iterator[list[str]]:
    items = list(items)
    for i in range(0, len(items), size):
        yield items[i:i + size]
