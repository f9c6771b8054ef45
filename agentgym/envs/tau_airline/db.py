"""One episode's copy of the airline database, as a copy-on-write overlay over the shared base DB.

The base DB (300 flights, 500 users, 2,000 reservations; 7 MB of JSON) is parsed once per process and never
mutated. A deep copy per episode would cost ~0.3 s, so an :class:`EpisodeDB` instead copies a record the first
time a tool is about to change it (:meth:`EpisodeDB.mutable`) and keeps it in its own overlay. Reads see the
overlay first. Two episodes therefore never share a mutable record, and resetting is free.

Records are kept in τ²'s dumped form (:mod:`.models`), so τ²'s DB-hash check, a SHA-256 of the whole dumped
database, compares exactly what is stored here. Two overlays over the same base describe equal databases exactly
when the records whose JSON differs from the base's are equal, so :meth:`EpisodeDB.digest` hashes only those
(canonical JSON, SHA-256). JSON, not Python equality, decides what changed: ``2.0`` and ``2`` are equal in Python
but not in τ²'s hash. :meth:`EpisodeDB.tau2_hash` is τ²'s own hash of the full database (``get_db_hash``), for
cross-checks; :meth:`EpisodeDB.materialize` builds the full DB.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Iterator

__all__ = ["EpisodeDB", "TABLES", "canonical_json", "tau2_hash"]

TABLES = ("flights", "users", "reservations")
_BASE_JSON: dict[int, tuple[dict, dict[str, dict[str, str]]]] = {}  # id(base) -> (base, record JSON per table)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def tau2_hash(full_db: dict) -> str:
    """τ²'s ``get_dict_hash`` of a whole database in dumped form (``FlightDB.get_hash``/``get_db_hash``)."""
    return hashlib.sha256(json.dumps(full_db, sort_keys=True, default=str).encode()).hexdigest()


class EpisodeDB:
    """A private, copy-on-write view of ``base`` (``{"flights": {...}, "users": {...}, "reservations": {...}}``)."""

    def __init__(self, base: dict[str, dict[str, Any]]):
        self._base = base
        self._over: dict[str, dict[str, Any]] = {t: {} for t in TABLES}

    # ---- reads (never copy; callers must not mutate what they get) ------------------------------------------
    def peek(self, table: str, key: str) -> Any | None:
        over = self._over[table]
        if key in over:
            return over[key]
        return self._base[table].get(key)

    def __contains__(self, item: tuple[str, str]) -> bool:
        table, key = item
        return key in self._over[table] or key in self._base[table]

    def keys(self, table: str) -> Iterator[str]:
        yield from self._base[table]
        for k in self._over[table]:
            if k not in self._base[table]:
                yield k

    def values(self, table: str) -> Iterator[Any]:
        for k in self.keys(table):
            yield self.peek(table, k)

    # ---- writes ---------------------------------------------------------------------------------------------
    def mutable(self, table: str, key: str) -> Any:
        """The episode's own copy of a record, made on first use; raises KeyError when absent."""
        over = self._over[table]
        if key not in over:
            over[key] = copy.deepcopy(self._base[table][key])
        return over[key]

    def insert(self, table: str, key: str, record: Any) -> None:
        self._over[table][key] = record

    # ---- comparison -----------------------------------------------------------------------------------------
    def changes(self) -> dict[str, dict[str, Any]]:
        """The records that differ from the base (new ones included), per table."""
        out: dict[str, dict[str, Any]] = {}
        for t in TABLES:
            base = self._base[t]
            diff = {k: v for k, v in self._over[t].items()
                    if k not in base or canonical_json(base[k]) != canonical_json(v)}
            if diff:
                out[t] = diff
        return out

    def digest(self) -> str:
        """SHA-256 of the canonical changes: equal digests <=> equal databases (over the same base)."""
        return hashlib.sha256(canonical_json(self.changes()).encode("utf-8")).hexdigest()

    def tau2_hash(self) -> str:
        """τ²'s hash of this episode's full database: :func:`tau2_hash` of :meth:`materialize`, built from the base
        records' JSON (serialized once per base) and the overlay's, without copying the database."""
        cached = _BASE_JSON.get(id(self._base))
        if cached is None or cached[0] is not self._base:
            cached = (self._base, {t: {k: json.dumps(v, sort_keys=True, default=str) for k, v in self._base[t].items()}
                                   for t in TABLES})
            _BASE_JSON[id(self._base)] = cached
        parts = []
        for t in sorted(TABLES):  # json.dumps(sort_keys=True) of {table: {key: record}}
            records = {**cached[1][t], **{k: json.dumps(v, sort_keys=True, default=str)
                                          for k, v in self._over[t].items()}}
            body = ", ".join(f"{json.dumps(k)}: {records[k]}" for k in sorted(records))
            parts.append(f"{json.dumps(t)}: {{{body}}}")
        return hashlib.sha256(("{" + ", ".join(parts) + "}").encode()).hexdigest()

    def materialize(self) -> dict[str, dict[str, Any]]:
        """The full database as a new dict (slow: a deep copy of the base). For tests and exports."""
        full = copy.deepcopy(self._base)
        for t in TABLES:
            full[t].update(copy.deepcopy(self._over[t]))
        return full
