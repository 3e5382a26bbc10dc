from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nodegc.ledger.store import Ledger, LedgerLocked
from nodegc.model.findings import Finding, FindingClass, Owner
from nodegc.model.items import Item, Phase
from nodegc.model.pods import OwnerState
from nodegc.model.resources import Kind, ReadProblem
from nodegc.planning.phases import Blind, PhasePolicy, after_attempt, due, reconcile

POLICY = PhasePolicy(consecutive_scans=3, grace_seconds=120)
KEY = "ip_reservation:net/10.0.0.2"
IDENT = (("container_id", "c1"), ("inode", "7"))


def finding(cls: FindingClass = FindingClass.LEAKED_IP) -> Finding:
    return Finding(cls, Kind.IP_RESERVATION, "net/10.0.0.2", Owner(uid="u1", namespace="d", name="p"),
                   OwnerState.ABSENT, ("test",))


def scan(items: dict[str, Item], now: float, *, cls: FindingClass = FindingClass.LEAKED_IP,
         ident: tuple[tuple[str, str], ...] = IDENT, present: bool = True,
         policy: PhasePolicy = POLICY, problems: tuple[ReadProblem, ...] = ()) -> dict[str, Item]:
    found = [finding(cls)] if present else []
    for t in reconcile(items, found, {KEY: ident}, now=now, policy=policy, blind=Blind(problems)):
        items = {**items, t.item.key: t.item}
    return items


def test_marked_only_after_k_scans_and_grace() -> None:
    items: dict[str, Item] = {}
    for now in (0, 30, 60):
        items = scan(items, now)
        assert items[KEY].phase is Phase.DETECTED
    assert items[KEY].orphan_count == 3
    items = scan(items, 130)
    assert items[KEY].phase is Phase.MARKED
    assert items[KEY].first_seen == 0


def test_one_shot_policy_marks_on_first_sight() -> None:
    items = scan({}, 0, policy=PhasePolicy(consecutive_scans=1, grace_seconds=0))
    assert items[KEY].phase is Phase.MARKED


def test_identity_change_restarts_detection() -> None:
    items = scan(scan(scan({}, 0), 100), 200)
    assert items[KEY].phase is Phase.MARKED
    items = scan(items, 300, ident=(("container_id", "c2"), ("inode", "9")))
    assert items[KEY].phase is Phase.DETECTED and items[KEY].first_seen == 300 and items[KEY].orphan_count == 1


def test_back_in_use_is_released_and_absence_closes() -> None:
    items = scan(scan({}, 0), 10, cls=FindingClass.IN_USE)
    assert items[KEY].phase is Phase.RELEASED
    items = scan(scan({}, 0), 10, present=False)
    assert items[KEY].phase is Phase.CLOSED


def test_an_item_a_read_problem_may_hide_never_closes() -> None:
    for path in ("/cni/networks/net/10.0.0.2", "/cni/networks/net", "/cni/networks", "iptables-save"):
        problem = ReadProblem(Kind.IP_RESERVATION, path, "unreadable")
        items = scan(scan({}, 0), 10, present=False, problems=(problem,))
        assert items[KEY].phase is Phase.DETECTED, path


def test_a_junk_file_beside_it_does_not_hide_an_item() -> None:
    """A non-UTF-8 name or a symlink in the same directory says nothing about the other files."""
    for path in ("/cni/networks/net/10.0.0.9", "/cni/networks/other", "/cni/networks/other/10.0.0.2"):
        problem = ReadProblem(Kind.IP_RESERVATION, path, "not an IP address")
        items = scan(scan({}, 0), 10, present=False, problems=(problem,))
        assert items[KEY].phase is Phase.CLOSED, path
    entry = dataclasses.replace(scan({}, 0)[KEY], kind=Kind.CNI_CACHE, resource_id="/cni/results/net-c1-eth0")
    assert not Blind((ReadProblem(Kind.CNI_CACHE, "/cni/results/net-\udcff-eth0", "not UTF-8"),)).hides(entry)
    assert Blind((ReadProblem(Kind.CNI_CACHE, "/cni/results", "cannot list"),)).hides(entry)
    assert Blind((ReadProblem(Kind.CNI_CACHE, "/cni/results/net-c1-eth0", "truncated"),)).hides(entry)


def test_attempt_outcomes_and_backoff() -> None:
    item = dataclasses.replace(scan({}, 0)[KEY], phase=Phase.TERMINATING)
    assert after_attempt(item, ok=True, changed=False, detail="", lazy=True, now=5, policy=POLICY).item.lazy
    failed = after_attempt(item, ok=False, changed=False, detail="boom", lazy=False, now=5, policy=POLICY).item
    assert failed.phase is Phase.FAILED and failed.attempts == 1 and failed.next_attempt == 15
    again = after_attempt(failed, ok=False, changed=False, detail="boom", lazy=False, now=20, policy=POLICY).item
    assert again.next_attempt == 40
    assert due([failed], 14) == [] and due([failed], 15) == [failed]
    changed = after_attempt(item, ok=False, changed=True, detail="x", lazy=False, now=5, policy=POLICY).item
    assert changed.phase is Phase.DETECTED
    skipped = after_attempt(item, ok=False, changed=False, detail="dry", lazy=False, now=5, policy=POLICY,
                            skipped=True).item
    assert skipped.phase is Phase.MARKED
    assert PhasePolicy(backoff_base=10, backoff_cap=60).backoff(10) == 60


def test_ledger_persists_first_seen_and_history(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        ledger.apply(reconcile({}, [finding()], {KEY: IDENT}, now=0, policy=POLICY), now=0)
        with pytest.raises(LedgerLocked):
            Ledger(path)
    with Ledger(path) as ledger:  # a restart: first-seen and the count survive
        items = ledger.items()
        assert items[KEY].first_seen == 0 and items[KEY].identity == IDENT
        ledger.apply(reconcile(items, [finding()], {KEY: IDENT}, now=200, policy=PhasePolicy(2, 120)), now=200)
        assert ledger.get(KEY) is not None and ledger.get(KEY).phase is Phase.MARKED  # type: ignore[union-attr]
        rows = ledger.history(key="10.0.0.2")
        assert [(r.from_phase, r.to_phase) for r in rows] == [(None, "detected"), ("detected", "marked")]
        assert rows[0].owner == "d/p u1"
