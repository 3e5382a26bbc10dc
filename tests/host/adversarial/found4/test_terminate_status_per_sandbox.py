"""Terminate asks the runtime once per sandbox, not once per item, against a real containerd: a reboot
leaves two lost sandboxes with half a dozen attachments each (reservation, cache entries, chains, netns),
and each terminate phase makes one fresh PodSandboxStatus per sandbox, again in the next phase (never the
scan's, never the previous phase's)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import Engine, EngineSettings, NullMetrics
from nodegc.inventory.cri.runtimes import runtime_reader
from nodegc.ledger.store import Ledger
from nodegc.model.runtime import RuntimeSandbox
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor, Executor, HostExecutor
from nodegc.sandbox.containerd import SandboxContainerd, SandboxSpec, new_spec, pod_record, sandbox_ips, write_pods
from nodegc.sandbox.node import NETWORK_NAME, SandboxNode
from nodegc.settings import ScanOptions

Runtime = tuple[SandboxNode, SandboxContainerd]


def test_one_fresh_status_per_sandbox_per_terminate_phase(
    containerd_node: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, rt = containerd_node
    specs = [new_spec("web"), new_spec("db")]
    old = {s.name: rt.run_sandbox(s) for s in specs}
    old_ips = {name: sandbox_ips(rt, sid)[0] for name, sid in old.items()}
    rt.kill_everything()
    rt.wipe_state(metadata=True)
    rt.start()
    new = {s.name: rt.run_sandbox(SandboxSpec(s.name, s.namespace, s.uid, attempt=1)) for s in specs}
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, s, sandbox_ips(rt, new[s.name])[0]) for s in specs])

    scan = ScanOptions(min_age_seconds=0, runtime_endpoint=rt.endpoint, runtime_timeout=3.0)
    reader = runtime_reader(scan)
    assert reader is not None
    calls: Counter[str] = Counter()
    real = reader.fresh_status

    def counting(sandbox_id: str) -> RuntimeSandbox | None:
        calls[sandbox_id] += 1
        return real(sandbox_id)

    monkeypatch.setattr(reader, "fresh_status", counting)
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0), scan=scan)

    def engine(ledger: Ledger, executor: Executor) -> Engine:
        return Engine(roots=node.roots, source=SnapshotSource(snap, node.node_name), ledger=ledger,
                      executor=executor, settings=settings, metrics=NullMetrics())

    with Ledger(tmp_path / "ledger.db") as ledger:
        dry = engine(ledger, DryRunExecutor())
        first = dry.cycle()
        per_sandbox = Counter(i.container_id for i, o in first.outcomes if o.skipped)
        assert {old["web"], old["db"]} <= set(per_sandbox), first.outcomes
        assert all(per_sandbox[old[n]] >= 3 for n in old), per_sandbox  # several items per sandbox
        assert calls == Counter({old["web"]: 1, old["db"]: 1}), calls
        dry.cycle()  # the next terminate phase asks again: a status is never carried over
        assert calls == Counter({old["web"]: 2, old["db"]: 2}), calls

        applied = engine(ledger, HostExecutor(node.roots, runtime_endpoint=rt.endpoint)).cycle()
        assert calls == Counter({old["web"]: 3, old["db"]: 3}), calls
        assert applied.outcomes and all(o.ok for _, o in applied.outcomes), applied.outcomes
    for name, sid in old.items():
        assert not (node.ipam_dir / NETWORK_NAME / old_ips[name]).exists()
        assert not list((node.cni_data_dir / "results").glob(f"*{sid}*"))
    assert set(calls) == set(old.values())  # the live sandboxes are never items: never asked at terminate
