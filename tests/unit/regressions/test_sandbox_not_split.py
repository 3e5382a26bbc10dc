"""The rate limit never splits a sandbox: if the cache entry (the evidence tying the netns to the dead
pod) went in one cycle and the netns waited, the netns would be `unknown` and leak for good."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import CNICacheEntry, Inventory, NetnsEntry
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import Batch, OnOutcome
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import Roots, ScanOptions
from tests.unit.factories import NOW, cache, netns, pod, pod_dir

T0 = NOW.timestamp()


class World:
    def __init__(self) -> None:
        self.cache = [cache("c1", uid="u-dead", ip="10.0.0.2")]
        self.netns = [netns("c1", addresses=("10.0.0.2",))]

    def scan(self, _roots: Roots, _opts: ScanOptions) -> Inventory:
        # The live pod's directory is there: the node is the one the pod list is about.
        return Inventory(taken_at=NOW, cni_cache=tuple(self.cache), netns=tuple(self.netns),
                         pod_dirs=(pod_dir("u-live"),))


class Source:
    name = "fake"

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock

    def fetch(self) -> DesiredState:
        live = pod("web", "u-live", ip="10.0.0.9")
        return DesiredState(node="n1", pods=(live,), source="fake",
                            fetched_at=datetime.fromtimestamp(self.clock[0], UTC))

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return None


@dataclasses.dataclass
class Executor:
    world: World
    destructive: bool = True

    def execute(self, batch: Batch, *, on_outcome: OnOutcome) -> None:
        for item, res in batch:
            if isinstance(res, CNICacheEntry):  # bridge DEL: eth0 in the netns is deleted; then the file
                self.world.netns = [dataclasses.replace(n, addresses=()) for n in self.world.netns]
                self.world.cache = [c for c in self.world.cache if c.path != res.path]
            elif isinstance(res, NetnsEntry):
                self.world.netns = [n for n in self.world.netns if n.path != res.path]
            on_outcome(item, Outcome.done("ok"))


def test_netns_is_reclaimed_even_when_rate_limit_splits_the_sandbox() -> None:
    clock = [T0]
    world = World()
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              reclaims_per_minute=1.0, reclaim_burst=1)
    with Ledger(":memory:") as ledger:
        eng = Engine(roots=Roots(), source=Source(clock), ledger=ledger, executor=Executor(world),
                     settings=settings, clock=lambda: clock[0], scanner=world.scan)
        for _ in range(6):
            eng.cycle()
            clock[0] += 120
        phases = {k: i.phase.value for k, i in ledger.items().items()}
    assert world.netns == [], f"netns leaked for good; ledger: {phases}"
