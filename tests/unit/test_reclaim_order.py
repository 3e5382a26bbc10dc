"""When the rate limit holds work back, the engine reclaims the addresses of the range set closest to
exhaustion first (the forecast's use in the engine)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.inventory.cni_conf import host_local_ranges
from nodegc.ledger.store import Ledger
from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import CNICacheEntry, Inventory, IPReservation
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import Batch, OnOutcome
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import Roots, ScanOptions
from tests.unit.factories import NOW, cache, pod, pod_dir, reservation

T0 = NOW.timestamp()
ROOMY, TIGHT = "roomy", "tight"


def _ranges() -> tuple[object, ...]:
    (roomy,), _ = host_local_ranges({"name": ROOMY, "type": "bridge", "ipam": {
        "type": "host-local", "subnet": "10.1.0.0/24"}}, source="conf")
    (tight,), _ = host_local_ranges({"name": TIGHT, "type": "bridge", "ipam": {
        "type": "host-local", "subnet": "10.2.0.0/29"}}, source="conf")
    return roomy, tight


class World:
    def __init__(self) -> None:
        # The roomy range's leaks sort first by name; the tight one is full (6 hosts, gateway excluded: 5).
        self.reservations = [reservation(f"10.1.0.{i}", f"a{i}", network=ROOMY) for i in range(2, 5)]
        self.reservations += [reservation(f"10.2.0.{i}", f"b{i}", network=TIGHT) for i in range(2, 7)]
        self.ranges = _ranges()
        # Each address's sandbox is known (its cache entry names a pod the API no longer has): leaked.
        self.cache = [dataclasses.replace(cache(r.container_id or "", uid=f"u-{r.container_id}", ip=r.ip),
                                          network=r.network) for r in self.reservations]

    def scan(self, _roots: Roots, _opts: ScanOptions) -> Inventory:
        return Inventory(taken_at=NOW, ip_reservations=tuple(self.reservations), pod_dirs=(pod_dir("u-live"),),
                         cni_cache=tuple(self.cache), ip_ranges=self.ranges)  # type: ignore[arg-type]


class Source:
    name = "fake"

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock

    def fetch(self) -> DesiredState:
        return DesiredState(node="n1", pods=(pod("web", "u-live", ip="10.9.0.9"),), source="fake",
                            fetched_at=datetime.fromtimestamp(self.clock[0], UTC))

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return None


@dataclasses.dataclass
class Executor:
    world: World
    order: list[str] = dataclasses.field(default_factory=list)
    destructive: bool = True

    def execute(self, batch: Batch, *, on_outcome: OnOutcome) -> None:
        for item, res in batch:
            if isinstance(res, IPReservation):
                self.order.append(res.network)
                self.world.reservations = [r for r in self.world.reservations if r.path != res.path]
            elif isinstance(res, CNICacheEntry):
                self.world.cache = [c for c in self.world.cache if c.path != res.path]
            on_outcome(item, Outcome.done("ok"))


def test_the_range_closest_to_exhaustion_goes_first_under_the_rate_limit() -> None:
    clock = [T0]
    world = World()
    executor = Executor(world)
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              reclaims_per_minute=1.0, reclaim_burst=1)
    with Ledger(":memory:") as ledger:
        eng = Engine(roots=Roots(), source=Source(clock), ledger=ledger, executor=executor, settings=settings,
                     clock=lambda: clock[0], scanner=world.scan)
        report = eng.cycle()
        tight = [s for s in report.ranges if s.usage.network == TIGHT]
        assert tight and tight[0].seconds_to_exhaustion == 0 and tight[0].usage.leaked == 5
        for _ in range(10):
            clock[0] += 60
            eng.cycle()
    assert executor.order[:5] == [TIGHT] * 5, executor.order
    assert executor.order[5:] == [ROOMY] * 3
