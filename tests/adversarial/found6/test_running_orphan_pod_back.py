"""A running orphan's first-seen time is forgotten only on a complete runtime list. But the runtime's list
need not be complete to show that the orphan state ended: a sandbox finding `in_use` says its pod is in
the API again (the earlier absence was a list that missed it). Kept through such scans (a list missing
some other running pod's sandbox, as after containerd lost its metadata and before the kubelet recreated
everything), the old first-seen time made the sandbox due at once the next time the pod was missing from
one list: its pod was never absent for the grace, yet it was reported (and, opted in, stopped)."""

from __future__ import annotations

from pathlib import Path

from nodegc.ledger.store import Ledger
from nodegc.model.findings import FindingClass
from tests.unit.test_running_orphans import GRACE, T0, A, finding, sandbox, tracker, view


def test_a_pod_seen_again_in_the_api_restarts_the_grace_even_on_an_incomplete_list(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        assert tracker(ledger).observe([finding(A)], T0, view=view(sandbox(A))) == []  # a list that missed it
        # Its pod is in the API again; the runtime's list misses another running pod's sandbox.
        assert tracker(ledger).observe([finding(A, FindingClass.IN_USE)], T0 + 60, view=view(sandbox(A)),
                                       complete=False) == []
        assert A not in ledger.running_orphans()
        # Missing from one list again, a grace after the first: absent for one scan, not for the grace.
        assert tracker(ledger).observe([finding(A)], T0 + GRACE, view=view(sandbox(A))) == []
        assert ledger.running_orphans()[A].first_seen == T0 + GRACE


def test_an_unreachable_runtime_still_keeps_the_record(tmp_path: Path) -> None:
    """No sandbox finding at all says nothing about the orphan: the record stays (what was there)."""
    with Ledger(tmp_path / "ledger.db") as ledger:
        tracker(ledger).observe([finding(A)], T0, view=view(sandbox(A)))
        assert tracker(ledger).observe([], T0 + 60, view=view(reachable=False)) == []
        assert ledger.running_orphans()[A].first_seen == T0
