"""A pod the API lost while it runs (an etcd restored from a backup, a force delete) keeps its directory and
volumes while the runtime cannot be asked whether it still runs: unreachable, or a list that is not its
whole word ('needs the runtime's word'). Its network is the same pod's and the same doubt, but the rules
without the runtime still call it residue: its cache entry, address, namespace and veth are marked after K
scans and the grace, the live GET of the lost pod answers 404, and CNI DEL takes the running pod's network
away, the interface in its namespace first. Its network waits for the runtime's word as its directory does
(docs/ownership.md, "With the runtime's word")."""

from __future__ import annotations

import pytest

from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.resources import Inventory
from nodegc.model.runtime import RuntimeView
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.adversarial.found15_desired.test_running_pod_absent_from_the_api import (
    RESTORED,
    Restored,
    sandbox,
    view,
)
from tests.unit.factories import NOW, cache, netns, pod_dir, reservation, veth

CID = "a" * 64
"""The lost pod's sandbox (its container id in the cache entry and the reservation)."""


def node(runtime: RuntimeView) -> Inventory:
    return Inventory(taken_at=NOW, pod_dirs=(pod_dir(RESTORED, mounted=True), pod_dir("uid-web", mounted=True)),
                     cni_cache=(cache(CID, uid=RESTORED, name="restored", ip="10.0.1.9"),),
                     ip_reservations=(reservation("10.0.1.9", CID),), netns=(netns(CID, addresses=("10.0.1.9",)),),
                     veths=(veth(CID),), runtime=runtime)


@pytest.mark.parametrize("runtime", [view(sandbox("b", "uid-web"), reachable=False), view()],
                         ids=["unreachable", "empty_list"])
def test_the_network_of_a_pod_the_api_lost_waits_for_the_runtime(runtime: RuntimeView) -> None:
    def scanner(_roots: Roots, _opts: ScanOptions) -> Inventory:
        return node(runtime)

    executor = DryRunExecutor()
    with Ledger(":memory:") as ledger:
        engine = Engine(roots=Roots(), source=Restored(), ledger=ledger, executor=executor,
                        settings=EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0)),
                        clock=NOW.timestamp, scanner=scanner, boot_clock=lambda: None)
        for _ in range(3):
            engine.cycle()
        assert not executor.actions, executor.actions
