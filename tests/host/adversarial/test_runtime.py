"""Attacks on the runtime's word, against a real containerd: an empty answer on a node with running pods, the
runtime dying between detect and terminate, a READY sandbox whose cache entry names a dead pod, and a
sandbox id whose creation time changed (a reused id)."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from pathlib import Path

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import NullMetrics
from nodegc.inventory.scanning import scan_node
from nodegc.ledger.store import Ledger
from nodegc.model.findings import FindingClass
from nodegc.model.items import Phase
from nodegc.model.resources import Inventory, Kind
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.reclaim.sandboxes import remove_sandbox
from nodegc.sandbox.containerd import SandboxContainerd, SandboxSpec, new_spec, pod_record, sandbox_ips, write_pods
from nodegc.sandbox.node import NETWORK_NAME, SandboxNode
from nodegc.settings import Roots, ScanOptions
from tests.host.adversarial.found.cycle import engine

Runtime = tuple[SandboxNode, SandboxContainerd]


class CountingMetrics(NullMetrics):
    def __init__(self) -> None:
        self.blocks: list[str] = []

    def blocked(self, reason: str) -> None:
        self.blocks.append(reason)


def _reboot_with_live_pod(node: SandboxNode, rt: SandboxContainerd, tmp: Path) -> tuple[str, str, str, Path]:
    """A live pod whose old sandbox was lost in a reboot: (old id, old IP, new id, snapshot)."""
    web = new_spec("web")
    old = rt.run_sandbox(web)
    old_ip = sandbox_ips(rt, old)[0]
    rt.kill_everything()
    rt.wipe_state(metadata=True)
    rt.start()
    new = rt.run_sandbox(SandboxSpec(web.name, web.namespace, web.uid, attempt=1))
    snap = write_pods(tmp / "pods.json", [pod_record(node, web, sandbox_ips(rt, new)[0])])
    return old, old_ip, new, snap


def test_an_empty_list_on_a_node_with_running_pods_decides_nothing(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    _, old_ip, _, snap = _reboot_with_live_pod(node, rt, tmp_path)
    # The runtime loses its metadata again and answers an empty list while the API shows a running pod.
    rt.kill()
    rt.wipe_state(metadata=True)
    rt.start()
    metrics = CountingMetrics()
    with Ledger(":memory:") as ledger:
        report = engine(node, rt, snap, ledger, metrics=metrics).cycle()
    assert "runtime_unavailable" in metrics.blocks
    assert any("lists no sandbox" in b for b in report.blocked)
    # Today's rules: the old attachment is tied to the live pod's UID and stays.
    assert (node.ipam_dir / NETWORK_NAME / old_ip).exists()
    assert not [o for o in report.outcomes if o[0].kind is not Kind.SANDBOX and o[1].ok]


def test_runtime_dies_between_detect_and_terminate(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    old, old_ip, new, snap = _reboot_with_live_pod(node, rt, tmp_path)
    calls = {"n": 0}

    def dying_scanner(roots: Roots, options: ScanOptions) -> Inventory:
        calls["n"] += 1
        if calls["n"] == 2:  # the terminate phase's fresh scan
            rt.kill()
        return scan_node(roots, options)

    metrics = CountingMetrics()
    with Ledger(tmp_path / "ledger.db") as ledger:
        report = engine(node, rt, snap, ledger, metrics=metrics, scanner=dying_scanner).cycle()
        assert not report.outcomes, "no destructive step that needed the runtime"
        assert "runtime_unavailable" in metrics.blocks
        assert (node.ipam_dir / NETWORK_NAME / old_ip).exists()
        marked = [i for i in ledger.items(active_only=True).values() if i.container_id == old]
        assert marked and all(i.phase is not Phase.CLOSED for i in marked)
        # The runtime returns: the next cycle reclaims the old sandbox's parts and nothing of the new one.
        rt.start()
        new_ips = sandbox_ips(rt, new)
        for _ in range(3):
            engine(node, rt, snap, ledger, metrics=CountingMetrics()).cycle()
        assert not (node.ipam_dir / NETWORK_NAME / old_ip).exists()
        assert sandbox_ips(rt, new) == new_ips
        assert (node.ipam_dir / NETWORK_NAME / new_ips[0]).exists()


def test_ready_sandbox_whose_cache_entry_names_a_dead_pod(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    live = new_spec("live")
    sid = rt.run_sandbox(live)
    ip = sandbox_ips(rt, sid)[0]
    entry = node.cni_data_dir / "results" / f"{NETWORK_NAME}-{sid}-eth0"
    doc = json.loads(entry.read_text())
    doc["cniArgs"] = [[k, "00000000-dead-dead-dead-000000000000" if k == "K8S_POD_UID" else v]
                      for k, v in doc.get("cniArgs", [])]
    entry.write_text(json.dumps(doc))
    # The API has never heard of the pod either: only the runtime's READY keeps it.
    snap = write_pods(tmp_path / "pods.json", [])
    metrics = CountingMetrics()
    with Ledger(":memory:") as ledger:
        report = engine(node, rt, snap, ledger, metrics=metrics).cycle()
    by = {(f.kind, f.id): f for f in report.findings}
    assert by[(Kind.IP_RESERVATION, f"{NETWORK_NAME}/{ip}")].cls is FindingClass.IN_USE
    assert by[(Kind.SANDBOX, sid)].cls is FindingClass.RUNNING_ORPHAN
    assert not [f for f in report.findings if f.cls.is_residue and sid in (f.owner.container_id, f.id)]
    assert sandbox_ips(rt, sid) == (ip,)


def test_a_reused_sandbox_id_is_not_removed(containerd_node: Runtime) -> None:
    _, rt = containerd_node
    sid = rt.run_sandbox(new_spec("a"))
    rt.stop_sandbox(sid)
    with rt.client() as c:
        reply = c.sandbox_status(sid, verbose=True)
    from nodegc.inventory.cri.reading import sandbox_from_status

    seen = sandbox_from_status(reply)
    assert seen.created_at is not None
    # What was verified carries another creation time: the id now names another sandbox.
    other = dataclasses.replace(seen, created_at=seen.created_at - timedelta(seconds=30))
    outcome = remove_sandbox(other, endpoint=rt.endpoint, timeout=10.0)
    assert outcome.identity_changed and not outcome.ok
    with rt.client() as c:
        assert c.sandbox_status(sid) is not None


def test_runtime_that_lost_its_metadata_leaves_reported_leftovers(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    lost = new_spec("lost")
    lost_sid = rt.run_sandbox(lost)
    rt.run_container(lost_sid, lost)
    rt.kill()  # the daemon dies; its shims and the sandbox's processes keep running, its state stays...
    import shutil

    shutil.rmtree(rt.root / "io.containerd.metadata.v1.bolt", ignore_errors=True)  # ...but its database is lost
    rt.start()
    kept = new_spec("kept")
    kept_sid = rt.run_sandbox(kept)
    inv = scan_node(node.roots, ScanOptions(runtime_endpoint=rt.endpoint, runtime_state_dir=rt.state))
    assert inv.runtime is not None and [sb.id for sb in inv.runtime.sandboxes] == [kept_sid]
    from nodegc.planning.correlate import correlate

    snap = write_pods(tmp_path / "pods.json", [pod_record(node, kept, sandbox_ips(rt, kept_sid)[0])])
    findings = correlate(inv, SnapshotSource(snap, node.node_name).fetch(), now=inv.taken_at,
                         policy=CorrelationPolicy(min_age_seconds=0))
    left = [f for f in findings if f.kind is Kind.RUNTIME_LEFTOVER]
    assert all(f.cls is FindingClass.RUNTIME_LEFTOVER and not f.cls.is_residue for f in left)
    assert not [f for f in left if kept_sid in f.id or f.owner.container_id == kept_sid]
    lost_parts = {f.id.rsplit("/", 1)[-1] if "/proc/" not in f.id else "shim" for f in left
                  if f.owner.container_id == lost_sid}
    assert lost_sid in lost_parts, [(f.id, f.evidence) for f in left]
