"""No streak spans a cycle that could not act on its desired state (a refused proof, a stale or unreadable
pod list). A watch whose proofs come only from lists (a quiet cluster whose bookmarks do not advance, a
watch cache lagging behind the node Lease) is current for about --max-desired-age (120 s) after each
resync's list: four cycles of 30 s, where K=3 scans in a row over a 120 s grace need five. Such a node
marked nothing, ever. A cycle with something to act on whose view will be too old at the next cycle now
asks the watch for a list (proven by its own node Lease read, as every list is), so proofs chain: nothing
is weakened, the node is cleaned."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nodegc.desired.reflector import PodReflector
from nodegc.desired.source import SourceError
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.items import Phase
from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory, Kind
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.adversarial.found9.conftest import pod as pod_object
from tests.api.fakeapi import FakeKubeAPI
from tests.unit.factories import NOW, pod, pod_dir

WEB = pod("web", "u-web")
INTERVAL, RESYNC, MAX_AGE = 30.0, 300.0, 120.0
LEASE_LAG = 5.0
"""A list is proven as of the node Lease renewal read before it: the kubelet renews every 10 s."""


class Clock:
    def __init__(self) -> None:
        self.t = NOW.timestamp()

    def __call__(self) -> float:
        return self.t

    def at(self, t: float | None = None) -> datetime:
        return datetime.fromtimestamp(self.t if t is None else t, UTC)


class QuietWatch:
    """A watch on a quiet cluster: only a list moves its freshness and proves it (as of the Lease read
    before it), a list every resync."""

    name = "kube"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.listed = clock.t - LEASE_LAG
        self.lists = 1

    def _view(self) -> DesiredState:
        if self.clock.t - self.listed >= RESYNC:
            self.listed, self.lists = self.clock.t - LEASE_LAG, self.lists + 1
        return DesiredState(node="n1", pods=(WEB,), source="kube", fetched_at=self.clock.at(self.listed))

    def fetch(self) -> DesiredState:
        return self._view()

    def proven(self, *, max_age_seconds: float) -> DesiredState:
        view = self._view()
        if self.clock.t - view.fetched_at.timestamp() > max_age_seconds:
            raise SourceError("the pod cache cannot be proven current")
        return view

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return WEB if name == "web" else None


class RefreshableQuietWatch(QuietWatch):
    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.reasons: list[str] = []

    def refresh(self, reason: str) -> None:
        self.reasons.append(reason)
        self.listed, self.lists = self.clock.t + 1 - LEASE_LAG, self.lists + 1  # listed a second later


def run(source: QuietWatch, clock: Clock, cycles: int) -> list[Phase | None]:
    def scan(_roots: Roots, _opts: ScanOptions) -> Inventory:
        return Inventory(taken_at=clock.at(), pod_dirs=(pod_dir("u-web"), pod_dir("u-dead")))

    phases: list[Phase | None] = []
    with Ledger(":memory:") as ledger:
        engine = Engine(roots=Roots(), source=source, ledger=ledger, executor=DryRunExecutor(),
                        settings=EngineSettings(correlation=CorrelationPolicy(min_age_seconds=0),
                                                max_desired_age_seconds=MAX_AGE),
                        clock=clock, scanner=scan, boot_clock=lambda: None)
        for _ in range(cycles):
            engine.cycle()
            item = next((i for i in ledger.items().values() if i.kind is Kind.POD_DIR), None)
            phases.append(item.phase if item else None)
            clock.t += INTERVAL
    return phases


def test_a_watch_proven_only_by_lists_marks_nothing_without_a_refresh() -> None:
    """What the defaults did (and still do with a source that cannot list on request): never a mark."""
    clock = Clock()
    phases = run(QuietWatch(clock), clock, 40)
    assert Phase.MARKED not in phases


def test_a_refresh_ahead_lets_the_defaults_mark() -> None:
    clock = Clock()
    source = RefreshableQuietWatch(clock)
    phases = run(source, clock, 12)
    assert Phase.MARKED in phases
    assert source.reasons and all("too old at the next cycle" in r for r in source.reasons), source.reasons
    assert source.lists <= 1 + 12 // 3  # one list per three or four cycles while residue waits, no more


def test_a_young_view_asks_for_nothing() -> None:
    clock = Clock()
    source = RefreshableQuietWatch(clock)
    run(source, clock, 2)
    assert source.reasons == []


def test_a_node_without_residue_asks_for_nothing() -> None:
    clock = Clock()
    source = RefreshableQuietWatch(clock)

    def scan(_roots: Roots, _opts: ScanOptions) -> Inventory:
        return Inventory(taken_at=clock.at(), pod_dirs=(pod_dir("u-web"),))

    with Ledger(":memory:") as ledger:
        engine = Engine(roots=Roots(), source=source, ledger=ledger, executor=DryRunExecutor(),
                        settings=EngineSettings(max_desired_age_seconds=MAX_AGE), clock=clock, scanner=scan,
                        boot_clock=lambda: None)
        for _ in range(12):
            engine.cycle()
            clock.t += INTERVAL
    assert source.reasons == []


@pytest.fixture
def quiet_api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(progress_notify=False, kubelets=("n1",)) as api:
        yield api


def test_the_pod_watch_lists_again_on_a_refresh_and_proves_its_view(quiet_api: FakeKubeAPI,
                                                                     tmp_path: Path) -> None:
    quiet_api.add_pod(pod_object("web"))
    kubeconfig = quiet_api.write_kubeconfig(tmp_path / "kubeconfig")
    with PodReflector("n1", kubeconfig=kubeconfig, resync_seconds=3600) as ref:
        assert ref.wait_synced(20)
        first = ref.proven(max_age_seconds=MAX_AGE).fetched_at
        ref.refresh("test")
        assert quiet_api.wait_for(lambda: ref.stats().get("lists", 0) >= 2, 20)
        assert quiet_api.wait_for(lambda: ref.proven(max_age_seconds=MAX_AGE).fetched_at > first, 20)
        assert ref.stats()["relists_refresh"] == 1
        assert [p.name for p in ref.fetch().pods] == ["web"]
