"""A cycle whose watched view cannot be proven current for acting (`view_not_current`) folds its scan into the
ledger in the safe direction only: an item no longer residue is released, one whose resource is gone is
closed, and nothing moves toward its mark. "K scans in a row" never spans a refusal: a detected item's count
drops to 0, and the next sighting on a proven view counts 1 and starts its grace again."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from nodegc.desired.source import SourceError
from nodegc.engine.cycle import CycleReport, Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.items import Item, Phase
from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory, PodDir
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.unit.factories import NOW, pod, pod_dir

DB = pod("db", "u-db")
WEB = pod("web", "u-web")
WEB_KEY = "pod_dir:/kubelet/pods/u-web"
T0 = NOW.timestamp()


class Watch:
    """A watched view: `fetch()` shows `pods`; `proven()` shows `proven_pods` (default: the same) unless
    `refuse` is set, as a watch that has not reached the node Lease."""

    name = "watch"

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.pods: tuple[Pod, ...] = (DB,)
        self.proven_pods: tuple[Pod, ...] | None = None
        self.refuse = False
        self.proofs = 0

    def _state(self, pods: tuple[Pod, ...]) -> DesiredState:
        return DesiredState(node="n1", pods=pods, source="watch",
                            fetched_at=datetime.fromtimestamp(self.clock[0], UTC))

    def fetch(self) -> DesiredState:
        return self._state(self.pods)

    def proven(self, *, max_age_seconds: float) -> DesiredState:
        self.proofs += 1
        if self.refuse:
            raise SourceError("the pod cache is at resourceVersion 10, behind the witness at 12")
        return self._state(self.pods if self.proven_pods is None else self.proven_pods)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return None


class Node:
    def __init__(self, *dirs: PodDir) -> None:
        self.dirs = list(dirs)

    def scan(self, _roots: Roots, _options: ScanOptions) -> Inventory:
        return Inventory(taken_at=NOW, pod_dirs=tuple(self.dirs))


class Agent:
    def __init__(self, node: Node, *, k: int = 2, grace: float = 0.0) -> None:
        self.clock = [T0]
        self.source = Watch(self.clock)
        self.executor = DryRunExecutor()
        self.ledger = Ledger(":memory:")
        self.engine = Engine(
            roots=Roots(), source=self.source, ledger=self.ledger, executor=self.executor,
            settings=EngineSettings(phases=PhasePolicy(consecutive_scans=k, grace_seconds=grace),
                                    correlation=CorrelationPolicy(min_age_seconds=0)),
            clock=lambda: self.clock[0], scanner=node.scan)

    def cycle(self, *, after: float = 30.0) -> CycleReport:
        self.clock[0] += after
        return self.engine.cycle()

    def item(self, key: str = WEB_KEY) -> Item | None:
        return self.ledger.get(key)

    def acted_on(self, uid: str) -> bool:
        return any(uid in action for action in self.executor.actions)


@pytest.fixture
def agent() -> Agent:
    # u-dead's directory is residue all along: every cycle has something to act on, so every cycle proves.
    return Agent(Node(pod_dir("u-db"), pod_dir("u-web"), pod_dir("u-dead")))


def blocked(report: CycleReport) -> list[str]:
    return [b.split(":", 1)[0] for b in report.blocked]


def test_a_release_seen_while_the_proof_is_refused_is_written(agent: Agent) -> None:
    """Residue seen on a proven view; the proof is then refused for a few cycles while the pod is back in
    the (lagging) view: the release is written at once, and the next proven sighting starts from 1."""
    agent.cycle()
    assert (item := agent.item()) is not None and item.phase is Phase.DETECTED and item.orphan_count == 1

    agent.source.refuse = True
    agent.source.pods = (DB, WEB)
    for _ in range(3):
        assert blocked(agent.cycle()) == ["view_not_current"]
        assert (item := agent.item()) is not None and item.phase is Phase.RELEASED, item

    agent.source.refuse = False
    agent.source.pods = (DB,)
    report = agent.cycle()
    assert report.blocked == []
    item = agent.item()
    assert item is not None and item.phase is Phase.DETECTED and item.orphan_count == 1, item
    assert not agent.acted_on("u-web"), "K=2 scans in a row cannot span the refusal"
    report = agent.cycle()
    assert (item := agent.item()) is not None and item.phase is Phase.MARKED
    assert agent.acted_on("u-web")


def test_a_streak_does_not_span_a_refusal_even_when_the_view_still_shows_residue(agent: Agent) -> None:
    agent.cycle()
    agent.source.refuse = True
    for _ in range(3):
        assert blocked(agent.cycle()) == ["view_not_current"]
        item = agent.item()
        assert item is not None and item.phase is Phase.DETECTED and item.orphan_count == 0, item
    assert agent.executor.actions == []

    agent.source.refuse = False
    agent.cycle()
    item = agent.item()
    assert item is not None and item.phase is Phase.DETECTED and item.orphan_count == 1
    assert item.first_seen == agent.clock[0], "the grace starts again at the first proven sighting"
    assert not agent.acted_on("u-web")


def test_the_grace_does_not_run_through_a_refusal() -> None:
    agent = Agent(Node(pod_dir("u-db"), pod_dir("u-web")), k=1, grace=100.0)
    agent.cycle()
    agent.source.refuse = True
    agent.cycle(after=200.0)  # longer than the grace, but unproven
    agent.source.refuse = False
    agent.cycle(after=1.0)
    assert (item := agent.item()) is not None and item.phase is Phase.DETECTED, item
    agent.cycle(after=100.0)
    assert (item := agent.item()) is not None and item.phase is Phase.MARKED, item


def test_nothing_is_begun_on_an_unproven_view(agent: Agent) -> None:
    agent.source.refuse = True
    assert blocked(agent.cycle()) == ["view_not_current"]
    assert agent.ledger.items(active_only=True) == {}


def test_a_gone_resource_is_closed_while_the_proof_is_refused(agent: Agent) -> None:
    agent.cycle()
    agent.source.refuse = True
    agent.engine.scanner = Node(pod_dir("u-db"), pod_dir("u-other"), pod_dir("u-dead")).scan  # u-web's is gone
    agent.cycle()
    assert (item := agent.item()) is not None and item.phase is Phase.CLOSED, item
    assert agent.ledger.get("pod_dir:/kubelet/pods/u-other") is None


def test_a_marked_item_is_released_on_a_refused_view_but_never_advanced(agent: Agent) -> None:
    agent.engine.executor = DryRunExecutor()
    agent.cycle()
    agent.source.refuse = True
    agent.cycle()
    assert (item := agent.item()) is not None and item.orphan_count == 0
    agent.source.refuse = False
    agent.cycle()
    agent.cycle()
    assert (item := agent.item()) is not None and item.phase is Phase.MARKED
    agent.source.refuse = True
    report = agent.cycle()
    assert blocked(report) == ["view_not_current"]
    assert (item := agent.item()) is not None and item.phase is Phase.MARKED, "not sent forward nor back"
    agent.source.pods = (DB, WEB)
    agent.cycle()
    assert (item := agent.item()) is not None and item.phase is Phase.RELEASED


def test_an_identity_change_on_a_refused_view_begins_at_zero(agent: Agent) -> None:
    agent.cycle()
    agent.source.refuse = True
    agent.engine.scanner = Node(pod_dir("u-db"), dataclasses.replace(pod_dir("u-web"), inode=99),
                                pod_dir("u-dead")).scan
    agent.cycle()
    item = agent.item()
    assert item is not None and item.phase is Phase.DETECTED and item.orphan_count == 0
    assert item.identity == (("inode", "99"),)
