"""Network namespaces under containerd's state dir (`netns_mounts_under_state_dir = true`), against a real
containerd: inventoried as netns, their veths mapped to them, owned by the sandbox that names them, and
reclaimed like those of /run/netns when their sandbox is lost; a READY sandbox's are never touched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from nodegc.inventory.scanning import scan_node
from nodegc.model.findings import FindingClass
from nodegc.model.resources import Kind
from nodegc.sandbox.containerd import SandboxContainerd, SandboxSpec, new_spec, pod_record, sandbox_ips, write_pods
from nodegc.sandbox.node import NETWORK_NAME, SandboxNode
from nodegc.settings import ScanOptions

Runtime = tuple[SandboxNode, SandboxContainerd]


def run_nodegc(node: SandboxNode, rt: SandboxContainerd, snap: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    r = node.roots
    roots = ["--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir), "--netns-dir",
             str(r.netns_dir), "--net-ns", str(r.net_ns), "--cni-bin-dir", "/usr/lib/cni",
             "--cni-conf-dir", str(r.cni_conf_dir), "--pods-from", str(snap), "--node", node.node_name,
             "--runtime-endpoint", rt.endpoint, "--runtime-state-dir", str(rt.state), "--min-age", "0",
             "--pod-log-dir", str(rt.log_root)]
    return subprocess.run([sys.executable, "-m", "nodegc", *argv, *roots], capture_output=True, text=True,
                          timeout=300, check=False)


def netns_of(rt: SandboxContainerd, sid: str) -> str:
    from nodegc.inventory.cri.reading import sandbox_from_status

    with rt.client() as c:
        reply = c.sandbox_status(sid, verbose=True)
    assert reply is not None
    path = sandbox_from_status(reply).netns_path
    assert path and path.startswith(str(rt.state) + "/io.containerd.grpc.v1.cri/netns/"), path
    return path


def held(node: SandboxNode, netns: str) -> dict[str, Any]:
    """What a sandbox's namespace holds, read with `ip` and the files: the file mounted and its namespace,
    eth0 and its address, and the host end of eth0's veth."""
    eth0 = subprocess.run(["nsenter", f"--net={netns}", "ip", "-o", "addr", "show", "dev", "eth0"],
                          capture_output=True, text=True, timeout=30, check=False)
    link = subprocess.run(["nsenter", f"--net={netns}", "ip", "-o", "link", "show", "dev", "eth0"],
                          capture_output=True, text=True, timeout=30, check=False)
    peer = link.stdout.split(":")[1].strip().rsplit("@if", 1)[-1] if link.returncode == 0 else None
    host = None
    if peer:
        shown = node.node_exec("ip", "-o", "link", "show").splitlines()
        host = next((line.split(":")[1].strip().split("@")[0] for line in shown if line.startswith(f"{peer}:")), None)
    return {
        "mounted": os.path.ismount(netns),
        "ns_inode": os.stat(netns).st_ino if os.path.exists(netns) else None,
        "eth0": " ".join(eth0.stdout.split()[1:4]) if eth0.returncode == 0 else None,
        "host_veth": host,
    }


def lose_metadata(rt: SandboxContainerd) -> None:
    """containerd dies and its database is lost; its shims, sandboxes and state dir (netns mounts) stay."""
    rt.kill()
    shutil.rmtree(rt.root / "io.containerd.metadata.v1.bolt", ignore_errors=True)
    rt.start()


def test_state_dir_netns_are_netns_items_tied_to_their_sandbox(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    web = new_spec("web")
    sid = rt.run_sandbox(web)
    netns = netns_of(rt, sid)
    before = held(node, netns)
    assert before["mounted"] and before["eth0"] and before["host_veth"], before
    inv = scan_node(node.roots, ScanOptions(runtime_endpoint=rt.endpoint, runtime_state_dir=rt.state))
    (entry,) = [n for n in inv.netns if n.path == netns]
    assert entry.mounted and entry.runtime_dir and entry.ns_inode == before["ns_inode"]
    (veth,) = [v for v in inv.veths if v.name == before["host_veth"]]
    assert veth.peer_netns_path == netns
    assert inv.runtime is not None and not [x for x in inv.runtime.leftovers if x.what == "netns"]

    from nodegc.desired.snapshot import SnapshotSource
    from nodegc.planning.correlate import CorrelationPolicy, correlate

    snap = write_pods(tmp_path / "pods.json", [pod_record(node, web, sandbox_ips(rt, sid)[0])])
    findings = correlate(inv, SnapshotSource(snap, node.node_name).fetch(), now=inv.taken_at,
                         policy=CorrelationPolicy(min_age_seconds=0))
    by = {(f.kind, f.id): f for f in findings}
    for key in ((Kind.NETNS, netns), (Kind.VETH, before["host_veth"])):
        assert by[key].cls is FindingClass.IN_USE and by[key].owner.container_id == sid, by[key]
    # Not read at all without the state dir: none of containerd's files is taken for /run/netns's.
    bare = scan_node(node.roots, ScanOptions(runtime_endpoint=rt.endpoint))
    assert not [n for n in bare.netns if n.runtime_dir]


def test_lost_sandboxes_netns_and_veth_reclaimed_ready_ones_untouched(containerd_node: Runtime,
                                                                      tmp_path: Path) -> None:
    """containerd loses its metadata: the old sandboxes' pause processes keep their namespaces (mounted under
    the state dir), veths and IPs. The live pod comes back in a new sandbox; a deleted pod does not."""
    node, rt = containerd_node
    web, gone = new_spec("web"), new_spec("gone")
    old = {s.name: rt.run_sandbox(s) for s in (web, gone)}
    old_netns = {name: netns_of(rt, sid) for name, sid in old.items()}
    old_held = {name: held(node, path) for name, path in old_netns.items()}
    old_ips = {name: sandbox_ips(rt, sid)[0] for name, sid in old.items()}
    lose_metadata(rt)
    new_sid = rt.run_sandbox(SandboxSpec(web.name, web.namespace, web.uid, attempt=1))
    new_netns = netns_of(rt, new_sid)
    new_ip = sandbox_ips(rt, new_sid)[0]
    live = held(node, new_netns)
    assert live["mounted"] and live["eth0"] and live["host_veth"]
    for name, path in old_netns.items():
        assert held(node, path) == old_held[name], "the lost sandbox still holds its namespace"
    rt.forget_pod(gone)
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, web, new_ip)])

    scan = run_nodegc(node, rt, snap, "scan", "-o", "json")
    assert scan.returncode in (0, 3), scan.stderr[-3000:]
    by = {(f["kind"], f["id"]): f for f in json.loads(scan.stdout)["findings"]}
    for name, path in old_netns.items():
        assert by[("netns", path)]["class"] == "leaked_netns", by[("netns", path)]["evidence"]
        assert by[("veth", old_held[name]["host_veth"])]["class"] == "dangling_veth"
    assert by[("netns", new_netns)]["class"] == "in_use"
    assert by[("veth", live["host_veth"])]["class"] == "in_use"
    assert not [f for f in by.values() if f["kind"] == "runtime_leftover" and "/netns/" in f["id"]]

    clean = run_nodegc(node, rt, snap, "clean", "--apply", "--state-dir", str(tmp_path / "state"), "-o", "json")
    assert clean.returncode in (0, 3), clean.stderr[-3000:]
    for name, path in old_netns.items():
        assert not os.path.lexists(path), (name, clean.stdout[-3000:])
        assert not node.link_exists(old_held[name]["host_veth"]), name
        assert not (node.ipam_dir / NETWORK_NAME / old_ips[name]).exists(), name
    assert held(node, new_netns) == live
    assert (node.ipam_dir / NETWORK_NAME / new_ip).exists()
    with rt.client() as c:
        reply = c.sandbox_status(new_sid)
    assert reply is not None and reply.status.state == 0 and sandbox_ips(rt, new_sid) == (new_ip,)
