"""The ledger keeps each item's scans in a row, first-seen time and mark across restarts, and did not say
which node it was kept on. A ledger carried to another node (a state directory on a persistent disk
re-attached to a VM re-created under another name, an image of a node's disk, a hostPath shared by mistake)
was read as that node's own history: a resource of the same identity there (the same pod CIDR gives the same
addresses and chain names; the same netns and pod directory names) skipped its K scans and its grace, marked
or half-reclaimed on the other node's word. The ledger now records its node; one recorded for another node
is taken over: its open items released with a reason naming that node, its running orphans forgotten, and
everything starts again from this node's own scans."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from nodegc.engine.cycle import CycleReport, Engine, EngineSettings, LedgerTakeover
from nodegc.ledger.store import Ledger
from nodegc.model.items import Item, Phase
from nodegc.model.pods import DesiredState
from nodegc.model.resources import Inventory, Kind
from nodegc.observe.metrics import Metrics
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy, Transition
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.adversarial.found11.test_streaks_across_unknown import INTERVAL, Clock, Source
from tests.unit.factories import pod_dir
from tests.unit.test_running_orphans import GRACE as ORPHAN_GRACE
from tests.unit.test_running_orphans import T0, A, finding, sandbox, tracker, view

K, GRACE = 3, 90.0
"""Marked at the 4th sighting: the 3rd makes K, the grace (3 intervals) is met only at the 4th."""


class NodeSource(Source):
    def __init__(self, clock: Clock, node: str) -> None:
        super().__init__(clock)
        self.node = node
        self.then: list[str] = []
        """The nodes of the next fetches, before `node` again."""

    def fetch(self) -> DesiredState:
        return dataclasses.replace(super().fetch(), node=self.then.pop(0) if self.then else self.node)


class Node:
    """One agent process on `node` over the ledger file `db`, the same residue present (a dead pod's
    directory beside a live pod's); cycles 30 s apart on the shared clock."""

    def __init__(self, clock: Clock, db: Path, node: str) -> None:
        self.clock, self.db = clock, db
        self.source = NodeSource(clock, node)
        self.metrics = Metrics()
        self.executor = DryRunExecutor()
        self.acted: list[int] = []
        """How many reclaim steps the executor was given, after each cycle."""
        self.reports: list[CycleReport] = []

    def cycles(self, n: int) -> list[Item | None]:
        """The dead pod directory's item after each cycle (and each cycle's report in `reports`)."""

        def scan(_roots: Roots, _opts: ScanOptions) -> Inventory:
            return Inventory(taken_at=self.clock.at(), pod_dirs=(pod_dir("u-web"), pod_dir("u-dead")))

        out: list[Item | None] = []
        with Ledger(self.db) as ledger:
            engine = Engine(roots=Roots(), source=self.source, ledger=ledger,
                            executor=self.executor, metrics=self.metrics, clock=self.clock, scanner=scan,
                            settings=EngineSettings(phases=PhasePolicy(consecutive_scans=K, grace_seconds=GRACE),
                                                    correlation=CorrelationPolicy(min_age_seconds=0)),
                            boot_clock=lambda: None)
            for _ in range(n):
                self.reports.append(engine.cycle())
                out.append(_dead(ledger))
                self.acted.append(len(self.executor.actions))
                self.clock.t += INTERVAL
        return out

    def taken_over(self) -> float | None:
        return self.metrics.registry.get_sample_value("nodegc_ledger_taken_over_total")


def _dead(ledger: Ledger) -> Item | None:
    return next((i for i in ledger.items().values() if i.kind is Kind.POD_DIR and "u-dead" in i.resource_id), None)


def _node_a_marked(clock: Clock, db: Path) -> Item:
    """Node A's ledger: the dead pod directory seen over K scans and past the grace, marked (and, in dry run,
    left marked: a reclaim candidate at every cycle)."""
    a = Node(clock, db, "node-a")
    item = a.cycles(4)[-1]
    assert item is not None and item.phase is Phase.MARKED and a.executor.actions
    return item


@pytest.mark.parametrize("left", [Phase.MARKED, Phase.TERMINATING, Phase.FAILED])
def test_node_b_reclaims_nothing_before_its_own_k_scans_and_grace(tmp_path: Path, left: Phase) -> None:
    clock, db = Clock(), tmp_path / "ledger.db"
    item = _node_a_marked(clock, db)
    if left is not Phase.MARKED:  # a checkpoint a crash interrupted; a failed step whose backoff has passed
        with Ledger(db) as ledger:
            ledger.apply([Transition(dataclasses.replace(item, phase=left, next_attempt=0.0), item.phase,
                                     "as node A left it")], now=clock.t)
    b = Node(clock, db, "node-b")
    with capture_logs() as logs:
        seen = b.cycles(4)
    assert b.acted == [0, 0, 0, 1], b.executor.actions  # the first step at B's own mark, not before
    assert [i.phase if i else None for i in seen] == [Phase.DETECTED] * 3 + [Phase.MARKED]
    assert [i.orphan_count if i else None for i in seen] == [1, 2, 3, 4]
    assert {i.first_seen if i else None for i in seen} == {clock.t - 4 * INTERVAL}  # B's first sighting
    with Ledger(db) as ledger:
        reasons = [h.reason for h in ledger.history(key=item.key)]
        assert ledger.recorded_node() == "node-b"
    assert any("node 'node-a'" in r and r.startswith("the ledger was") for r in reasons), reasons
    warnings = [e for e in logs if e["log_level"] == "warning" and "another node" in e["event"]]
    assert [(e["recorded_node"], e["node"], e["items"]) for e in warnings] == [("node-a", "node-b", 1)]
    assert b.taken_over() == 1
    # The cycle that took it over says so in its report (what a one-shot command prints), and only that one.
    assert [r.ledger_taken_over for r in b.reports] == [
        LedgerTakeover(recorded="node-a", node="node-b", released=1, ledger=str(db)), None, None, None]


def test_the_same_node_reopening_keeps_its_history(tmp_path: Path) -> None:
    clock, db = Clock(), tmp_path / "ledger.db"
    a = Node(clock, db, "node-a")
    assert [i.orphan_count for i in a.cycles(2) if i] == [1, 2]
    again = Node(clock, db, "node-a")
    seen = again.cycles(2)
    assert [i.phase if i else None for i in seen] == [Phase.DETECTED, Phase.MARKED]  # the streak went on
    assert again.taken_over() == 0 and not any(r.ledger_taken_over for r in again.reports)
    with Ledger(db) as ledger:
        assert ledger.recorded_node() == "node-a"
        assert not any(h.to_phase == "released" for h in ledger.history())


def test_a_ledger_written_before_the_node_was_recorded_is_this_nodes(tmp_path: Path) -> None:
    """Schema 4 had no node: its history was written on the node it is found on (as far as anything
    knows), and it is kept; the node is recorded from then on."""
    clock, db = Clock(), tmp_path / "ledger.db"
    Node(clock, db, "node-a").cycles(2)
    conn = sqlite3.connect(db)  # as a schema-4 nodegc left it
    conn.execute("DELETE FROM meta WHERE key = 'node'")
    conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with Ledger(db) as ledger:
        assert ledger.recorded_node() is None
    b = Node(clock, db, "node-b")
    seen = b.cycles(2)
    assert [i.phase if i else None for i in seen] == [Phase.DETECTED, Phase.MARKED]
    assert b.taken_over() == 0
    with Ledger(db) as ledger:
        assert ledger.recorded_node() == "node-b"


def test_the_running_orphans_first_seen_times_of_another_node_are_forgotten(tmp_path: Path) -> None:
    """A running orphan's grace (a READY sandbox whose pod the API no longer shows) is counted from a
    first-seen time in the ledger, by sandbox id: a disk image carries the runtime's state and its ids too."""
    clock, db = Clock(), tmp_path / "ledger.db"
    Node(clock, db, "node-a").cycles(1)
    with Ledger(db) as ledger:
        assert tracker(ledger).observe([finding(A)], T0, view=view(sandbox(A))) == []
    Node(clock, db, "node-b").cycles(1)
    with Ledger(db) as ledger:
        assert ledger.running_orphans() == {}
        # On node A's first-seen time its grace would be over now.
        assert tracker(ledger).observe([finding(A)], T0 + ORPHAN_GRACE, view=view(sandbox(A))) == []
        assert ledger.running_orphans()[A].first_seen == T0 + ORPHAN_GRACE


def test_a_desired_state_of_another_node_at_terminate_acts_on_nothing(tmp_path: Path) -> None:
    """One process whose desired state names another node from one fetch to the next (a snapshot file
    replaced by another node's, its node inferred): the candidates taken before are the other node's."""
    clock, db = Clock(), tmp_path / "ledger.db"
    a = Node(clock, db, "node-a")
    a.cycles(3)
    a.source.then = ["node-a", "node-b"]  # the cycle's detect, then terminate's fresh read
    seen = a.cycles(1)
    assert a.acted == [0, 0, 0, 0], a.executor.actions
    assert seen[0] is not None and seen[0].phase is Phase.RELEASED
    assert a.taken_over() == 1
