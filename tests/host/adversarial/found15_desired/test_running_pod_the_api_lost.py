"""A pod the API lost while it runs (an etcd restored from a backup older than the pod), against a real
containerd: its sandbox READY, its emptyDir a real tmpfs mounted under its pod directory. Before, the
network parts were kept and the sandbox reported as a running orphan, but `clean --apply` (K=1, no grace)
unmounted the running pod's volume and removed its directory."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.sandbox import node as sandbox_node
from nodegc.sandbox.containerd import SandboxContainerd, new_spec, pod_record, sandbox_ips, write_pods
from nodegc.sandbox.node import SandboxNode
from nodegc.settings import ScanOptions

Runtime = tuple[SandboxNode, SandboxContainerd]


def _mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return any(line.split()[4] == os.fspath(path) for line in f)


def test_the_volume_of_a_running_pod_the_api_lost_stays_mounted(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    live, lost = new_spec("live"), new_spec("lost")
    live_sid = rt.run_sandbox(live)
    rt.run_sandbox(lost)  # READY: the kubelet has not stopped it yet
    volume = node.kubelet_root / "pods" / lost.uid / "volumes" / "kubernetes.io~empty-dir" / "data"
    volume.mkdir(parents=True)
    sandbox_node._mount_tmpfs(volume)  # the sandbox node's own way of mounting an emptyDir
    (volume / "db").write_text("the running pod's data")
    old = time.time() - 3600
    os.utime(node.kubelet_root / "pods" / lost.uid, (old, old))
    # The restored API: `live` only.
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, live, sandbox_ips(rt, live_sid)[0])])
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0),
                              scan=ScanOptions(min_age_seconds=0, runtime_endpoint=rt.endpoint),
                              max_desired_age_seconds=1e9)
    try:
        with Ledger(tmp_path / "ledger.db") as ledger:
            engine = Engine(roots=node.roots, source=SnapshotSource(snap, node.node_name), ledger=ledger,
                            executor=HostExecutor(node.roots, runtime_endpoint=rt.endpoint), settings=settings)
            for _ in range(3):
                report = engine.cycle()
                assert not [i.key for i, _ in report.outcomes if lost.uid in i.key], report.outcomes
        assert _mounted(volume), "the running pod's volume was unmounted"
        assert (volume / "db").read_text() == "the running pod's data"
    finally:
        if _mounted(volume):
            subprocess.run(["umount", "-l", os.fspath(volume)], check=False, timeout=30)
