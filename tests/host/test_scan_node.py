"""End to end on a real sandbox node: the real CNI plugins make the residue, nodegc finds exactly it."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nodegc.cli import EXIT_RESIDUE, main
from nodegc.desired.snapshot import SnapshotSource
from nodegc.inventory.scanning import scan_node
from nodegc.model.findings import Finding, FindingClass
from nodegc.model.resources import Kind
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.sandbox.node import SandboxNode

FC = FindingClass
FULL_ATTACHMENT = {
    (FC.LEAKED_IP, Kind.IP_RESERVATION), (FC.STALE_CNI_CACHE, Kind.CNI_CACHE), (FC.LEAKED_NETNS, Kind.NETNS),
    (FC.DANGLING_VETH, Kind.VETH), (FC.LEAKED_CHAIN, Kind.IPTABLES_CHAIN),
}
HOSTPORT = {(FC.LEAKED_CHAIN, Kind.IPTABLES_CHAIN), (FC.LEAKED_HOSTPORT_RULE, Kind.HOSTPORT_RULE)}


def scan(node: SandboxNode, tmp_path: Path) -> list[Finding]:
    snapshot = node.write_snapshot(tmp_path / "pods.json")
    desired = SnapshotSource(snapshot, node.node_name).fetch()
    inventory = scan_node(node.roots)
    assert inventory.problems == ()
    now = datetime.now(UTC)
    return list(correlate(inventory, desired, now=now, policy=CorrelationPolicy(min_age_seconds=0)))


def by_owner(findings: list[Finding]) -> dict[str | None, set[tuple[FindingClass, Kind]]]:
    out: dict[str | None, set[tuple[FindingClass, Kind]]] = defaultdict(set)
    for f in findings:
        out[f.owner.uid].add((f.cls, f.kind))
    return out


def test_every_residue_class_found_and_live_pods_in_use(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    node = sandbox_node
    live = [node.add_pod("web-0", host_port=8080), node.add_pod("web-1"), node.add_pod("db-0", volumes=("a", "b"))]
    pending = node.add_pod("starting", phase="Pending")
    no_del = node.add_pod("gone-no-del", host_port=9090)
    netns_gone = node.add_pod("gone-netns")
    mounts_left = node.add_pod("gone-mounts")
    dir_left = node.add_pod("gone-dir")
    job = node.add_pod("job")
    node.delete_without_cni_del(no_del)
    node.delete_netns_only(netns_gone)
    node.delete_leaving_mounts(mounts_left)
    node.delete_leaving_dir(dir_left)
    node.terminate(job)

    findings = scan(node, tmp_path)
    owners = by_owner(findings)
    for pod in [*live, pending]:
        classes = {c for c, _ in owners[pod.uid]}
        assert classes == {FC.IN_USE}, (pod.name, owners[pod.uid])
        kinds = {k for _, k in owners[pod.uid]}
        assert {Kind.POD_DIR, Kind.VOLUME_MOUNT, Kind.IP_RESERVATION, Kind.CNI_CACHE, Kind.NETNS, Kind.VETH,
                Kind.IPTABLES_CHAIN} <= kinds
    assert (FC.IN_USE, Kind.HOSTPORT_RULE) in owners[live[0].uid]

    assert owners[no_del.uid] == FULL_ATTACHMENT | HOSTPORT
    assert owners[netns_gone.uid] == {(FC.LEAKED_IP, Kind.IP_RESERVATION), (FC.STALE_CNI_CACHE, Kind.CNI_CACHE),
                                      (FC.LEAKED_CHAIN, Kind.IPTABLES_CHAIN)}
    assert owners[mounts_left.uid] == {(FC.ORPHANED_POD_DIR, Kind.POD_DIR),
                                       (FC.ORPHANED_VOLUME_MOUNT, Kind.VOLUME_MOUNT)}
    assert owners[dir_left.uid] == {(FC.ORPHANED_POD_DIR, Kind.POD_DIR)}
    # Terminal: the kubelet keeps the directory until deletion, but volumes and network are residue.
    terminal_dir = {(FC.IN_USE, Kind.POD_DIR), (FC.ORPHANED_VOLUME_MOUNT, Kind.VOLUME_MOUNT)}
    assert owners[job.uid] == FULL_ATTACHMENT | terminal_dir
    assert not [f for f in findings if f.cls in (FC.UNKNOWN, FC.CONFLICT, FC.PROTECTED)]
    # Nothing is attributed to a pod we did not build.
    assert set(owners) <= {p.uid for p in node.pods.values()}


def test_recreated_pod_with_same_name_keeps_new_resources(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    node = sandbox_node
    old = node.add_pod("db-0", namespace="shop")
    node.delete_without_cni_del(old)
    new = node.add_pod("db-0", namespace="shop")
    owners = by_owner(scan(node, tmp_path))
    assert {c for c, _ in owners[new.uid]} == {FC.IN_USE}
    assert owners[old.uid] == FULL_ATTACHMENT


def test_fresh_residue_is_protected_by_min_age(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    node = sandbox_node
    node.add_pod("live")
    node.delete_without_cni_del(node.add_pod("gone"))
    desired = SnapshotSource(node.write_snapshot(tmp_path / "pods.json"), node.node_name).fetch()
    findings = correlate(scan_node(node.roots), desired, now=datetime.now(UTC))
    assert not [f for f in findings if f.cls.is_residue]
    assert {f.cls for f in findings} == {FC.IN_USE, FC.PROTECTED}


def test_cli_scan_json(sandbox_node: SandboxNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = sandbox_node
    node.add_pod("live")
    gone = node.add_pod("gone", host_port=8081)
    node.delete_without_cni_del(gone)
    snapshot = node.write_snapshot(tmp_path / "pods.json")
    roots = node.roots
    argv = ["scan", "-o", "json", "--pods-from", str(snapshot), "--min-age", "0",
            "--kubelet-root", str(roots.kubelet_root), "--cni-data-dir", str(roots.cni_data_dir),
            "--netns-dir", str(roots.netns_dir), "--net-ns", str(roots.net_ns)]
    assert main(argv) == EXIT_RESIDUE
    doc = json.loads(capsys.readouterr().out)
    assert doc["node"] == node.node_name
    residue = [f for f in doc["findings"] if f["residue"]]
    assert {f["owner"]["uid"] for f in residue} == {gone.uid}
    assert {f["class"] for f in residue} == {c.value for c, _ in FULL_ATTACHMENT | HOSTPORT}
    for f in doc["findings"]:
        assert set(f) >= {"class", "kind", "id", "owner", "owner_state", "evidence"}
