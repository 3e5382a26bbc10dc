"""The ledger's schema version, its migration from the first schema, and retention."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from nodegc.ledger.store import SCHEMA_VERSION, Ledger, LedgerError, OrphanSeen
from nodegc.model.items import Item, Phase
from nodegc.model.resources import Kind
from nodegc.planning.phases import Transition

# The schema as nodegc created it before versioned migrations (schema_version 1), verbatim.
V1_SCHEMA = """
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
INSERT OR IGNORE INTO meta VALUES ('schema_version', '1');
INSERT INTO items VALUES ('ip_reservation:net/10.0.0.5', 'ip_reservation', 'net/10.0.0.5', 'failed',
    '[["container_id", "c1"], ["inode", "7"]]', 'leaked_ip', 'u1', 'shop', 'web-0', 'c1', 100.0, 200.0, 4, 2,
    260.0, 'busy', 0);
INSERT INTO items VALUES ('pod_dir:/k/pods/u2', 'pod_dir', '/k/pods/u2', 'closed', '[["inode", "9"]]',
    'orphaned_pod_dir', 'u2', NULL, NULL, NULL, 100.0, 150.0, 3, 1, NULL, NULL, 0);
INSERT INTO history (key, kind, at, from_phase, to_phase, reason, owner) VALUES
    ('ip_reservation:net/10.0.0.5', 'ip_reservation', 100.0, NULL, 'detected', 'seen orphaned: leaked_ip',
     'shop/web-0 u1 c1'),
    ('pod_dir:/k/pods/u2', 'pod_dir', 150.0, 'cleaned', 'closed', 'confirmed absent after clean', 'u2');
"""
DAY = 86400.0


def v1_ledger(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.executescript(V1_SCHEMA)
    db.commit()
    db.close()
    return path


def item(key: str, phase: Phase, *, last_seen: float) -> Item:
    kind = Kind(key.split(":", 1)[0])
    return Item(key=key, kind=kind, resource_id=key.split(":", 1)[1], phase=phase, identity=(("inode", "1"),),
                finding_class="orphaned_pod_dir", owner_uid="u", owner_namespace=None, owner_name=None,
                container_id=None, first_seen=last_seen, last_seen=last_seen, orphan_count=1)


def test_a_ledger_of_the_first_schema_is_migrated_with_its_items_and_history(tmp_path: Path) -> None:
    path = v1_ledger(tmp_path / "ledger.db")
    with Ledger(path) as ledger:
        assert ledger.schema_version == SCHEMA_VERSION
        items = ledger.items()
        assert set(items) == {"ip_reservation:net/10.0.0.5", "pod_dir:/k/pods/u2"}
        failed = items["ip_reservation:net/10.0.0.5"]
        assert (failed.phase, failed.attempts, failed.next_attempt, failed.last_error) == (Phase.FAILED, 2, 260.0,
                                                                                           "busy")
        assert failed.identity == (("container_id", "c1"), ("inode", "7"))
        assert [r.reason for r in ledger.history()] == ["seen orphaned: leaked_ip", "confirmed absent after clean"]
        assert ledger.recorded_node() is None  # written before the node was recorded: the engine records it
        ledger.apply([Transition(item("pod_dir:/k/pods/u3", Phase.DETECTED, last_seen=300.0), None, "seen")],
                     now=300.0)
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "items_phase_last_seen" in indexes
    db.close()
    with Ledger(path) as again:  # opening a current ledger changes nothing
        assert len(again.items()) == 3


def test_a_new_ledger_is_created_at_the_current_version(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        assert ledger.schema_version == SCHEMA_VERSION
    with Ledger(":memory:") as memory:
        assert memory.schema_version == SCHEMA_VERSION


def test_the_node_recorded_and_a_take_over_in_one_transaction(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        assert ledger.recorded_node() is None
        ledger.record_node("node-\udcff")  # a name from argv in the os.fsdecode convention comes back as given
        assert ledger.recorded_node() == "node-\udcff"
        open_item = item("pod_dir:/k/pods/u1", Phase.MARKED, last_seen=100.0)
        ledger.apply([Transition(open_item, None, "seen")], now=100.0)
        ledger.save_running_orphans(seen={"s1": OrphanSeen(first_seen=100.0, pod_uid="u", created_at="")})
        released = Transition(replace(open_item, phase=Phase.RELEASED), Phase.MARKED, "the ledger was another's")
        ledger.take_over("node-b", [released], now=200.0)
    with Ledger(path) as ledger:
        assert ledger.recorded_node() == "node-b"
        assert ledger.items()["pod_dir:/k/pods/u1"].phase is Phase.RELEASED
        assert [(h.to_phase, h.reason, h.at) for h in ledger.history()][-1] == (
            "released", "the ledger was another's", 200.0)
        assert ledger.running_orphans() == {}


def test_a_ledger_of_a_newer_nodegc_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path):
        pass
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match="newer nodegc"):
        Ledger(path)


def test_a_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE items (x)")
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match="not a nodegc ledger"):
        Ledger(path)


def test_retention_prunes_old_closed_items_and_old_history_but_keeps_active_trails(tmp_path: Path) -> None:
    now = 100 * DAY
    old, recent = now - 40 * DAY, now - 2 * DAY
    with Ledger(tmp_path / "ledger.db") as ledger:
        ledger.apply([Transition(item("pod_dir:/old-closed", Phase.CLOSED, last_seen=old), None, "closed"),
                      Transition(item("pod_dir:/old-released", Phase.RELEASED, last_seen=old), None, "released"),
                      Transition(item("pod_dir:/old-failed", Phase.FAILED, last_seen=old), None, "failed")],
                     now=old)
        ledger.apply([Transition(item("pod_dir:/new-closed", Phase.CLOSED, last_seen=recent), None, "closed")],
                     now=recent)
        pruned = ledger.prune(before=now - 30 * DAY)
        assert (pruned.items, pruned.history) == (2, 2)
        assert set(ledger.items()) == {"pod_dir:/old-failed", "pod_dir:/new-closed"}
        assert {r.key for r in ledger.history()} == {"pod_dir:/old-failed", "pod_dir:/new-closed"}


def test_retention_runs_on_writes_at_most_hourly(tmp_path: Path) -> None:
    now = 100 * DAY
    with Ledger(tmp_path / "ledger.db", retention_seconds=30 * DAY) as ledger:
        ledger.apply([Transition(item("pod_dir:/a", Phase.CLOSED, last_seen=now - 31 * DAY), None, "closed")],
                     now=now)
        assert "pod_dir:/a" not in ledger.items()  # the first write prunes: it was already past retention
        ledger.apply([Transition(item("pod_dir:/b", Phase.CLOSED, last_seen=now - 40 * DAY), None, "closed")],
                     now=now + 60)
        assert "pod_dir:/b" in ledger.items()  # within the hour: not pruned yet
        ledger.apply([], now=now + 3700)
        assert "pod_dir:/b" not in ledger.items()
    with Ledger(tmp_path / "ledger.db") as keep_all:  # no retention: nothing is ever pruned
        keep_all.apply([Transition(item("pod_dir:/c", Phase.CLOSED, last_seen=0.0), None, "closed")], now=now)
        assert "pod_dir:/c" in keep_all.items()
