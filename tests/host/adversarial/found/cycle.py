"""One engine cycle against a sandbox node and its containerd, with no scan count, grace or minimum age."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import CycleReport, Engine, EngineSettings, MetricsSink, NullMetrics
from nodegc.inventory.scanning import scan_node
from nodegc.ledger.store import Ledger
from nodegc.model.resources import Inventory
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.sandbox.containerd import SandboxContainerd
from nodegc.sandbox.node import SandboxNode
from nodegc.settings import Roots, ScanOptions


def engine(node: SandboxNode, rt: SandboxContainerd, snap: Path, ledger: Ledger, *,
           metrics: MetricsSink | None = None,
           scanner: Callable[[Roots, ScanOptions], Inventory] = scan_node) -> Engine:
    """An engine with the pods of snapshot file `snap` and the runtime `rt`, acting for real (HostExecutor)."""
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0),
                              scan=ScanOptions(min_age_seconds=0, runtime_endpoint=rt.endpoint, runtime_timeout=3.0))
    return Engine(roots=node.roots, source=SnapshotSource(snap, node.node_name), ledger=ledger,
                  executor=HostExecutor(node.roots, runtime_endpoint=rt.endpoint), settings=settings,
                  metrics=metrics or NullMetrics(), scanner=scanner)


def one_cycle(node: SandboxNode, rt: SandboxContainerd, snap: Path) -> CycleReport:
    """One cycle of `engine` on a ledger of its own."""
    with Ledger(":memory:") as ledger:
        return engine(node, rt, snap, ledger).cycle()
