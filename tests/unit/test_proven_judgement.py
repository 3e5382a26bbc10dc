"""A cycle that judges the node again on the proven photograph reports that judgement's figures (findings,
IP ranges, protected resources), not the first judgement's on the unproven view."""

from __future__ import annotations

import dataclasses

from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.inventory.cni_conf import host_local_ranges
from nodegc.ledger.store import Ledger
from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory
from nodegc.observe.metrics import Metrics
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.unit.factories import NOW, cache, pod, reservation

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
