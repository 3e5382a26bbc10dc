"""SQLite store for tracked items and their transition history, and for when each running orphan (a READY
sandbox whose pod the API no longer shows) was first seen so, by sandbox id: its long grace survives restarts.

One file, WAL, one transaction per batch of transitions, fsync'd (synchronous=FULL) before the engine
acts. A second nodegc on the same ledger is refused through an exclusive flock on `<ledger>.lock`.

Every failure, whatever SQLite or the file system says, is raised as LedgerError (the cause chained), so
the agent loop can count it, skip the cycle and go on. The schema carries a version: an older ledger is
migrated on open, one written by a newer nodegc is refused. Retention prunes closed and released items and
history rows older than the retention age, except the history of items still active.

A ledger belongs to one node (`recorded_node`, in meta): what it says is a photograph of that node. The
engine records its node into a ledger that has none and takes over one recorded for another node
(`take_over`: its open items released, its running orphans forgotten) before it judges anything on it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import sqlite3
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nodegc.model.items import Identity, Item, Phase
from nodegc.model.resources import Kind

SCHEMA_VERSION = 5
PRUNE_INTERVAL_SECONDS = 3600.0
"""Retention runs at most this often, on a write."""

@dataclass(frozen=True)
class _AddColumn:
    """ALTER TABLE ... ADD COLUMN unless the table has it already (SQLite has no IF NOT EXISTS for columns)."""

    table: str
    column: str
    decl: str


_BASE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS items (
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
)""",
    "CREATE INDEX IF NOT EXISTS items_phase ON items (phase)",
    """CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    at REAL NOT NULL,
    from_phase TEXT,
    to_phase TEXT NOT NULL,
    reason TEXT NOT NULL,
    owner TEXT
)""",
    "CREATE INDEX IF NOT EXISTS history_key ON history (key)",
    "CREATE INDEX IF NOT EXISTS history_at ON history (at)",
)
"""Schema version 1, as every ledger before versioned migrations was created."""

MIGRATIONS: dict[int, tuple[str | _AddColumn, ...]] = {
    2: ("CREATE INDEX IF NOT EXISTS items_phase_last_seen ON items (phase, last_seen)",),
    3: ("""CREATE TABLE IF NOT EXISTS running_orphans (
    sandbox_id TEXT PRIMARY KEY,
    pod_uid TEXT NOT NULL,
    created_at TEXT NOT NULL,
    first_seen REAL NOT NULL
)""",),
    # The boot a running orphan was first seen in and CLOCK_BOOTTIME then: on the same boot its grace is
    # measured on that clock, which a wall-clock step does not move. NULL (a row schema 3 wrote): the wall clock.
    4: (_AddColumn("running_orphans", "boot_id", "TEXT"), _AddColumn("running_orphans", "boottime", "REAL")),
    # The node the ledger belongs to: a row ('node', <name>) of meta, written by the engine at its first usable
    # desired state; no DDL. The version says a nodegc that checks it wrote the ledger: an older one, which
    # would read another node's history as its own, refuses it. A ledger migrated from 4 has no node yet.
    5: (),
}
"""The steps that take a ledger from version N-1 to N; a new ledger runs them all after the base schema. Each
is idempotent (a ledger whose version was set back by hand to run an older nodegc, docs/runbook.md, is
migrated again over what it already has)."""

_COLUMNS = ("key", "kind", "resource_id", "phase", "identity", "finding_class", "owner_uid", "owner_namespace",
            "owner_name", "container_id", "first_seen", "last_seen", "orphan_count", "attempts", "next_attempt",
            "last_error", "lazy")
_SELECT_ITEMS = "SELECT " + ", ".join(_COLUMNS) + " FROM items"
_UPSERT_ITEM = (
    "INSERT OR REPLACE INTO items (" + ", ".join(_COLUMNS) + ") VALUES (" + ", ".join("?" * len(_COLUMNS)) + ")"
)
_SELECT_HISTORY = "SELECT key, kind, at, from_phase, to_phase, reason, owner FROM history"
_FINAL = tuple(p.value for p in Phase if p.final)
_FINAL_SQL = "(" + ", ".join(f"'{p}'" for p in _FINAL) + ")"


class LedgerError(Exception):
    pass


class LedgerLocked(LedgerError):
    pass


class Change(Protocol):
    """One phase-machine transition as the ledger persists it (planning.phases.Transition is one)."""

    @property
    def item(self) -> Item: ...
    @property
    def previous(self) -> Phase | None: ...
    @property
    def reason(self) -> str: ...
    @property
    def phase_changed(self) -> bool: ...


@dataclass(frozen=True)
class HistoryRow:
    """For display: text that is not valid Unicode is shown with backslash escapes."""

    key: str
    kind: str
    at: float
    from_phase: str | None
    to_phase: str
    reason: str
    owner: str | None


@dataclass(frozen=True)
class OrphanSeen:
    """When a READY sandbox was first seen with its pod absent from the API (`running_orphan`), with the
    identity it had then: a record whose sandbox now names another pod or creation time is not its own."""

    first_seen: float
    pod_uid: str
    created_at: str
    """ISO 8601, or "" when the runtime gave none."""
    boot_id: str = ""
    """The boot `first_seen` was taken in ("" unknown: a row of schema 3, an unreadable boot id)."""
    boottime: float | None = None
    """CLOCK_BOOTTIME at `first_seen`, in that boot."""


@dataclass(frozen=True)
class Pruned:
    items: int
    history: int


class Ledger:
    def __init__(self, path: Path | str, *, lock: bool = True, retention_seconds: float | None = None) -> None:
        self.path = str(path)
        self.retention_seconds = retention_seconds
        """None: never pruned (one-shot runs, readers)."""
        self._pruned_at = -math.inf
        self._lock_fd: int | None = None
        in_memory = self.path == ":memory:"
        try:
            if not in_memory:
                _state_dir(Path(self.path))
            if lock and not in_memory:
                self._lock_fd = _take_lock(Path(self.path + ".lock"))
            if not in_memory:
                _regular_or_absent(Path(self.path))
            self.db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            if not in_memory:
                self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.schema_version = self._schema()
        except LedgerLocked:
            self.close()
            raise
        except LedgerError as e:
            self.close()
            raise LedgerError(f"cannot open ledger {self.path}: {e}") from e
        except (sqlite3.Error, OSError) as e:
            self.close()
            raise LedgerError(f"cannot open ledger {self.path}: {_why(e)}") from e

    def close(self) -> None:
        db = getattr(self, "db", None)
        if db is not None:
            with suppress(sqlite3.Error):
                db.close()
            self.db = None  # type: ignore[assignment]
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema -------------------------------------------------------------------------------------

    def _schema(self) -> int:
        """Create, check or migrate, in one transaction, so two processes opening at once agree."""
        with self._tx("schema") as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "meta" not in tables:
                if "items" in tables or "history" in tables:
                    raise LedgerError("it has items but no schema version: not a nodegc ledger")
                for sql in _BASE_SCHEMA:
                    db.execute(sql)
                db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            try:
                version = int(row[0]) if row is not None else 1
            except (TypeError, ValueError):
                raise LedgerError(f"schema version {row[0]!r} is not a number") from None
            if version > SCHEMA_VERSION:
                raise LedgerError(f"it was written by a newer nodegc (schema {version}, this one reads up to"
                                  f" {SCHEMA_VERSION}); refusing to use it")
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for step in MIGRATIONS.get(target, ()):
                    _migrate(db, step)
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        return SCHEMA_VERSION

    # -- transactions and reads ---------------------------------------------------------------------

    @contextmanager
    def _tx(self, what: str = "write") -> Iterator[sqlite3.Connection]:
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        except (sqlite3.Error, UnicodeError, OverflowError) as e:
            raise LedgerError(f"ledger {what} failed: {_why(e)}") from e

    def _read(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self.db.execute(sql, tuple(_enc(a) for a in args)).fetchall()
        except (sqlite3.Error, UnicodeError, OverflowError) as e:
            raise LedgerError(f"ledger read failed: {_why(e)}") from e

    def items(self, *, active_only: bool = False) -> dict[str, Item]:
        sql = _SELECT_ITEMS
        if active_only:
            sql += f" WHERE phase NOT IN {_FINAL_SQL}"
        items = (_item(row) for row in self._read(sql))
        return {i.key: i for i in items}

    def get(self, key: str) -> Item | None:
        rows = self._read(_SELECT_ITEMS + " WHERE key = ?", (key,))
        return _item(rows[0]) if rows else None

    def apply(self, transitions: Iterable[Change], *, now: float) -> None:
        """Persist transitions in one transaction; history gets a row for every phase change."""
        with self._tx() as db:
            _write(db, transitions, now)
        if self.retention_seconds is not None and now - self._pruned_at >= PRUNE_INTERVAL_SECONDS:
            self._pruned_at = now  # a failing prune is retried an interval later, not on every write
            self.prune(before=now - self.retention_seconds)

    def recorded_node(self) -> str | None:
        """The node this ledger belongs to; None: none recorded yet (a new ledger, or one of schema 4 or older,
        written before the node was recorded). A value that is no name nodegc wrote (bytes that are not
        UTF-8: a row written by hand, a damaged copy) is read with its bad bytes escaped: a name no node has,
        so the engine takes the ledger over."""
        rows = self._read("SELECT value FROM meta WHERE key = 'node'")
        if not rows:
            return None
        value = rows[0][0]
        # A value that is not text names no node this one can be: shown escaped, it differs from every name,
        # so the engine takes the ledger over (and records the right name) instead of failing every cycle.
        return str(_dec(value)) if not isinstance(value, bytes) or _decodes(value) else _shown(value)

    def record_node(self, node: str) -> None:
        """Record `node` as the node this ledger belongs to (one that has none: its history is taken as
        `node`'s)."""
        with self._tx("node") as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('node', ?)", (_enc(node),))

    def take_over(self, node: str, releases: Iterable[Change], *, now: float) -> None:
        """Make a ledger recorded for another node `node`'s, in one transaction: `releases` (that node's open
        items, released: `planning.phases.other_node`) written, every running orphan's first-seen time
        forgotten, and `node` recorded. A crash before the commit leaves the other node recorded, and the
        next start takes it over again."""
        with self._tx("take over") as db:
            _write(db, releases, now)
            db.execute("DELETE FROM running_orphans")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('node', ?)", (_enc(node),))

    def running_orphans(self) -> dict[str, OrphanSeen]:
        """The first-seen record of every running orphan, by sandbox id."""
        rows = self._read("SELECT sandbox_id, pod_uid, created_at, first_seen, boot_id, boottime"
                          " FROM running_orphans")
        out: dict[str, OrphanSeen] = {}
        for raw in rows:
            sid, uid, created, first, boot_id, boottime = (_dec(v) for v in raw)
            if not (isinstance(sid, str) and isinstance(uid, str) and isinstance(created, str)
                    and isinstance(first, int | float) and math.isfinite(first)):
                raise LedgerError(f"running orphan row {_shown(sid)!r} is unreadable")
            if not (isinstance(boot_id, str) and isinstance(boottime, int | float) and math.isfinite(boottime)):
                boot_id, boottime = "", None  # no boot clock reading of its own: measured on the wall clock
            out[sid] = OrphanSeen(first_seen=float(first), pod_uid=uid, created_at=created, boot_id=boot_id,
                                  boottime=None if boottime is None else float(boottime))
        return out

    def save_running_orphans(self, *, seen: dict[str, OrphanSeen], forget: Iterable[str] = ()) -> None:
        """Record (or overwrite) the given first-seen times and drop the forgotten ids, in one transaction."""
        with self._tx("running orphans") as db:
            for sid in forget:
                db.execute("DELETE FROM running_orphans WHERE sandbox_id = ?", (_enc(sid),))
            for sid, rec in seen.items():
                db.execute("INSERT OR REPLACE INTO running_orphans (sandbox_id, pod_uid, created_at, first_seen,"
                           " boot_id, boottime) VALUES (?, ?, ?, ?, ?, ?)",
                           tuple(_enc(v) for v in (sid, rec.pod_uid, rec.created_at, rec.first_seen,
                                                   rec.boot_id or None, rec.boottime if rec.boot_id else None)))

    def prune(self, *, before: float) -> Pruned:
        """Drop closed and released items last seen before `before`, and history rows older than that
        unless their item is still active (its whole trail stays until it closes)."""
        with self._tx("prune") as db:
            items = db.execute(f"DELETE FROM items WHERE phase IN {_FINAL_SQL} AND last_seen < ?", (before,))
            history = db.execute(
                f"DELETE FROM history WHERE at < ? AND key NOT IN"
                f" (SELECT key FROM items WHERE phase NOT IN {_FINAL_SQL})", (before,))
            return Pruned(items=items.rowcount, history=history.rowcount)

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
        rows = self._read(_SELECT_HISTORY + where + " ORDER BY id DESC LIMIT ?", [*args, limit])
        return [HistoryRow(_shown(r[0]), _shown(r[1]), r[2], _shown_opt(r[3]), _shown(r[4]), _shown(r[5]),
                           _shown_opt(r[6])) for r in reversed(rows)]


def _write(db: sqlite3.Connection, transitions: Iterable[Change], now: float) -> None:
    for t in transitions:
        db.execute(_UPSERT_ITEM, _row(t.item))
        if t.phase_changed:
            owner = _owner_label(t.item)
            db.execute(
                "INSERT INTO history (key, kind, at, from_phase, to_phase, reason, owner)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                tuple(_enc(v) for v in (
                    t.item.key, t.item.kind.value, now, t.previous.value if t.previous else None,
                    t.item.phase.value, t.reason[:2000], owner)),
            )


def _migrate(db: sqlite3.Connection, step: str | _AddColumn) -> None:
    if isinstance(step, str):
        db.execute(step)
        return
    # The names are the fixed ones of MIGRATIONS, never input.
    columns = {r[1] for r in db.execute(f"PRAGMA table_info({step.table})")}
    if step.column not in columns:
        db.execute(f"ALTER TABLE {step.table} ADD COLUMN {step.column} {step.decl}")


# -- files ------------------------------------------------------------------------------------------


def _state_dir(ledger: Path) -> None:
    parent = ledger.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise LedgerError(f"the state directory {parent} is not a directory") from None
    except NotADirectoryError:
        raise LedgerError(f"the state directory {parent} is below a file that is not a directory") from None
    except OSError as e:
        raise LedgerError(f"cannot create the state directory {parent}: {_why(e)}") from e
    if not parent.is_dir():
        raise LedgerError(f"the state directory {parent} is not a directory")


def _regular_or_absent(path: Path) -> None:
    """lstat: a symlink planted at the ledger's name would have SQLite create or write the database wherever
    it points, outside the state directory."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise LedgerError(_why(e)) from e
    if stat.S_ISLNK(mode):
        raise LedgerError(f"{path} is a symlink, not followed")
    if not stat.S_ISREG(mode):
        raise LedgerError(f"{path} is not a regular file")


def _take_lock(path: Path) -> int:
    """O_NOFOLLOW: a planted symlink cannot make nodegc create or lock a file elsewhere; O_NONBLOCK: a FIFO
    cannot block the open; fstat: only a regular file is a lock."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise LedgerError(f"the ledger lock {path} is a symlink, not followed") from e
        if e.errno == errno.EISDIR:
            raise LedgerError(f"the ledger lock {path} is not a regular file (a directory)") from e
        raise LedgerError(f"cannot open the ledger lock {path}: {_why(e)}") from e
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LedgerError(f"the ledger lock {path} is not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as e:
        os.close(fd)
        raise LedgerLocked(f"another nodegc holds the ledger lock {path}") from e
    except LedgerError:
        os.close(fd)
        raise
    except OSError as e:
        os.close(fd)
        raise LedgerError(f"cannot lock {path}: {_why(e)}") from e
    return fd


def _why(e: BaseException) -> str:
    if isinstance(e, OSError) and e.errno:
        return f"{e.strerror or type(e).__name__} (errno {e.errno})"
    return str(e) or type(e).__name__


# -- rows -------------------------------------------------------------------------------------------


def _enc(value: Any) -> Any:
    """A str that is not valid Unicode (a lone surrogate, a file name in the os.fsdecode convention) is
    stored as the bytes of its surrogatepass encoding: SQLite's TEXT cannot hold it, and the ledger must
    give back exactly the key it was given or the item would never be found again."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass")
    return value


def _dec(value: Any) -> Any:
    """The str `_enc` stored; a BLOB it did not write (a damaged or foreign ledger) is a LedgerError, never a
    UnicodeDecodeError out of the ledger."""
    if not isinstance(value, bytes):
        return value
    try:
        return value.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as e:
        raise LedgerError(f"a ledger value is not text: {value[:40]!r}") from e


def _shown(value: Any) -> str:
    """For the eye: whatever is not valid Unicode, backslash-escaped."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "surrogatepass" if _decodes(value) else "backslashreplace")
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


def _decodes(value: bytes) -> bool:
    try:
        value.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return False
    return True


def _shown_opt(value: Any) -> str | None:
    return None if value is None else _shown(value)


def _owner_label(item: Item) -> str | None:
    parts = [p for p in (f"{item.owner_namespace}/{item.owner_name}" if item.owner_name else None,
                         item.owner_uid, item.container_id) if p]
    return " ".join(parts) or None


def _row(item: Item) -> tuple[Any, ...]:
    return tuple(_enc(v) for v in (
        item.key, item.kind.value, item.resource_id, item.phase.value, json.dumps(item.identity),
        item.finding_class, item.owner_uid, item.owner_namespace, item.owner_name, item.container_id,
        item.first_seen, item.last_seen, item.orphan_count, item.attempts, item.next_attempt, item.last_error,
        int(item.lazy)))


def _item(raw: tuple[Any, ...]) -> Item:
    row = tuple(_dec(v) for v in raw)
    try:
        identity: Identity = tuple((str(k), str(v)) for k, v in json.loads(row[4]))
        return Item(key=row[0], kind=Kind(row[1]), resource_id=row[2], phase=Phase(row[3]), identity=identity,
                    finding_class=row[5], owner_uid=row[6], owner_namespace=row[7], owner_name=row[8],
                    container_id=row[9], first_seen=row[10], last_seen=row[11], orphan_count=row[12],
                    attempts=row[13], next_attempt=row[14], last_error=row[15], lazy=bool(row[16]))
    except (ValueError, TypeError, RecursionError) as e:
        raise LedgerError(f"ledger row {_shown(row[0])!r} is unreadable: {e}") from e
