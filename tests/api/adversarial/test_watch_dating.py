"""Attacks on the dating of the agent's watched view (`PodReflector`, through the engine).

Events that move a watch's resourceVersion forward keep the view fresh, but freshness is not currency: a
watch cache that lags minutes behind its store still advances, and a pod created during the lag is missing
from a view that looks current, so its pod directory looks like residue. Before a cycle marks or
terminates anything it proves the view the way a list is proven: the node Lease read live, and the view's
resourceVersion must have reached the Lease's; the view is then dated at the Lease's renewal, never at an
arrival. Without the proof nothing is marked nor reclaimed (`view_not_current`), with the reason.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nodegc.desired.reflector import PodReflector
from nodegc.desired.source import SourceError
from nodegc.engine.cycle import CycleReport, Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.items import Phase
from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory, PodDir
from nodegc.observe.metrics import Metrics
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.api.fakeapi import FakeKubeAPI
from tests.api.test_reflector import NODE, eventually, pod, reflector
from tests.unit.factories import pod_dir

LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
LAG = 2.0
"""How far the lagging watch cache trails its store (seconds)."""
MAX_AGE = 1.0
"""--max-desired-age of these engines: the list's proof at sync is soon too old to reuse."""


class Node:
    """The node's pod directories, as a scanner returns them; a directory's time is its creation's."""

    def __init__(self) -> None:
        self.dirs: dict[str, PodDir] = {}

    def add(self, uid: str, *, at: float | None = None) -> None:
        self.dirs[uid] = pod_dir(uid, mtime=time.time() if at is None else at)

    def scan(self, _roots: Roots, _options: ScanOptions) -> Inventory:
        return Inventory(taken_at=datetime.now(UTC), pod_dirs=tuple(self.dirs.values()))


class Unproven:
    """The reflector as the engine saw it before the proof: `fetch()` and `get_pod()` only."""

    def __init__(self, ref: PodReflector) -> None:
        self._ref = ref
        self.name = ref.name

    def fetch(self) -> DesiredState:
        return self._ref.fetch()

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return self._ref.get_pod(namespace, name)


class Agent:
    def __init__(self, source: Any, node: Node) -> None:
        self.executor = DryRunExecutor()
        self.metrics = Metrics()
        self.ledger = Ledger(":memory:")
        settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                                  correlation=CorrelationPolicy(min_age_seconds=0), max_desired_age_seconds=MAX_AGE)
        self.engine = Engine(roots=Roots(), source=source, ledger=self.ledger, executor=self.executor,
                             settings=settings, metrics=self.metrics, scanner=node.scan)

    def cycle(self) -> CycleReport:
        return self.engine.cycle()

    def acted_on(self, uid: str) -> bool:
        return any(uid in action for action in self.executor.actions)


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=(NODE,)) as server:
        yield server


@pytest.fixture
def ref(api: FakeKubeAPI, tmp_path: Path) -> Iterator[PodReflector]:
    api.add_pod(pod("db"))
    r = reflector(api.write_kubeconfig(tmp_path / "kubeconfig"), idle_timeout_seconds=30.0).start()
    assert r.wait_synced(30)
    yield r
    r.stop()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    made: list[Agent] = []
    yield made
    for a in made:
        a.ledger.close()


@pytest.fixture
def churn(api: FakeKubeAPI) -> Iterator[Callable[[], None]]:
    """Another pod of the node changes every 50 ms: the watch keeps advancing (lagging or not)."""
    stop = threading.Event()

    def run() -> None:
        n = 0
        while not stop.wait(0.05):
            n += 1
            api.update("pods", "default", "db", {"metadata": {"annotations": {"n": str(n)}}})

    thread = threading.Thread(target=run, daemon=True)
    yield thread.start
    stop.set()
    thread.join(5)


def lease_gets(api: FakeKubeAPI) -> int:
    return len([r for r in api.requests_to(LEASE_PATH) if r.method == "GET"])


def lease_renewed(api: FakeKubeAPI) -> datetime:
    lease = api.get("leases", "kube-node-lease", NODE)
    assert lease is not None
    return datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))


def record_renewals(api: FakeKubeAPI) -> list[datetime]:
    """Every renewTime the node Lease is written with from now on (the simulated kubelet renews it right
    before each GET of it): a proof is dated at one of them, whatever number of GETs a slow machine makes."""
    renewals: list[datetime] = []
    renew = api.renew_node_lease

    def recording(node: str, *, at: datetime | None = None) -> Any:
        written = renew(node, at=at)
        if node == NODE:
            renewals.append(datetime.fromisoformat(written["spec"]["renewTime"].replace("Z", "+00:00")))
        return written

    api.renew_node_lease = recording  # type: ignore[method-assign]
    return renewals


def dated_at_a_renewal(ref: PodReflector, renewals: list[datetime], *, not_before: datetime) -> bool:
    """The view is proven, dated exactly at a Lease renewal no older than `not_before` (never at an
    arrival). A Lease GET made while the watch catches up renews the Lease again, so the proof may be dated
    at that later renewal: the check is which date, not how many GETs a loaded machine needed."""
    at = ref.proven(max_age_seconds=MAX_AGE).fetched_at
    return at >= not_before and at in renewals


def blocked(report: CycleReport) -> list[str]:
    return [b.split(":", 1)[0] for b in report.blocked]


def lagging_view_missing_web(api: FakeKubeAPI, ref: PodReflector, node: Node, churn: Callable[[], None]) -> float:
    """The watch lags LAG behind and keeps advancing; `web` is created (and its directory made) during the
    lag: the view is fresh by its arrivals and lacks `web`. Returns when `web` was created."""
    node.add("uid-default-db", at=time.time() - 3600)
    api.lag_watches(LAG)
    churn()
    time.sleep(LAG + 0.3)  # the lagged events arrive now: the view looks fresh
    api.add_pod(pod("web"))
    created = time.time()
    node.add("uid-default-web", at=created + 0.01)
    # The next arrival (a lagged change or a bookmark) dates the view after web's directory: wait for it
    # rather than for a fixed time; `web` itself arrives only LAG after its creation.
    eventually(api, lambda: ref.fetch().fetched_at.timestamp() > created + 0.01)
    fetched = ref.fetch()
    assert "web" not in {p.name for p in fetched.pods}
    assert (datetime.now(UTC) - fetched.fetched_at).total_seconds() < MAX_AGE, "the attack needs a fresh-looking view"
    assert fetched.fetched_at.timestamp() > created + 0.01, "the view's date is after web's directory was made"
    return created


def cycle_after_the_lease_is(write: Callable[[], object], api: FakeKubeAPI, ref: PodReflector,
                             churn: Callable[[], None], agents: list[Agent]) -> tuple[Agent, CycleReport]:
    """A node with a dead pod's residue, a view kept fresh by its arrivals (only the proof can refuse it),
    the kubelet stopped and the node Lease as `write` leaves it: one cycle once the list's proof is too old."""
    churn()
    node = Node()
    node.add("uid-dead", at=time.time() - 3600)
    api.stop_kubelet(NODE)
    write()
    agent = Agent(ref, node)
    agents.append(agent)
    time.sleep(MAX_AGE + 0.2)
    return agent, agent.cycle()


def test_a_lagging_watch_that_advances_fools_an_engine_without_the_proof(
    api: FakeKubeAPI, ref: PodReflector, churn: Callable[[], None], agents: list[Agent]
) -> None:
    """The attack has teeth: dated by arrivals, the lagging view makes a live pod's directory residue."""
    node = Node()
    lagging_view_missing_web(api, ref, node, churn)
    agent = Agent(Unproven(ref), node)
    agents.append(agent)
    report = agent.cycle()
    assert report.blocked == []
    assert agent.acted_on("uid-default-web")


def test_a_lagging_watch_that_advances_is_not_current_for_acting(
    api: FakeKubeAPI, ref: PodReflector, churn: Callable[[], None], agents: list[Agent]
) -> None:
    renewals = record_renewals(api)
    node = Node()
    lagging_view_missing_web(api, ref, node, churn)
    node.add("uid-dead", at=time.time() - 3600)  # real residue: every cycle has something to act on
    agent = Agent(ref, node)
    agents.append(agent)
    before = lease_gets(api)

    started = time.monotonic()
    report = agent.cycle()

    assert blocked(report) == ["view_not_current"], report.blocked
    assert "behind the witness" in report.blocked[0]
    assert agent.executor.actions == [] and agent.ledger.items(active_only=True) == {}
    assert lease_gets(api) - before == 1  # one Lease GET for the cycle that had something to act on
    assert 'nodegc_actions_blocked_total{reason="view_not_current"} 1.0' in agent.metrics.render().decode()
    # Right after, the view cannot have caught up: no second GET (the Lease read is pending for half of
    # --max-desired-age; a machine that stalled past that may read again), still refused.
    again = agent.cycle()
    assert blocked(again) == ["view_not_current"]
    if time.monotonic() - started < MAX_AGE / 2:
        assert lease_gets(api) - before == 1
    before = lease_gets(api) - 1

    # The cache reaches the Lease's resourceVersion LAG later: proven as of then, the view is LAG old, more
    # than --max-desired-age, so a watch lagging that far is never current for acting.
    time.sleep(LAG + 0.2)
    assert blocked(agent.cycle()) == ["view_not_current"] and agent.executor.actions == []
    assert lease_gets(api) - before == 2  # once more: the first Lease read was too old to prove anything now

    # Once the cache stops lagging, it reaches the Lease read last, `web` is in the view, and the view is
    # dated at the Lease's renewal, not at the arrival that reached it.
    renewed = lease_renewed(api)
    api.lag_watches(0)
    eventually(api, lambda: dated_at_a_renewal(ref, renewals, not_before=renewed))
    assert "web" in {p.name for p in ref.fetch().pods}
    assert agent.cycle().blocked == []
    assert agent.acted_on("uid-dead") and not agent.acted_on("uid-default-web")


def test_idle_cycles_read_no_lease(
    api: FakeKubeAPI, ref: PodReflector, churn: Callable[[], None], agents: list[Agent]
) -> None:
    churn()
    node = Node()
    node.add("uid-default-db", at=time.time() - 3600)
    agent = Agent(ref, node)
    agents.append(agent)
    time.sleep(MAX_AGE + 0.2)  # the list's proof is too old to reuse: acting would need a Lease GET
    before = lease_gets(api)
    for _ in range(3):
        assert agent.cycle().blocked == []
    assert lease_gets(api) == before


def test_a_current_watch_is_proven_by_one_lease_get_and_dated_at_its_renewal(
    api: FakeKubeAPI, ref: PodReflector, churn: Callable[[], None], agents: list[Agent]
) -> None:
    renewals = record_renewals(api)
    node = Node()
    node.add("uid-default-db", at=time.time() - 3600)
    node.add("uid-dead", at=time.time() - 3600)
    churn()
    agent = Agent(ref, node)
    agents.append(agent)
    time.sleep(MAX_AGE + 0.2)
    before = lease_gets(api)
    started = time.monotonic()
    first = agent.cycle()
    if first.blocked:  # the watch had not reached the Lease yet: the next bookmark or event does
        assert blocked(first) == ["view_not_current"]
        renewed = lease_renewed(api)
        eventually(api, lambda: dated_at_a_renewal(ref, renewals, not_before=renewed))
        first = agent.cycle()
    assert first.blocked == [] and agent.acted_on("uid-dead") and not agent.acted_on("uid-default-db")
    if time.monotonic() - started < MAX_AGE / 2:  # a stall past that renews the proof with another GET
        assert lease_gets(api) - before == 1
    proven = ref.proven(max_age_seconds=MAX_AGE)
    assert proven.fetched_at <= lease_renewed(api) + timedelta(seconds=0.001)


def test_a_lease_dated_in_the_future_proves_nothing(
    api: FakeKubeAPI, ref: PodReflector, churn: Callable[[], None], agents: list[Agent]
) -> None:
    agent, report = cycle_after_the_lease_is(
        lambda: api.renew_node_lease(NODE, at=datetime.now(UTC) + timedelta(seconds=60)), api, ref, churn, agents)
    assert blocked(report) == ["view_not_current"] and "in the future" in report.blocked[0]
    assert agent.executor.actions == []


def test_a_lease_of_another_holder_proves_nothing(
    api: FakeKubeAPI, ref: PodReflector, churn: Callable[[], None], agents: list[Agent]
) -> None:
    agent, report = cycle_after_the_lease_is(lambda: api.add("leases", {
        "metadata": {"name": NODE, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": "node-b", "leaseDurationSeconds": 40,
                 "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
    }), api, ref, churn, agents)
    assert blocked(report) == ["view_not_current"] and "held by 'node-b'" in report.blocked[0]
    assert agent.executor.actions == []


def test_a_watch_resumed_mid_proof_is_proven_as_of_the_lease_not_of_its_catching_up(
    api: FakeKubeAPI, ref: PodReflector, churn: Callable[[], None], agents: list[Agent]
) -> None:
    renewals = record_renewals(api)
    node = Node()
    lagging_view_missing_web(api, ref, node, churn)
    node.add("uid-dead", at=time.time() - 3600)
    agent = Agent(ref, node)
    agents.append(agent)
    assert blocked(agent.cycle()) == ["view_not_current"]
    renewed = lease_renewed(api)
    # The stream is cut and the watch resumes from its resourceVersion on a cache that no longer lags.
    api.lag_watches(0)
    api.drop_watches()
    eventually(api, lambda: "web" in {p.name for p in ref.fetch().pods})
    eventually(api, lambda: dated_at_a_renewal(ref, renewals, not_before=renewed))
    assert ref.stats()["lists"] == 1  # resumed, not relisted: the pending Lease proved it
    report = agent.cycle()
    assert report.blocked == [] and agent.acted_on("uid-dead") and not agent.acted_on("uid-default-web")


def test_a_watch_relisted_mid_proof_is_proven_by_its_list(
    api: FakeKubeAPI, ref: PodReflector, churn: Callable[[], None], agents: list[Agent]
) -> None:
    node = Node()
    lagging_view_missing_web(api, ref, node, churn)
    agent = Agent(ref, node)
    agents.append(agent)
    assert blocked(agent.cycle()) == ["view_not_current"]
    pending_renewal = lease_renewed(api)
    api.expire_watches()  # 410: the cache relists (a quorum read, proven by its own Lease GET)
    eventually(api, lambda: ref.stats()["lists"] >= 2 and "web" in {p.name for p in ref.fetch().pods})
    proven = ref.proven(max_age_seconds=MAX_AGE)
    assert proven.fetched_at >= pending_renewal  # the list's own, later proof
    agent.cycle()
    assert not agent.acted_on("uid-default-web")


def test_on_a_quiet_cluster_the_agent_acts_only_after_a_list(tmp_path: Path, agents: list[Agent]) -> None:
    """No pod changes and the bookmarks hear no other progress: the view neither refreshes nor reaches a
    Lease read after its list. As before the proof, the freshness guard refuses it once the last list is
    older than --max-desired-age (no Lease GET: nothing is judged), and the agent acts again after the
    resync's list."""
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=(NODE,), progress_notify=False) as api:
        api.add_pod(pod("db"))
        ref = reflector(api.write_kubeconfig(tmp_path / "kubeconfig"), idle_timeout_seconds=30.0,
                        resync_seconds=4.0).start()
        try:
            assert ref.wait_synced(30)
            node = Node()
            node.add("uid-default-db", at=time.time() - 3600)
            node.add("uid-dead", at=time.time() - 3600)
            agent = Agent(ref, node)
            agents.append(agent)
            time.sleep(MAX_AGE + 0.2)
            before = lease_gets(api)
            report = agent.cycle()
            assert blocked(report) == ["stale_source"] and agent.executor.actions == []
            assert lease_gets(api) == before
            lists = ref.stats()["lists"]
            eventually(api, lambda: ref.stats()["lists"] > lists  # the resync (4 s, + up to 20 %)
                       and (datetime.now(UTC) - ref.fetch().fetched_at).total_seconds() < MAX_AGE / 2)
            report = agent.cycle()
            assert report.blocked == [] and agent.acted_on("uid-dead")
        finally:
            ref.stop()


def test_when_only_the_nodes_own_pods_move_the_watch_reaches_the_lease_with_them(
    tmp_path: Path, agents: list[Agent]
) -> None:
    """Bookmarks hear no other progress, but a change of a pod the cache watches carries a resourceVersion
    after the Lease's: the view reaches the Lease with it, and is proven as of the Lease's renewal."""
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=(NODE,), progress_notify=False) as api:
        api.add_pod(pod("db"))
        renewals = record_renewals(api)
        ref = reflector(api.write_kubeconfig(tmp_path / "kubeconfig"), idle_timeout_seconds=30.0).start()
        try:
            assert ref.wait_synced(30)
            node = Node()
            node.add("uid-default-db", at=time.time() - 3600)
            node.add("uid-dead", at=time.time() - 3600)
            agent = Agent(ref, node)
            agents.append(agent)
            time.sleep(MAX_AGE + 0.2)
            api.update("pods", "default", "db", {"metadata": {"annotations": {"a": "1"}}})  # fresh again
            eventually(api, lambda: (datetime.now(UTC) - ref.fetch().fetched_at).total_seconds() < MAX_AGE / 2)
            report = agent.cycle()
            assert blocked(report) == ["view_not_current"] and agent.executor.actions == []
            renewed = lease_renewed(api)
            with pytest.raises(SourceError, match="behind the witness"):
                ref.proven(max_age_seconds=MAX_AGE)
            api.update("pods", "default", "db", {"metadata": {"annotations": {"a": "2"}}})
            eventually(api, lambda: dated_at_a_renewal(ref, renewals, not_before=renewed))
            report = agent.cycle()
            assert report.blocked == [] and agent.acted_on("uid-dead")
        finally:
            ref.stop()


def test_a_cache_restarted_mid_proof_is_proven_by_its_new_list_only(
    api: FakeKubeAPI, ref: PodReflector, churn: Callable[[], None], agents: list[Agent]
) -> None:
    """A Lease read by the old run stays with it: the restarted cache proves nothing until it has listed
    (proven by that list's own Lease), and then keeps `web`."""
    node = Node()
    lagging_view_missing_web(api, ref, node, churn)
    node.add("uid-dead", at=time.time() - 3600)
    agent = Agent(ref, node)
    agents.append(agent)
    assert blocked(agent.cycle()) == ["view_not_current"]
    pending_renewal = lease_renewed(api)
    ref.stop()
    api.lag_watches(0)
    ref.start()
    assert ref.wait_synced(30)
    proven = ref.proven(max_age_seconds=MAX_AGE)
    assert proven.fetched_at >= pending_renewal and "web" in {p.name for p in proven.pods}
    report = agent.cycle()
    assert report.blocked == [] and agent.acted_on("uid-dead") and not agent.acted_on("uid-default-web")


# -- refused proofs and the ledger's streaks -------------------------------------------------------------
# While the watch lags, every cycle with something to act on is refused. Such a cycle writes what moves away
# from reclaim (a pod back in the view releases its items) and moves nothing toward a mark, so "K scans in
# a row" never spans the refusal.

WEB_KEY = "pod_dir:/kubelet/pods/uid-default-web"



def _proven_cycle(api: FakeKubeAPI, agent: Agent, ref: PodReflector) -> None:
    """One cycle on a proven view (waiting for the watch to reach the Lease read for it, if need be)."""
    report = agent.cycle()
    if report.blocked:
        assert blocked(report) == ["view_not_current"], report.blocked
        eventually(api, lambda: ref.proven(max_age_seconds=MAX_AGE).fetched_at.timestamp() > 0)
        report = agent.cycle()
    assert report.blocked == [], report.blocked


def test_a_pod_back_in_a_lagging_view_is_released_and_its_streak_starts_over(
    api: FakeKubeAPI, ref: PodReflector, churn: Callable[[], None], agents: list[Agent]
) -> None:
    node = Node()
    node.add("uid-default-db", at=time.time() - 3600)
    node.add("uid-default-web", at=time.time() - 3600)  # no pod with that UID in the API: residue
    node.add("uid-dead", at=time.time() - 3600)  # residue all along: every cycle has something to act on
    agent = Agent(ref, node)
    agent.engine.settings = dataclasses.replace(agent.engine.settings,
                                                phases=PhasePolicy(consecutive_scans=2, grace_seconds=0))
    agents.append(agent)
    _proven_cycle(api, agent, ref)
    assert (item := agent.ledger.get(WEB_KEY)) is not None and item.orphan_count == 1, item

    # The pod is back (in the API, then in the view); the watch then lags, so no proof is possible.
    api.add_pod(pod("web"))
    eventually(api, lambda: "web" in {p.name for p in ref.fetch().pods})
    api.lag_watches(LAG)
    churn()
    time.sleep(LAG + 0.3)  # the lagged events arrive now (the view looks fresh); the last proof is too old
    for _ in range(2):
        report = agent.cycle()
        assert blocked(report) == ["view_not_current"], report.blocked
        item = agent.ledger.get(WEB_KEY)
        assert item is not None and item.phase is Phase.RELEASED, item
        dead = agent.ledger.get("pod_dir:/kubelet/pods/uid-dead")
        assert dead is not None and dead.phase is Phase.DETECTED and dead.orphan_count == 0, dead

    # The pod goes again and the watch catches up: the next proven sighting is the first of a new streak.
    api.delete("pods", "default", "web")
    api.lag_watches(0)
    eventually(api, lambda: "web" not in {p.name for p in ref.proven(max_age_seconds=MAX_AGE).pods})
    _proven_cycle(api, agent, ref)
    item = agent.ledger.get(WEB_KEY)
    assert item is not None and item.phase is Phase.DETECTED and item.orphan_count == 1, item
    assert not agent.acted_on("uid-default-web") and not agent.acted_on("uid-dead")
