"""SQLite store for tracked items and their transition history.

One file, WAL, one transaction per batch of transitions, fsync'd (synchronous=FULL) before the engine
acts. A second nodegc on the same ledger is refused through an exclusive flock on `<ledger>.lock`.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodegc.model.items import Identity, Item, Phase
from nodegc.model.resources import Kind
from nodegc.planning.phases import Transition

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    identity TEXT NOT NULL,
    finding_class TEXT NOT NULL,
    owner_uid TEXT, owner_namespace TEXT, owner_name TEXT, container_id TEXT,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    orphan_count INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt REAL,
    last_error TEXT,
    lazy INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS items_phase ON items (phase);
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    at REAL NOT NULL,
    from_phase TEXT,
    to_phase TEXT NOT NULL,
    reason TEXT NOT NULL,
    owner TEXT
);
CREATE INDEX IF NOT EXISTS history_key ON history (key);
CREATE INDEX IF NOT EXISTS history_at ON history (at);
"""
_COLUMNS = ("key", "kind", "resource_id", "phase", "identity", "finding_class", "owner_uid", "owner_namespace",
            "owner_name", "container_id", "first_seen", "last_seen", "orphan_count", "attempts", "next_attempt",
            "last_error", "lazy")
_SELECT_ITEMS = "SELECT " + ", ".join(_COLUMNS) + " FROM items"
_UPSERT_ITEM = (
    "INSERT OR REPLACE INTO items (" + ", ".join(_COLUMNS) + ") VALUES (" + ", ".join("?" * len(_COLUMNS)) + ")"
)
_SELECT_HISTORY = "SELECT key, kind, at, from_phase, to_phase, reason, owner FROM history"


class LedgerError(Exception):
    pass


class LedgerLocked(LedgerError):
    pass


@dataclass(frozen=True)
class HistoryRow:
    key: str
    kind: str
    at: float
    from_phase: str | None
    to_phase: str
    reason: str
    owner: str | None


class Ledger:
    def __init__(self, path: Path | str, *, lock: bool = True) -> None:
        self.path = str(path)
        self._lock_fd: int | None = None
        in_memory = self.path == ":memory:"
        if lock and not in_memory:
            self._lock_fd = _take_lock(Path(self.path + ".lock"))
        try:
            if not in_memory:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            if not in_memory:
                self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.executescript(_SCHEMA)
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        except sqlite3.Error as e:
            self.close()
            raise LedgerError(f"cannot open ledger {self.path}: {e}") from e

    def close(self) -> None:
        db = getattr(self, "db", None)
        if db is not None:
            db.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        except sqlite3.Error as e:
            raise LedgerError(f"ledger write failed: {e}") from e

    def items(self, *, active_only: bool = False) -> dict[str, Item]:
        sql = _SELECT_ITEMS
        if active_only:
            sql += " WHERE phase NOT IN ('closed', 'released')"
        try:
            return {row[0]: _item(row) for row in self.db.execute(sql)}
        except sqlite3.Error as e:
            raise LedgerError(f"ledger read failed: {e}") from e

    def get(self, key: str) -> Item | None:
        row = self.db.execute(_SELECT_ITEMS + " WHERE key = ?", (key,)).fetchone()
        return _item(row) if row else None

    def apply(self, transitions: Iterable[Transition], *, now: float) -> None:
        """Persist transitions in one transaction; history gets a row for every phase change."""
        with self._tx() as db:
            for t in transitions:
                db.execute(_UPSERT_ITEM, _row(t.item))
                if t.phase_changed:
                    owner = _owner_label(t.item)
                    db.execute(
                        "INSERT INTO history (key, kind, at, from_phase, to_phase, reason, owner)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (t.item.key, t.item.kind.value, now, t.previous.value if t.previous else None,
                         t.item.phase.value, t.reason[:2000], owner),
                    )

    def history(self, *, key: str | None = None, kind: str | None = None, owner: str | None = None,
                since: float | None = None, limit: int = 1000) -> list[HistoryRow]:
        clauses: list[str] = []
        args: list[Any] = []
        if key:
            clauses.append("(key = ? OR key LIKE ?)")
            args += [key, f"%{key}%"]
        if kind:
            clauses.append("kind = ?")
            args.append(kind)
        if owner:
            clauses.append("owner LIKE ?")
            args.append(f"%{owner}%")
        if since is not None:
            clauses.append("at >= ?")
            args.append(since)
        # The clauses are the fixed strings above; every value is a bound parameter.
        where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        # The newest `limit` rows, oldest first: an audit trail is read forward, but the recent end matters.
        rows = self.db.execute(_SELECT_HISTORY + where + " ORDER BY id DESC LIMIT ?", [*args, limit])
        return [HistoryRow(*r) for r in reversed(rows.fetchall())]


def _take_lock(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as e:
        os.close(fd)
        raise LedgerLocked(f"another nodegc holds the ledger lock {path}") from e
    return fd


def _owner_label(item: Item) -> str | None:
    parts = [p for p in (f"{item.owner_namespace}/{item.owner_name}" if item.owner_name else None,
                         item.owner_uid, item.container_id) if p]
    return " ".join(parts) or None


def _row(item: Item) -> tuple[Any, ...]:
    return (item.key, item.kind.value, item.resource_id, item.phase.value, json.dumps(item.identity),
            item.finding_class, item.owner_uid, item.owner_namespace, item.owner_name, item.container_id,
            item.first_seen, item.last_seen, item.orphan_count, item.attempts, item.next_attempt, item.last_error,
            int(item.lazy))


def _item(row: tuple[Any, ...]) -> Item:
    identity: Identity = tuple((str(k), str(v)) for k, v in json.loads(row[4]))
    return Item(key=row[0], kind=Kind(row[1]), resource_id=row[2], phase=Phase(row[3]), identity=identity,
                finding_class=row[5], owner_uid=row[6], owner_namespace=row[7], owner_name=row[8],
                container_id=row[9], first_seen=row[10], last_seen=row[11], orphan_count=row[12],
                attempts=row[13], next_attempt=row[14], last_error=row[15], lazy=bool(row[16]))
