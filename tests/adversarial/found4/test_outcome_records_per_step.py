"""Clean records the executor's outcomes one ledger transaction per step (each transaction is an fsync),
not one per item, and still records every outcome reported before an executor raised; terminate records
the items it sends back with its checkpoint, in one transaction. Every item ends in the phase its outcome
says."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import pytest

from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Change, Ledger
from nodegc.model.items import Phase
from nodegc.model.pods import DesiredState
from nodegc.model.resources import CNICacheEntry, IPReservation
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import Batch, OnOutcome
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import Roots
from tests.unit.factories import pod
from tests.unit.test_reclaim_order import T0, Source, World


class CountingLedger(Ledger):
    transactions = 0

    def apply(self, transitions: Iterable[Change], *, now: float) -> None:
        self.transactions += 1
        super().apply(transitions, now=now)


@dataclasses.dataclass
class Executor:
    world: World
    ledger: CountingLedger
    raise_after: int | None = None
    during: int = 0
    destructive: bool = True

    def execute(self, batch: Batch, *, on_outcome: OnOutcome) -> None:
        before = self.ledger.transactions
        for n, (item, res) in enumerate(batch):
            if self.raise_after is not None and n == self.raise_after:
                raise RuntimeError("executor broke")
            if isinstance(res, IPReservation):
                self.world.reservations = [r for r in self.world.reservations if r.path != res.path]
            elif isinstance(res, CNICacheEntry):
                self.world.cache = [c for c in self.world.cache if c.path != res.path]
            on_outcome(item, Outcome.done("ok"))
        self.during = self.ledger.transactions - before


def _engine(ledger: CountingLedger, executor: Executor, world: World) -> Engine:
    clock = [T0]
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0))
    return Engine(roots=Roots(), source=Source(clock), ledger=ledger, executor=executor, settings=settings,
                  clock=lambda: clock[0], scanner=world.scan)


def test_one_transaction_per_step_not_per_item() -> None:
    world = World()
    ledger = CountingLedger(":memory:")
    with ledger:
        executor = Executor(world, ledger)
        report = _engine(ledger, executor, world).cycle()
        assert len(report.outcomes) == 16  # 8 cache entries, 8 reservations
        assert executor.during == 1  # the cache entries' records, written when the reservations' step began
        assert len(report.closed) == 16
        assert {i.phase for i in ledger.items().values()} == {Phase.CLOSED}


def test_outcomes_reported_before_an_executor_raised_are_recorded() -> None:
    world = World()
    ledger = CountingLedger(":memory:")
    with ledger:
        executor = Executor(world, ledger, raise_after=10)
        with pytest.raises(RuntimeError, match="executor broke"):
            _engine(ledger, executor, world).cycle()
        phases = [i.phase for i in ledger.items().values()]
    assert phases.count(Phase.CLEANED) == 10
    assert phases.count(Phase.TERMINATING) == 6


class TurningSource(Source):
    """Detect sees the owners gone; terminate's fresh read shows them all back (a lagging list caught up)."""

    def __init__(self, clock: list[float], world: World) -> None:
        super().__init__(clock)
        self.world = world
        self.fetches = 0

    def fetch(self) -> DesiredState:
        self.fetches += 1
        first = super().fetch()
        if self.fetches == 1:
            return first
        back = tuple(pod(f"p-{r.container_id}", f"u-{r.container_id}", ip=r.ip) for r in self.world.reservations)
        return dataclasses.replace(first, pods=first.pods + back)


def test_items_sent_back_at_terminate_are_recorded_in_one_transaction() -> None:
    world = World()
    clock = [T0]
    ledger = CountingLedger(":memory:")
    with ledger:
        executor = Executor(world, ledger)
        settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0))
        engine = Engine(roots=Roots(), source=TurningSource(clock, world), ledger=ledger, executor=executor,
                        settings=settings, clock=lambda: clock[0], scanner=world.scan)
        report = engine.cycle()
        assert len(report.sent_back) == 16 and report.outcomes == []
        assert ledger.transactions == 2  # the marks of detect, the 16 send-backs of terminate
        assert {i.phase for i in ledger.items().values()} == {Phase.DETECTED}
