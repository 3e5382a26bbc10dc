"""The running-orphan grace against wall-clock steps: in the boot of its first sight it is measured on
CLOCK_BOOTTIME (injected here), so a forward step of the wall clock does not end it early; in another boot, or
without a boot clock, the wall clock's rules hold (a first sight in the future counts as now)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from structlog.testing import capture_logs

from nodegc.engine.orphans import RunningOrphans
from nodegc.hostio.clock import BootTime, read_boot_time
from nodegc.ledger.store import SCHEMA_VERSION, Ledger, OrphanSeen
from tests.unit.test_running_orphans import GRACE, T0, A, finding, sandbox, view

DAY = 86400.0


@dataclass
class Clocks:
    """The wall clock (what `now` is) and the boot clock, moved apart by steps of the wall clock."""

    wall: float = T0
    boot: float = 1000.0
    boot_id: str | None = "boot-1"

    def tick(self, seconds: float) -> None:
        self.wall += seconds
        self.boot += seconds

    def read_boot(self) -> BootTime | None:
        return None if self.boot_id is None else BootTime(boot_id=self.boot_id, seconds=self.boot)


def tracker(ledger: Ledger, clocks: Clocks) -> RunningOrphans:
    """A new one per call: what an agent that restarted has."""
    return RunningOrphans(grace_seconds=GRACE, store=ledger, boot_clock=clocks.read_boot)


def due(ledger: Ledger, clocks: Clocks) -> list[str]:
    return [f.id for f in tracker(ledger, clocks).observe([finding(A)], clocks.wall, view=view(sandbox(A)))]


def test_a_forward_step_of_the_wall_clock_does_not_end_the_grace(tmp_path: Path) -> None:
    clocks = Clocks()
    with Ledger(tmp_path / "ledger.db") as ledger:
        assert due(ledger, clocks) == []
        assert ledger.running_orphans()[A] == OrphanSeen(first_seen=T0, pod_uid="u-a",
                                                         created_at=sandbox(A).created_at.isoformat(),  # type: ignore[union-attr]
                                                         boot_id="boot-1", boottime=1000.0)
        clocks.tick(60)
        clocks.wall += DAY  # NTP, an operator, a wrong RTC corrected: the wall clock jumps a day ahead
        assert due(ledger, clocks) == []
    with Ledger(tmp_path / "ledger.db") as ledger:  # and after a restart, from the ledger
        clocks.tick(GRACE - 61)
        assert due(ledger, clocks) == []
        clocks.tick(1)
        assert due(ledger, clocks) == [A]
        assert ledger.running_orphans()[A].first_seen == T0  # the record was not rewritten


def test_a_backward_step_does_not_start_the_grace_over_in_the_same_boot(tmp_path: Path) -> None:
    clocks = Clocks()
    with Ledger(tmp_path / "ledger.db") as ledger:
        due(ledger, clocks)
        clocks.tick(GRACE)
        clocks.wall -= DAY
        with capture_logs() as logs:
            assert due(ledger, clocks) == [A]
        assert not any("future" in e["event"] for e in logs), logs


def test_in_another_boot_the_wall_clock_counts_and_a_future_first_sight_is_now(tmp_path: Path) -> None:
    clocks = Clocks()
    with Ledger(tmp_path / "ledger.db") as ledger:
        due(ledger, clocks)
        # A reboot: the boot clock starts over (its 1000 s would be nonsense against the first sight's).
        clocks.boot_id, clocks.boot = "boot-2", 5.0
        clocks.tick(GRACE - 1)
        assert due(ledger, clocks) == []
        clocks.tick(1)
        assert due(ledger, clocks) == [A]
        # The wall clock stepped back before the first sight: counted from now, then on this boot's clock.
        clocks.wall = T0 - DAY
        with capture_logs() as logs:
            assert due(ledger, clocks) == []
        assert any("future" in e["event"] and e["clock"] == "wall" for e in logs), logs
        assert ledger.running_orphans()[A].boot_id == "boot-2"
        clocks.tick(30)
        clocks.wall += DAY
        assert due(ledger, clocks) == []


def test_without_a_boot_clock_the_wall_clock_counts(tmp_path: Path) -> None:
    clocks = Clocks()
    with Ledger(tmp_path / "ledger.db") as ledger:
        due(ledger, clocks)
        clocks.boot_id = None  # the boot id cannot be read now
        clocks.tick(GRACE)
        assert due(ledger, clocks) == [A]
        clocks.boot_id = "boot-1"
        clocks.wall += DAY
        assert due(ledger, clocks) == [A]  # the record kept its boot clock reading


def test_a_boot_clock_reading_before_the_first_sights_starts_over(tmp_path: Path) -> None:
    """The same boot id with an earlier CLOCK_BOOTTIME cannot happen on one machine: counted from now."""
    clocks = Clocks()
    with Ledger(tmp_path / "ledger.db") as ledger:
        due(ledger, clocks)
        clocks.boot -= 10
        clocks.wall += GRACE
        with capture_logs() as logs:
            assert due(ledger, clocks) == []
        assert any("future" in e["event"] and e["clock"] == "boot" for e in logs), logs
        assert ledger.running_orphans()[A].boottime == clocks.boot


def _set_version(path: Path, version: int) -> None:
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    db.commit()
    db.close()


def test_a_schema_3_ledger_gains_the_boot_columns_and_its_rows_count_on_the_wall_clock(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path):
        pass
    db = sqlite3.connect(path)  # the table as schema 3 made it, with a row it wrote
    db.execute("DROP TABLE running_orphans")
    db.execute("CREATE TABLE running_orphans (sandbox_id TEXT PRIMARY KEY, pod_uid TEXT NOT NULL,"
               " created_at TEXT NOT NULL, first_seen REAL NOT NULL)")
    db.execute("INSERT INTO running_orphans VALUES (?, 'u-a', ?, ?)",
               (A, sandbox(A).created_at.isoformat(), T0))  # type: ignore[union-attr]
    db.commit()
    db.close()
    _set_version(path, 3)
    clocks = Clocks()
    with Ledger(path) as ledger:
        assert ledger.schema_version == SCHEMA_VERSION
        assert ledger.running_orphans()[A].boot_id == "" and ledger.running_orphans()[A].boottime is None
        clocks.tick(GRACE)
        assert due(ledger, clocks) == [A]


def test_the_migration_runs_again_over_columns_it_added(tmp_path: Path) -> None:
    """The downgrade path (docs/runbook.md): the version set back to 3 by hand, a schema-3 nodegc's rows,
    then this nodegc again."""
    path = tmp_path / "ledger.db"
    clocks = Clocks()
    with Ledger(path) as ledger:
        due(ledger, clocks)
    _set_version(path, 3)
    db = sqlite3.connect(path)  # what a schema-3 nodegc writes: the four columns it knows
    db.execute("INSERT OR REPLACE INTO running_orphans (sandbox_id, pod_uid, created_at, first_seen)"
               " VALUES ('b', 'u-b', '', ?)", (T0,))
    db.commit()
    db.close()
    with Ledger(path) as ledger:
        rows = ledger.running_orphans()
        assert (rows[A].boot_id, rows[A].boottime) == ("boot-1", 1000.0)
        assert (rows["b"].boot_id, rows["b"].boottime) == ("", None)


def test_read_boot_time(tmp_path: Path) -> None:
    assert read_boot_time(tmp_path) is None  # no boot id
    (tmp_path / "sys/kernel/random").mkdir(parents=True)
    (tmp_path / "sys/kernel/random/boot_id").write_bytes(b"\xff\x00")
    assert read_boot_time(tmp_path) is None  # not a boot id
    (tmp_path / "sys/kernel/random/boot_id").write_text("15ed12a6-6a15-41ec-9077-ab0446704aaf\n")
    reading = read_boot_time(tmp_path)
    assert reading is not None and reading.boot_id == "15ed12a6-6a15-41ec-9077-ab0446704aaf"
    assert reading.seconds > 0
