"""One agent cycle that reclaims for real on a sandbox node: K = 1, no grace, no minimum age (what a planted or
stale file makes happen at once, with nothing else in the way)."""

from __future__ import annotations

from pathlib import Path

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.sandbox.node import SandboxNode


def run_cycle(node: SandboxNode, ledger_path: Path) -> list[tuple[str, str]]:
    """The cycle's outcomes, as (item key, detail)."""
    source = SnapshotSource(node.write_snapshot(node.root / "pods.json"), node.node_name)
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0))
    with Ledger(ledger_path) as ledger:
        report = Engine(roots=node.roots, source=source, ledger=ledger, executor=HostExecutor(node.roots),
                        settings=settings).cycle()
    return [(item.key, outcome.detail) for item, outcome in report.outcomes]
