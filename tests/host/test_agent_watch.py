"""The agent against an HTTP-level API: a deleted pod's residue goes within grace + seconds of the
deletion event, long before the periodic scan, and the agent never lists pods per scan."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from nodegc.desired.snapshot import SnapshotSource
from nodegc.inventory.scanning import scan_node
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.sandbox.node import SandboxNode
from tests.api.fakeapi import FakeKubeAPI

GRACE = 2.0


def residue_of(node: SandboxNode, uid: str) -> list[str]:
    desired = SnapshotSource(node.write_snapshot(node.root / "pods.json"), node.node_name).fetch()
    findings = correlate(scan_node(node.roots), desired, now=datetime.now(UTC),
                         policy=CorrelationPolicy(min_age_seconds=0))
    return [f"{f.cls.value} {f.id}" for f in findings if f.owner.uid == uid and f.cls.is_residue]


def test_deleted_pod_is_reclaimed_within_grace_of_its_deletion_event(sandbox_node: SandboxNode,
                                                                      tmp_path: Path) -> None:
    node = sandbox_node
    live = node.add_pod("web", host_port=8080)
    doomed = node.add_pod("batch-1")
    with FakeKubeAPI(bookmark_interval=0.5, kubelets=(node.node_name,)) as api:
        for pod in (live, doomed):
            api.add_pod(node.pod_record(pod))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        r = node.roots
        argv = [sys.executable, "-m", "nodegc", "agent", "--kubeconfig", str(kubeconfig), "--node", node.node_name,
                "--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir),
                "--netns-dir", str(r.netns_dir), "--net-ns", str(r.net_ns), "--cni-bin-dir", "/usr/lib/cni",
                "--state-dir", str(tmp_path / "state"), "--min-age", "0", "--interval", "600",
                "--consecutive-scans", "2", "--grace", str(GRACE), "--metrics-address", "",
                "--log-format", "json", "--log-level", "info"]
        agent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert api.wait_for(lambda: any(q.is_watch for q in api.requests), timeout=30)
            time.sleep(1.0)  # the first cycle runs at start; the next periodic one is 600 s away
            node.delete_without_cni_del(doomed)
            api.delete_pod(doomed.namespace, doomed.name)
            deleted_at = time.monotonic()
            assert residue_of(node, doomed.uid)
            deadline = deleted_at + GRACE + 10
            while residue_of(node, doomed.uid) and time.monotonic() < deadline:
                time.sleep(0.2)
            took = time.monotonic() - deleted_at
            assert residue_of(node, doomed.uid) == [], f"not reclaimed {took:.1f}s after the deletion"
            assert took <= GRACE + 8
            assert [f for f in residue_of(node, live.uid)] == []
        finally:
            agent.terminate()
            _, err = agent.communicate(timeout=30)
        assert agent.returncode == 0, err.decode()[-3000:]
        lists = [q for q in api.requests if q.path.endswith("/pods") and q.is_list]
        gets = [q for q in api.requests if q.method == "GET" and "/pods/" in q.path]
        # One list at start (and none per scan); one GET per reclaim candidate with an owner name.
        assert len(lists) == 1, [q.query for q in lists]
        assert gets and all(q.path.endswith(f"/pods/{doomed.name}") for q in gets)
