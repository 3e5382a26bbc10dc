"""Streaks are persisted so that a restart does not reset them, and the cycles of a new process before its
first usable desired state restart none (the restart's gap). That exception was unbounded: a process that
saw a dead pod's directory twice, then was down for an hour (or came up into an hour-long API outage, its
watch never syncing), marked it on its first sighting back, one sighting after a time in which nobody knew
which pods existed, where a process that lived through the same outage restarts the streak. The restart's
gap spans a streak only while it is short: no longer than --max-desired-age since the item's last sighting."""

from __future__ import annotations

from pathlib import Path

from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.items import Item, Phase
from nodegc.model.resources import Inventory, Kind
from nodegc.observe.metrics import Metrics
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.adversarial.found11.test_streaks_across_unknown import INTERVAL, Clock, Source
from tests.unit.factories import pod_dir

K, GRACE = 3, 60.0


def _process(clock: Clock, db: Path, modes: list[str], metrics: Metrics | None = None) -> list[Item | None]:
    """One process's cycles (30 s apart) on the persisted ledger `db`; the dead pod directory's item after each."""
    source = Source(clock)

    def scan(_roots: Roots, _opts: ScanOptions) -> Inventory:
        return Inventory(taken_at=clock.at(), pod_dirs=(pod_dir("u-web"), pod_dir("u-dead")))

    out: list[Item | None] = []
    with Ledger(db) as ledger:
        engine = Engine(roots=Roots(), source=source, ledger=ledger, executor=DryRunExecutor(),
                        settings=EngineSettings(phases=PhasePolicy(consecutive_scans=K, grace_seconds=GRACE),
                                                correlation=CorrelationPolicy(min_age_seconds=0)),
                        metrics=metrics or Metrics(), clock=clock, scanner=scan, boot_clock=lambda: None)
        for mode in modes:
            source.mode = mode
            engine.cycle()
            out.append(next((i for i in ledger.items().values() if i.kind is Kind.POD_DIR), None))
            clock.t += INTERVAL
    return out


def test_a_restart_after_an_hour_down_does_not_mark_on_one_sighting(tmp_path: Path) -> None:
    clock, db = Clock(), tmp_path / "ledger.db"
    assert [i.orphan_count for i in _process(clock, db, ["ok", "ok"]) if i] == [1, 2]
    clock.t += 3600.0
    metrics = Metrics()
    back = _process(clock, db, ["ok"], metrics)[0]
    assert back is not None and back.phase is Phase.DETECTED and back.orphan_count == 1
    assert metrics.registry.get_sample_value("nodegc_streaks_restarted_total", {"reason": "restart_gap"}) == 1


def test_a_restart_into_an_hour_long_outage_does_not_mark_on_one_sighting(tmp_path: Path) -> None:
    clock, db = Clock(), tmp_path / "ledger.db"
    _process(clock, db, ["ok", "ok"])
    back = _process(clock, db, ["unavailable"] * 120 + ["ok"])[-1]
    assert back is not None and back.phase is Phase.DETECTED and back.orphan_count == 1


def test_a_quick_restart_keeps_the_streak(tmp_path: Path) -> None:
    clock, db = Clock(), tmp_path / "ledger.db"
    _process(clock, db, ["ok", "ok"])
    back = _process(clock, db, ["unavailable", "ok"])[-1]
    assert back is not None and back.phase is Phase.MARKED
