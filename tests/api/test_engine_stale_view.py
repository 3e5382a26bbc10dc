"""The engine on a watch-based desired state: a stalled watch makes the view stale, and a stale view
refuses every destructive step (nothing reaches the executor), with the reason in the metrics."""

from __future__ import annotations

import time
from pathlib import Path

from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.resources import Inventory
from nodegc.observe.metrics import Metrics
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.api.fakeapi import FakeKubeAPI
from tests.api.test_reflector import pod, reflector
from tests.unit.factories import NOW, pod_dir


def scanner(_roots: Roots, _options: ScanOptions) -> Inventory:
    # The live pod's directory and a dead pod's directory: one reclaim candidate when the view is fresh.
    return Inventory(taken_at=NOW, pod_dirs=(pod_dir("uid-default-web"), pod_dir("uid-dead")))


def test_stalled_watch_refuses_destructive_steps(tmp_path: Path) -> None:
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=("node-a",)) as api:
        api.add_pod(pod("web"))
        ref = reflector(api.write_kubeconfig(tmp_path / "kubeconfig"), idle_timeout_seconds=30.0).start()
        try:
            assert ref.wait_synced(30)
            settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                                      correlation=CorrelationPolicy(min_age_seconds=0), max_desired_age_seconds=1.0)
            metrics = Metrics()
            executor = DryRunExecutor()
            with Ledger(":memory:") as ledger:
                engine = Engine(roots=Roots(), source=ref, ledger=ledger, executor=executor, settings=settings,
                                metrics=metrics, scanner=scanner)
                fresh = engine.cycle()
                assert fresh.blocked == [] and executor.actions, fresh.blocked
                api.stall_watches(5.0)
                time.sleep(1.5)
                executor.actions.clear()
                stale = engine.cycle()
        finally:
            ref.stop()
    assert stale.blocked and stale.blocked[0].startswith("stale_source")
    assert executor.actions == []
    assert 'nodegc_actions_blocked_total{reason="stale_source"} 1.0' in metrics.render().decode()
