"""While the ledger cannot be read or written, running orphans are counted in memory, and what memory
learns then is the truth: a record forgotten (the pod came back in the API) or begun. When the ledger
answered again, its old rows were taken instead: a record forgotten during the outage came back with its
old first-seen time, so the next list missing that pod made the sandbox due at once (absent for one scan,
not for the grace)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from nodegc.engine.orphans import RunningOrphans
from nodegc.ledger.store import Ledger, LedgerError, OrphanSeen
from nodegc.model.findings import FindingClass
from tests.unit.test_running_orphans import GRACE, NO_BOOT_CLOCK, T0, A, B, finding, sandbox, view


class Outage:
    """The real ledger, unreachable while `down` (a full disk, an I/O error)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.down = False

    def running_orphans(self) -> dict[str, OrphanSeen]:
        if self.down:
            raise LedgerError("disk I/O error")
        return self.ledger.running_orphans()

    def save_running_orphans(self, *, seen: dict[str, OrphanSeen], forget: Iterable[str] = ()) -> None:
        if self.down:
            raise LedgerError("disk I/O error")
        self.ledger.save_running_orphans(seen=seen, forget=forget)


def test_a_record_forgotten_during_an_outage_does_not_come_back(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        store = Outage(ledger)
        orphans = RunningOrphans(grace_seconds=GRACE, store=store, boot_clock=NO_BOOT_CLOCK)
        orphans.observe([finding(A)], T0, view=view(sandbox(A)))
        store.down = True
        # The pod is back in the API: no orphan any more (the ledger cannot be told).
        orphans.observe([finding(A, FindingClass.IN_USE)], T0 + 60, view=view(sandbox(A)))
        store.down = False
        # Missing from one list, a grace after the first sighting: absent for one scan only.
        assert orphans.observe([finding(A)], T0 + GRACE, view=view(sandbox(A))) == []
        assert ledger.running_orphans()[A].first_seen == T0 + GRACE


def test_a_record_begun_during_an_outage_is_written_when_the_ledger_answers(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        store = Outage(ledger)
        orphans = RunningOrphans(grace_seconds=GRACE, store=store, boot_clock=NO_BOOT_CLOCK)
        store.down = True
        orphans.observe([finding(B, uid="u-b")], T0, view=view(sandbox(B, "u-b")))
        store.down = False
        assert orphans.observe([finding(B, uid="u-b")], T0 + 60, view=view(sandbox(B, "u-b"))) == []
        assert ledger.running_orphans()[B].first_seen == T0
        assert [f.id for f in orphans.observe([finding(B, uid="u-b")], T0 + GRACE,
                                              view=view(sandbox(B, "u-b")))] == [B]
