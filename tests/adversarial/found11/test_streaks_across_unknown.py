"""A residue is marked after K scans in a row (and the grace) that saw it orphaned. A refused proof
(`view_not_current`) restarted the streak, but a cycle whose desired state was unknown (unreadable:
`source_unavailable`; too old or from the future: `stale_source`) scanned nothing and left the streak as it
was: after an hour without knowing which pods exist, the first cycle back marked what two sightings before
the outage had counted, on one sighting after it. Any uncertainty resolves to keep: no streak spans a time
in which the desired state was unknown, and the restarts are counted (`nodegc_streaks_restarted_total`)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from nodegc.desired.source import SourceError
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.items import Item, Phase
from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory, Kind
from nodegc.observe.metrics import Metrics
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.unit.factories import NOW, pod, pod_dir

WEB = pod("web", "u-web")
INTERVAL = 30.0
K, GRACE = 3, 60.0


class Clock:
    def __init__(self) -> None:
        self.t = NOW.timestamp()

    def __call__(self) -> float:
        return self.t

    def at(self) -> datetime:
        return datetime.fromtimestamp(self.t, UTC)


class Source:
    """The desired state: the pod `web` (the dead pod's directory is residue), or `mode` says otherwise."""

    name = "test"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.mode = "ok"

    def fetch(self) -> DesiredState:
        if self.mode == "unavailable":
            raise SourceError("connection refused")
        at = self.clock.at()
        if self.mode == "stale":
            at = datetime.fromtimestamp(self.clock.t - 600, UTC)
        elif self.mode == "future":
            at = datetime.fromtimestamp(self.clock.t + 600, UTC)
        return DesiredState(node="n1", pods=(WEB,), source="test", fetched_at=at)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return WEB if name == "web" else None


def run(mode_by_cycle: list[str], *, gap: float = INTERVAL) -> tuple[list[Item | None], Metrics]:
    """One cycle per entry (30 s apart; a non-ok one lasts `gap`); the dead pod directory's item after each."""
    clock, metrics = Clock(), Metrics()
    source = Source(clock)

    def scan(_roots: Roots, _opts: ScanOptions) -> Inventory:
        return Inventory(taken_at=clock.at(), pod_dirs=(pod_dir("u-web"), pod_dir("u-dead")))

    seen: list[Item | None] = []
    with Ledger(":memory:") as ledger:
        engine = Engine(roots=Roots(), source=source, ledger=ledger, executor=DryRunExecutor(),
                        settings=EngineSettings(phases=PhasePolicy(consecutive_scans=K, grace_seconds=GRACE),
                                                correlation=CorrelationPolicy(min_age_seconds=0)),
                        metrics=metrics, clock=clock, scanner=scan, boot_clock=lambda: None)
        for mode in mode_by_cycle:
            source.mode = mode
            engine.cycle()
            seen.append(next((i for i in ledger.items().values() if i.kind is Kind.POD_DIR), None))
            clock.t += gap if mode != "ok" else INTERVAL
    return seen, metrics


def _phase(item: Item | None) -> Phase | None:
    return item.phase if item else None


@pytest.mark.parametrize("mode", ["unavailable", "stale", "future"])
def test_an_hour_without_a_desired_state_restarts_the_streak(mode: str) -> None:
    seen, metrics = run(["ok", "ok", mode, "ok", "ok", "ok"], gap=3600)
    assert [i.orphan_count if i else None for i in seen] == [1, 2, 0, 1, 2, 3]
    assert [_phase(i) for i in seen[:5]] == [Phase.DETECTED] * 5, "one sighting after the outage marked it"
    assert _phase(seen[5]) is Phase.MARKED  # K sightings in a row after it, and the grace from the first
    reason = "stale_source" if mode != "unavailable" else "source_unavailable"
    assert metrics.registry.get_sample_value("nodegc_streaks_restarted_total", {"reason": reason}) == 1
    assert metrics.registry.get_sample_value("nodegc_items_marked_total", {"kind": "pod_dir"}) == 1


def test_the_grace_starts_again_after_the_unknown_time() -> None:
    seen, _ = run(["ok", "ok", "unavailable", "ok", "ok", "ok"], gap=3600)
    first, back = seen[0], seen[3]
    assert first is not None and back is not None
    assert back.first_seen - first.first_seen > 3600  # counted from the first sighting after it


def test_a_row_of_unknown_cycles_writes_once() -> None:
    seen, metrics = run(["ok", "unavailable", "unavailable", "stale", "ok"])
    assert [i.orphan_count if i else None for i in seen] == [1, 0, 0, 0, 1]
    assert metrics.registry.get_sample_value("nodegc_streaks_restarted_total",
                                             {"reason": "source_unavailable"}) == 1
    assert metrics.registry.get_sample_value("nodegc_streaks_restarted_total", {"reason": "stale_source"}) == 0


def test_unknown_every_k_cycles_never_marks_and_says_so() -> None:
    """Refused at least once every K cycles: nothing is ever marked (never weakened), and the metrics show
    streaks restarted with nothing marked (NodegcMarkingStarved)."""
    seen, metrics = run(["ok", "ok", "unavailable"] * 8)
    assert all(_phase(i) in (Phase.DETECTED, None) for i in seen)
    assert metrics.registry.get_sample_value("nodegc_streaks_restarted_total",
                                             {"reason": "source_unavailable"}) == 8
    assert metrics.registry.get_sample_value("nodegc_items_marked_total", {"kind": "pod_dir"}) == 0


class Provable(Source):
    """A watched view whose proof is refused on the cycles `refuse` names (by number, from 0)."""

    def __init__(self, clock: Clock, refuse: set[int]) -> None:
        super().__init__(clock)
        self.refuse, self.cycle = refuse, -1

    def fetch(self) -> DesiredState:
        self.cycle += 1
        return super().fetch()

    def proven(self, *, max_age_seconds: float) -> DesiredState:
        if self.cycle in self.refuse:
            raise SourceError("the pod cache is behind the witness")
        return super().fetch()


def test_a_proof_refused_every_k_cycles_never_marks_and_says_so() -> None:
    clock, metrics = Clock(), Metrics()
    source = Provable(clock, refuse={n for n in range(24) if n % K == K - 1})

    def scan(_roots: Roots, _opts: ScanOptions) -> Inventory:
        return Inventory(taken_at=clock.at(), pod_dirs=(pod_dir("u-web"), pod_dir("u-dead")))

    with Ledger(":memory:") as ledger:
        engine = Engine(roots=Roots(), source=source, ledger=ledger, executor=DryRunExecutor(),
                        settings=EngineSettings(phases=PhasePolicy(consecutive_scans=K, grace_seconds=GRACE),
                                                correlation=CorrelationPolicy(min_age_seconds=0)),
                        metrics=metrics, clock=clock, scanner=scan, boot_clock=lambda: None)
        for _ in range(24):
            engine.cycle()
            clock.t += INTERVAL
        assert all(i.phase is Phase.DETECTED for i in ledger.items().values())
    assert metrics.registry.get_sample_value("nodegc_streaks_restarted_total", {"reason": "view_not_current"}) == 8
    assert metrics.registry.get_sample_value("nodegc_items_marked_total", {"kind": "pod_dir"}) == 0


def test_a_restart_whose_watch_has_not_synced_yet_keeps_the_persisted_streak(tmp_path: Path) -> None:
    """Streaks are persisted so that a restart does not reset them (the design's rule): the cycles of a new
    process before its first usable desired state (the pod watch still listing) are the restart's gap, and
    restart nothing; once the process has had one, an unknown desired state restarts them again."""
    clock, db = Clock(), tmp_path / "ledger.db"

    def scan(_roots: Roots, _opts: ScanOptions) -> Inventory:
        return Inventory(taken_at=clock.at(), pod_dirs=(pod_dir("u-web"), pod_dir("u-dead")))

    def counts(modes: list[str]) -> list[int | None]:
        source = Source(clock)
        out: list[int | None] = []
        with Ledger(db) as ledger:
            engine = Engine(roots=Roots(), source=source, ledger=ledger, executor=DryRunExecutor(),
                            settings=EngineSettings(phases=PhasePolicy(consecutive_scans=5, grace_seconds=GRACE),
                                                    correlation=CorrelationPolicy(min_age_seconds=0)),
                            clock=clock, scanner=scan, boot_clock=lambda: None)
            for mode in modes:
                source.mode = mode
                engine.cycle()
                item = next((i for i in ledger.items().values() if i.kind is Kind.POD_DIR), None)
                out.append(item.orphan_count if item else None)
                clock.t += INTERVAL
        return out

    assert counts(["ok", "ok"]) == [1, 2]
    assert counts(["unavailable", "unavailable", "ok", "unavailable", "ok"]) == [2, 2, 3, 0, 1]
