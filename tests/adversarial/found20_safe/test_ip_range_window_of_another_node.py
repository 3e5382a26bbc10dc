"""The IP range forecast's window (`<state-dir>/ip-ranges.json`, restored at the agent's start) did not say
which node it was taken on. Carried to another node with the state directory, as the ledger was, its samples
(that node's reservations, leaks and peaks, judged against that node's pods) fed this node's forecast: the
rates, the time to exhaustion, the IPRangePressure condition and the order of reclaim. The window now records
its node; one recorded for another node is started afresh at the first usable desired state, with a log
line, and one without a node (written before the node was recorded) is taken as this node's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from nodegc.agent import RANGES_FILE, RangeWindowFile
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.ipranges import RangeStatus
from nodegc.model.resources import Inventory
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.ipranges import RangeTracker
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.adversarial.found11.test_streaks_across_unknown import INTERVAL, Clock
from tests.adversarial.found20_safe.test_ledger_of_another_node import NodeSource
from tests.unit.factories import pod_dir, reservation


class Agent:
    """One agent process on `node` with the state directory `state`: the window restored from its file at start
    and saved at exit, as `nodegc agent` does; the live pod's directory, and one more reservation at each scan
    (every cycle allocates)."""

    def __init__(self, clock: Clock, state: Path, node: str) -> None:
        self.clock, self.state = clock, state
        self.source = NodeSource(clock, node)
        self.reserved = 0

    def cycles(self, n: int) -> list[RangeStatus]:
        def scan(_roots: Roots, _opts: ScanOptions) -> Inventory:
            self.reserved += 1
            return Inventory(taken_at=self.clock.at(), pod_dirs=(pod_dir("u-web"),), ip_reservations=tuple(
                reservation(f"10.0.0.{i + 2}", f"c{i}") for i in range(self.reserved)))

        out: list[RangeStatus] = []
        with Ledger(self.state / "ledger.db") as ledger:
            engine = Engine(roots=Roots(), source=self.source, ledger=ledger, executor=DryRunExecutor(),
                            clock=self.clock, scanner=scan, boot_clock=lambda: None,
                            settings=EngineSettings(correlation=CorrelationPolicy(min_age_seconds=0)))
            window = RangeWindowFile(self.state / RANGES_FILE, engine.ip_ranges, clock=self.clock)
            window.load()
            for _ in range(n):
                (status,) = engine.cycle().ranges
                out.append(status)
                self.clock.t += INTERVAL
            window.save(force=True)
        return out


def _file(state: Path) -> dict[str, object]:
    doc = json.loads((state / RANGES_FILE).read_text())
    assert isinstance(doc, dict)
    return doc


def _samples(doc: dict[str, object]) -> int:
    series = doc["series"]
    assert isinstance(series, list)
    return sum(len(s["samples"]) for s in series)


def _node_a(clock: Clock, state: Path) -> None:
    statuses = Agent(clock, state, "node-a").cycles(6)
    assert statuses[-1].forecast.samples == 6 and statuses[-1].forecast.allocation_rate > 0
    assert _file(state)["node"] == "node-a" and _samples(_file(state)) == 6


def test_a_window_of_another_node_is_started_afresh(tmp_path: Path) -> None:
    clock = Clock()
    _node_a(clock, tmp_path)
    with capture_logs() as logs:
        (status,) = Agent(clock, tmp_path, "node-b").cycles(1)
    # Only node B's own sample: none of node A's allocations, leaks or peaks (the old code: 7 samples).
    assert status.forecast.samples == 1 and status.forecast.allocation_rate == 0.0
    warnings = [e for e in logs if e["log_level"] == "warning" and "IP range window" in e["event"]]
    assert [(e["event"], e["recorded_node"], e["node"], e["samples"]) for e in warnings] == [
        ("IP range window of another node started afresh", "node-a", "node-b", 6)]
    assert _file(tmp_path)["node"] == "node-b" and _samples(_file(tmp_path)) == 1


def test_the_same_node_restarting_keeps_its_window(tmp_path: Path) -> None:
    clock = Clock()
    _node_a(clock, tmp_path)
    with capture_logs() as logs:
        (status,) = Agent(clock, tmp_path, "node-a").cycles(1)
    assert status.forecast.samples == 7
    assert not [e for e in logs if e["log_level"] == "warning" and "IP range window" in e["event"]]


def test_a_window_written_before_the_node_was_recorded_is_this_nodes(tmp_path: Path) -> None:
    clock = Clock()
    _node_a(clock, tmp_path)
    doc = _file(tmp_path)
    del doc["node"]
    (tmp_path / RANGES_FILE).write_text(json.dumps(doc))
    (status,) = Agent(clock, tmp_path, "node-b").cycles(1)
    assert status.forecast.samples == 7
    assert _file(tmp_path)["node"] == "node-b" and _samples(_file(tmp_path)) == 7


@pytest.mark.parametrize("node", [123, "", ["node-a"]])
def test_a_node_that_is_not_a_name_restores_nothing(tmp_path: Path, node: object) -> None:
    clock = Clock()
    _node_a(clock, tmp_path)
    doc = {**_file(tmp_path), "node": node}
    tracker = RangeTracker()
    assert tracker.restore(doc, clock.t) == 0 and tracker.node is None
