"""One engine cycle against a sandbox node and its containerd, with no scan count, grace or minimum age."""

from __future__ import annotations

from pathlib import Path

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import CycleReport, Engine, EngineSettings, NullMetrics
from nodegc.ledger.store import Ledger
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.sandbox.containerd import SandboxContainerd
from nodegc.sandbox.node import SandboxNode
from nodegc.settings import ScanOptions


def one_cycle(node: SandboxNode, rt: SandboxContainerd, snap: Path) -> CycleReport:
    """A cycle with the pods of snapshot file `snap` and the runtime `rt`, acting for real (HostExecutor)."""
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0),
                              scan=ScanOptions(min_age_seconds=0, runtime_endpoint=rt.endpoint, runtime_timeout=3.0))
    with Ledger(":memory:") as ledger:
        engine = Engine(roots=node.roots, source=SnapshotSource(snap, node.node_name), ledger=ledger,
                        executor=HostExecutor(node.roots, runtime_endpoint=rt.endpoint), settings=settings,
                        metrics=NullMetrics())
        return engine.cycle()
