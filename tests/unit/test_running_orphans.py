"""The running-orphan grace across restarts: first-seen times in the ledger (SQLite), by sandbox id."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from nodegc.engine.orphans import RunningOrphans
from nodegc.hostio.clock import BootTime
from nodegc.ledger.store import Ledger, OrphanSeen
from nodegc.model.findings import Finding, FindingClass, Owner
from nodegc.model.pods import OwnerState
from nodegc.model.resources import Kind
from nodegc.model.runtime import RuntimeSandbox, RuntimeView
from tests.unit.factories import NOW

A, B = "a" * 64, "b" * 64
GRACE = 600.0
T0 = NOW.timestamp()


def NO_BOOT_CLOCK() -> BootTime | None:
    """No boot id to read: the grace is measured on the wall clock (what these tests pin down)."""
    return None


def sandbox(sid: str, uid: str = "u-a", *, created_ago: float = 3600) -> RuntimeSandbox:
    return RuntimeSandbox(id=sid, pod_uid=uid, pod_name="web", pod_namespace="default", attempt=0, ready=True,
                          created_at=NOW - timedelta(seconds=created_ago), status_read=True)


def view(*sandboxes: RuntimeSandbox, reachable: bool = True) -> RuntimeView:
    return RuntimeView(endpoint="unix:///run/containerd/containerd.sock", reachable=reachable, sandboxes=sandboxes,
                       read_at=NOW)


def finding(sid: str, cls: FindingClass = FindingClass.RUNNING_ORPHAN, uid: str = "u-a") -> Finding:
    return Finding(cls, Kind.SANDBOX, sid, Owner(uid=uid, namespace="default", name="web", container_id=sid),
                   OwnerState.ABSENT if cls is FindingClass.RUNNING_ORPHAN else OwnerState.LIVE, ("test",))


def tracker(ledger: Ledger) -> RunningOrphans:
    """A new one per call: what an agent that restarted has."""
    return RunningOrphans(grace_seconds=GRACE, store=ledger, boot_clock=NO_BOOT_CLOCK)


def test_the_grace_survives_a_restart(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        assert tracker(ledger).observe([finding(A)], T0, view=view(sandbox(A))) == []
    for t in (T0 + 200, T0 + 400):  # a crash-looping agent: a new process every 200 s
        with Ledger(tmp_path / "ledger.db") as ledger:
            assert tracker(ledger).observe([finding(A)], t, view=view(sandbox(A))) == []
    with Ledger(tmp_path / "ledger.db") as ledger:
        assert [f.id for f in tracker(ledger).observe([finding(A)], T0 + GRACE, view=view(sandbox(A)))] == [A]
        assert ledger.running_orphans()[A].first_seen == T0


def test_forgotten_when_the_pod_is_back_or_the_sandbox_gone(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        tracker(ledger).observe([finding(A), finding(B, uid="u-b")], T0, view=view(sandbox(A), sandbox(B, "u-b")))
        # A's pod is in the API again (in_use); B's sandbox is gone from a complete list.
        tracker(ledger).observe([finding(A, FindingClass.IN_USE)], T0 + 100, view=view(sandbox(A)))
        assert ledger.running_orphans() == {}
        # Absent again later: the grace starts over.
        assert tracker(ledger).observe([finding(A)], T0 + GRACE, view=view(sandbox(A))) == []
        assert ledger.running_orphans()[A].first_seen == T0 + GRACE


@pytest.mark.parametrize("why", ["unreachable", "incomplete", "no view"])
def test_kept_while_the_runtime_cannot_say(tmp_path: Path, why: str) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        tracker(ledger).observe([finding(A)], T0, view=view(sandbox(A)))
        kwargs = {"unreachable": {"view": view(reachable=False)}, "incomplete": {"view": view(), "complete": False},
                  "no view": {}}[why]
        assert tracker(ledger).observe([], T0 + 100, **kwargs) == []  # type: ignore[arg-type]
        assert ledger.running_orphans()[A].first_seen == T0
        assert [f.id for f in tracker(ledger).observe([finding(A)], T0 + GRACE, view=view(sandbox(A)))] == [A]


def test_a_first_seen_in_the_future_counts_as_now(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        created = sandbox(A).created_at.isoformat()  # type: ignore[union-attr]
        ledger.save_running_orphans(seen={A: OrphanSeen(first_seen=T0 + 86400, pod_uid="u-a", created_at=created)})
        with capture_logs() as logs:
            assert tracker(ledger).observe([finding(A)], T0, view=view(sandbox(A))) == []
        assert any("future" in e["event"] for e in logs), logs
        assert ledger.running_orphans()[A].first_seen == T0  # never older than now, and not a day younger
        assert [f.id for f in tracker(ledger).observe([finding(A)], T0 + GRACE, view=view(sandbox(A)))] == [A]


def test_a_record_of_another_sandbox_under_that_id_is_not_its_own(tmp_path: Path) -> None:
    """A ledger copied from elsewhere, or an id the runtime reused: another pod UID or creation time."""
    with Ledger(tmp_path / "ledger.db") as ledger:
        created = sandbox(A).created_at.isoformat()  # type: ignore[union-attr]
        ledger.save_running_orphans(seen={A: OrphanSeen(first_seen=T0 - 86400, pod_uid="u-other", created_at=created),
                                          B: OrphanSeen(first_seen=T0 - 86400, pod_uid="u-b", created_at="")})
        found = tracker(ledger).observe([finding(A), finding(B, uid="u-b")], T0,
                                        view=view(sandbox(A), sandbox(B, "u-b")))
        assert found == []
        assert {sid: r.first_seen for sid, r in ledger.running_orphans().items()} == {A: T0, B: T0}


def test_an_unreadable_ledger_counts_in_memory_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    errors: list[int] = []
    with Ledger(path) as ledger:
        orphans = RunningOrphans(grace_seconds=GRACE, store=ledger, on_store_error=lambda: errors.append(1),
                                 boot_clock=NO_BOOT_CLOCK)
        orphans.observe([finding(A)], T0, view=view(sandbox(A)))
        db = sqlite3.connect(path)
        db.execute("UPDATE running_orphans SET first_seen = 'soon'")  # a row nodegc cannot read
        db.commit()
        db.close()
        with capture_logs() as logs:
            assert orphans.observe([finding(A)], T0 + 100, view=view(sandbox(A))) == []
            assert [f.id for f in orphans.observe([finding(A)], T0 + GRACE, view=view(sandbox(A)))] == [A]
        warned = [e for e in logs if "memory" in e["event"]]
        assert len(warned) == 1 and warned[0]["log_level"] == "warning", logs  # said once, not every cycle
        assert errors  # counted like any ledger failure
    # A new process with the same broken ledger starts over in memory: never older than it can prove.
    with Ledger(path) as ledger:
        assert tracker(ledger).observe([finding(A)], T0 + GRACE + 1, view=view(sandbox(A))) == []


def test_without_a_store_in_memory_as_before() -> None:
    orphans = RunningOrphans(grace_seconds=GRACE, boot_clock=NO_BOOT_CLOCK)
    assert orphans.observe([finding(A)], T0, view=view(sandbox(A))) == []
    assert [f.id for f in orphans.observe([finding(A)], T0 + GRACE, view=view(sandbox(A)))] == [A]
    assert orphans.sandboxes[A].created_at == sandbox(A).created_at


def test_a_schema_2_ledger_gains_the_table_and_keeps_its_items(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path):
        pass
    db = sqlite3.connect(path)
    db.execute("DROP TABLE running_orphans")
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    db.execute("INSERT INTO items (key, kind, resource_id, phase, identity, finding_class, first_seen, last_seen,"
               " orphan_count) VALUES ('netns:/run/netns/x', 'netns', '/run/netns/x', 'detected', '[]',"
               " 'leaked_netns', 1, 1, 1)")
    db.commit()
    db.close()
    with Ledger(path) as ledger:
        assert ledger.running_orphans() == {}
        assert list(ledger.items()) == ["netns:/run/netns/x"]
        tracker(ledger).observe([finding(A)], T0, view=view(sandbox(A)))
        assert ledger.running_orphans()[A].first_seen == T0
