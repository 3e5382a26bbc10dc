"""A cycle that judges the node again on the proven photograph reports that judgement's figures (findings,
IP ranges, protected resources), not the first judgement's on the unproven view."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from nodegc.desired.source import SourceError
from nodegc.engine import cycle
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.engine.detecting import detect
from nodegc.inventory.cni_conf import host_local_ranges
from nodegc.ledger.store import Ledger
from nodegc.model.findings import Finding, FindingClass
from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory
from nodegc.model.runtime import RuntimeSandbox, RuntimeView
from nodegc.observe.metrics import Metrics
from nodegc.planning.correlate import CorrelationPolicy, correlation
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.unit.bigscan import big_scan, with_addresses_read
from tests.unit.factories import NOW, cache, pod, pod_dir, reservation

NET = "pods"
OLD_POD = pod("old", "u-old", ip="10.1.0.2")


def scan(_roots: Roots, _opts: ScanOptions) -> Inventory:
    (rng,), _ = host_local_ranges({"name": NET, "type": "bridge", "ipam": {
        "type": "host-local", "subnet": "10.1.0.0/24"}}, source="conf")
    return Inventory(taken_at=NOW, ip_reservations=(reservation("10.1.0.2", "c-old", network=NET),),
                     cni_cache=(dataclasses.replace(cache("c-old", uid="u-old", name="old", ip="10.1.0.2"),
                                                    network=NET),),
                     ip_ranges=(rng,))


class Watch:
    """A watched view (fetch) without the pod `old`; its proof (proven) is a photograph that still has it."""

    name = "watch"

    def __init__(self) -> None:
        self.proofs = 0

    def _state(self, *pods: Pod) -> DesiredState:
        return DesiredState(node="n1", pods=pods, source="watch", fetched_at=NOW)

    def fetch(self) -> DesiredState:
        return self._state(pod("web", "u-web"))

    def proven(self, *, max_age_seconds: float) -> DesiredState:
        self.proofs += 1
        return self._state(pod("web", "u-web"), OLD_POD)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return OLD_POD if name == "old" else None


def test_a_cycle_judged_again_on_the_proven_photograph_reports_that_judgement() -> None:
    source, metrics = Watch(), Metrics()
    with Ledger(":memory:") as ledger:
        engine = Engine(roots=Roots(), source=source, ledger=ledger, executor=DryRunExecutor(),
                        settings=EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0)),
                        metrics=metrics, clock=NOW.timestamp, scanner=scan)
        report = engine.cycle()
        assert source.proofs >= 1, "the unproven view shows residue: the cycle proves it"
        assert not [f for f in report.findings if f.cls.is_residue], report.findings
        (status,) = report.ranges
        assert status.usage.leaked == 0, "the proven photograph's pod holds the address"
        assert metrics.registry.get_sample_value(
            "nodegc_ip_range_leaked", dict(zip(("network", "range"), status.usage.key, strict=True))) == 0
        assert not ledger.items(active_only=True)


# -- the runtime check and the second judgement ---------------------------------------------------------

SANDBOX_DB = RuntimeSandbox(id="s" * 64, pod_uid="u-db", pod_name="db", pod_namespace="default", attempt=0,
                            ready=True, created_at=NOW - timedelta(hours=1), status_read=True)
ORPHAN = RuntimeSandbox(id="o" * 64, pod_uid="u-gone", pod_name="gone", pod_namespace="default", attempt=0,
                        ready=True, created_at=NOW - timedelta(hours=1), status_read=True)
DB = pod("db", "u-db")
GONE = pod("gone", "u-gone")
GHOST = pod("ghost", "u-ghost")
"""A running pod of the unproven view that the runtime lists no sandbox for (a view that lags or lies)."""


class Scripted:
    """A watched view: `fetch()` and `proven()` each return the state they are given (a new object)."""

    name = "watch"

    def __init__(self, fetched: tuple[Pod, ...], proven: tuple[Pod, ...], *, proven_age: float = 0.0) -> None:
        self.fetched, self.proven_pods, self.proven_age = fetched, proven, proven_age
        self.proofs = 0
        self.gets: list[str] = []

    def fetch(self) -> DesiredState:
        return DesiredState(node="n1", pods=self.fetched, source="watch", fetched_at=NOW)

    def proven(self, *, max_age_seconds: float) -> DesiredState:
        self.proofs += 1
        return DesiredState(node="n1", pods=self.proven_pods, source="watch",
                            fetched_at=NOW - timedelta(seconds=self.proven_age))

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        self.gets.append(name)
        return None


def node(*sandboxes: RuntimeSandbox, reachable: bool = True, dirs: tuple[str, ...] = ("u-db", "u-dead")) -> Callable[
        [Roots, ScanOptions], Inventory]:
    def scanner(_roots: Roots, _opts: ScanOptions) -> Inventory:
        view = RuntimeView(endpoint="unix:///run/containerd/containerd.sock", reachable=reachable,
                           error=None if reachable else "connection refused", sandboxes=sandboxes, read_at=NOW)
        return Inventory(taken_at=NOW, pod_dirs=tuple(pod_dir(uid) for uid in dirs), runtime=view)
    return scanner


def engine(source: Scripted, ledger: Ledger, scanner: Callable[[Roots, ScanOptions], Inventory],
           **settings: Any) -> Engine:
    """K=2: a first cycle marks nothing, so no terminate (and no fresh scan) follows."""
    return Engine(roots=Roots(), source=source, ledger=ledger, executor=DryRunExecutor(),
                  settings=EngineSettings(phases=PhasePolicy(consecutive_scans=2, grace_seconds=0),
                                          correlation=CorrelationPolicy(min_age_seconds=60), **settings),
                  clock=NOW.timestamp, scanner=scanner, boot_clock=lambda: None)


@pytest.fixture
def detects(monkeypatch: pytest.MonkeyPatch) -> list[DesiredState]:
    """The desired states `detect` joins the node with, in order."""
    seen: list[DesiredState] = []

    def counting(inventory: Inventory, desired: DesiredState, **kw: Any) -> tuple[Inventory, tuple[Finding, ...]]:
        seen.append(desired)
        return detect(inventory, desired, **kw)

    monkeypatch.setattr(cycle, "detect", counting)
    return seen


def test_the_runtime_check_is_made_against_the_proven_view(detects: list[DesiredState]) -> None:
    """The unproven view shows a running pod the runtime has no sandbox for; the proven one does not: the
    runtime's word is usable on the view the cycle acts on, and no read problem of the other view remains."""
    source = Scripted((DB,), (DB,))
    with Ledger(":memory:") as ledger:
        judge = engine(source, ledger, node(SANDBOX_DB))
        judge.cycle()
        judge.cycle()  # u-dead's directory marked; a dry run leaves it so, due at every cycle
        # Nothing is residue on the unproven view (its runtime list is not the runtime's whole word): the
        # due item makes the cycle take the proof.
        source.fetched = (DB, GHOST)
        del detects[:]
        report = judge.cycle()
        assert len(detects) >= 2 and detects[1].pods == (DB,)
        assert report.blocked == [], report.blocked
        assert report.problems == 0


def test_the_runtime_check_of_the_proven_view_still_refuses_what_it_must(detects: list[DesiredState]) -> None:
    source = Scripted((DB,), (DB, GHOST))
    with Ledger(":memory:") as ledger:
        report = engine(source, ledger, node(SANDBOX_DB)).cycle()
        assert [b.split(":", 1)[0] for b in report.blocked] == ["runtime_unavailable"]
        assert "ghost" in report.blocked[0]
        assert report.problems == 2  # the sandboxes and the runtime's leftovers are unseen this scan


def test_report_problems_counts_the_runtime_checks_problems() -> None:
    source = Scripted((DB,), (DB,))
    with Ledger(":memory:") as ledger:
        report = engine(source, ledger, node(reachable=False, dirs=("u-db",))).cycle()
        assert [b.split(":", 1)[0] for b in report.blocked] == ["runtime_unavailable"]
        assert report.problems == 2


@pytest.mark.parametrize("proven_age", [0.0, -1.0])
def test_a_proven_photograph_of_the_same_pods_not_older_is_not_judged_again(
        detects: list[DesiredState], proven_age: float) -> None:
    source = Scripted((DB,), (DB,), proven_age=proven_age)
    with Ledger(":memory:") as ledger:
        report = engine(source, ledger, node(SANDBOX_DB)).cycle()
        assert source.proofs == 1
        assert len(detects) == 1, "the proven photograph adds no judgement"
        assert report.blocked == [] and "pod_dir:/kubelet/pods/u-dead" in ledger.items(active_only=True)


@pytest.mark.parametrize(("proven", "proven_age"), [
    ((DB,), 1.0),  # older: its horizon protects more, the node is judged again
    ((dataclasses.replace(DB, phase="Succeeded"),), 0.0),  # another phase
    ((dataclasses.replace(DB, pod_ips=("10.0.0.9",)),), 0.0),  # another address
    ((dataclasses.replace(DB, uid="u-db2"),), 0.0),  # another incarnation under the same name
    ((DB, GONE), 0.0),  # one more pod
])
def test_a_proven_photograph_that_differs_is_judged_again(
        detects: list[DesiredState], proven: tuple[Pod, ...], proven_age: float) -> None:
    source = Scripted((DB,), proven, proven_age=proven_age)
    with Ledger(":memory:") as ledger:
        engine(source, ledger, node(SANDBOX_DB)).cycle()
        assert len(detects) == 2, [d.pods for d in detects]
        assert detects[1].pods == proven


def test_a_young_resource_is_protected_by_an_older_proven_photograph_of_the_same_pods() -> None:
    """The photograph's time matters even when its pods are the same: 40 s older than the view's freshness,
    it cannot show the owner of a directory made 30 s before the scan (min age 60 s: 50 s before it)."""
    young = dataclasses.replace(pod_dir("u-new"), mtime=NOW.timestamp() - 90)

    def scanner(_roots: Roots, _opts: ScanOptions) -> Inventory:
        return Inventory(taken_at=NOW, pod_dirs=(pod_dir("u-db"), pod_dir("u-dead"), young))

    with Ledger(":memory:") as ledger:
        report = engine(Scripted((DB,), (DB,), proven_age=40.0), ledger, scanner).cycle()
        (new,) = [f for f in report.findings if f.id.endswith("u-new")]
        assert new.cls is FindingClass.PROTECTED
        assert "pod_dir:/kubelet/pods/u-new" not in ledger.items(active_only=True)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_an_older_photograph_of_the_same_pods_finds_no_residue_a_newer_one_does_not(seed: int) -> None:
    """Why a first judgement on an older (or equal) photograph of the same pods may stand for a proven newer
    one: the photograph's time only sets minimum-age horizons, so what is residue on the older photograph
    is residue on the newer one."""
    scan = big_scan(seed, sandboxes=200, runtime=seed % 2 == 0)
    inventory = with_addresses_read(scan, seed)
    policy = CorrelationPolicy(min_age_seconds=60)
    by_age: list[set[str]] = []
    for age in (0.0, 30.0, 61.0, 600.0, 7200.0):  # from newer to older
        photo = dataclasses.replace(scan.desired, fetched_at=NOW - timedelta(seconds=age))
        findings = correlation(inventory, photo, now=NOW, policy=policy).findings
        by_age.append({f"{f.kind.value}:{f.id}" for f in findings if f.cls.is_residue})
    for newer, older in itertools.pairwise(by_age):
        assert older <= newer, sorted(older - newer)[:5]
    assert by_age[0] != by_age[-1], "the horizons made a difference on this scan"


# -- running orphans ----------------------------------------------------------------------------------

class Destructive:
    destructive = True

    def execute(self, batch: Any, *, on_outcome: Any) -> None:
        raise AssertionError("nothing to reclaim in these cycles")


@pytest.fixture
def stops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sandboxes the engine asks to stop (`stop_running_orphan`, which would call the runtime)."""
    asked: list[str] = []

    def stop(finding: Finding, **_kw: Any) -> tuple[bool, str]:
        asked.append(finding.id)
        return True, "stopped"

    monkeypatch.setattr(cycle, "stop_running_orphan", stop)
    return asked


def orphan_engine(source: Scripted, ledger: Ledger) -> Engine:
    e = engine(source, ledger, node(SANDBOX_DB, ORPHAN, dirs=("u-db",)), running_orphan_grace_seconds=0,
               stop_running_orphans=True, scan=ScanOptions(runtime_endpoint="unix:///run/containerd/containerd.sock"))
    e.executor = Destructive()
    return e


def test_a_running_orphan_is_stopped_only_if_it_is_one_on_the_proven_photograph(
        detects: list[DesiredState], stops: list[str]) -> None:
    """The only action of the cycle is a stop; the proven photograph still shows the pod: not stopped."""
    source = Scripted((DB,), (DB, GONE))
    with Ledger(":memory:") as ledger:
        report = orphan_engine(source, ledger).cycle()
        assert [f.id for f in report.running_orphans] == [ORPHAN.id]
        assert source.proofs == 1 and len(detects) == 2 and detects[1].pods == (DB, GONE)
        assert stops == [] and report.stopped_orphans == []


def test_a_running_orphan_on_the_proven_photograph_too_is_stopped(
        detects: list[DesiredState], stops: list[str]) -> None:
    source = Scripted((DB,), (DB,))
    with Ledger(":memory:") as ledger:
        report = orphan_engine(source, ledger).cycle()
        assert source.proofs == 1 and len(detects) == 1, "the same pods: not judged again"
        assert stops == [ORPHAN.id] and [f.id for f, _, _ in report.stopped_orphans] == [ORPHAN.id]


def test_a_running_orphan_is_not_stopped_without_a_proof(stops: list[str]) -> None:
    class Refusing(Scripted):
        def proven(self, *, max_age_seconds: float) -> DesiredState:
            self.proofs += 1
            raise SourceError("behind the witness")

    source = Refusing((DB,), (DB,))
    with Ledger(":memory:") as ledger:
        report = orphan_engine(source, ledger).cycle()
        assert [b.split(":", 1)[0] for b in report.blocked] == ["view_not_current"]
        assert stops == []


def test_every_field_of_a_pod_takes_part_in_the_equality_the_second_judgement_is_skipped_on() -> None:
    """`same_judgement` compares the pods as values: a field left out of the equality (compare=False) would
    let a photograph that differs in it pass for the same one."""
    assert all(f.compare for f in dataclasses.fields(Pod))
    for f in dataclasses.fields(Pod):
        other = dataclasses.replace(DB, **{f.name: _another(getattr(DB, f.name))})
        assert not cycle.same_judgement(first=desired_of(DB), proven=desired_of(other)), f.name


def desired_of(*pods: Pod) -> DesiredState:
    return DesiredState(node="n1", pods=pods, source="watch", fetched_at=NOW)


def _another(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, tuple):
        return (*value, "10.9.9.9")
    if value is None:
        return "x"
    if hasattr(value, "tzinfo"):
        return value + timedelta(seconds=1)
    return f"{value}-other"
