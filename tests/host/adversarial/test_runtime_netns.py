"""Attacks on the netns files under containerd's state dir, against a real containerd: symlinks planted in
its netns folder (at a live namespace of /run/netns, at a file outside), files there that are not mounts,
a READY sandbox's namespace that a cache entry of another id names, and the runtime going away while a lost
sandbox's namespace waits for its word."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from nodegc.sandbox.containerd import SandboxContainerd, SandboxSpec, new_spec, pod_record, sandbox_ips, write_pods
from nodegc.sandbox.node import NETWORK_NAME, SandboxNode, _new_netns
from tests.host.test_runtime_netns import held, lose_metadata, netns_of, run_nodegc

Runtime = tuple[SandboxNode, SandboxContainerd]
_OLD = time.time() - 3600


def _findings(proc: object) -> dict[tuple[str, str], dict[str, object]]:
    out = getattr(proc, "stdout", "")
    doc = json.loads(out)
    return {(f["kind"], f["id"]): f for f in doc["findings"]}


def test_symlinks_in_the_state_dir_netns_folder_are_never_followed(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    web = new_spec("web")
    sid = rt.run_sandbox(web)
    folder = Path(netns_of(rt, sid)).parent
    live = node.netns_dir / "live-x"  # a namespace of /run/netns that nothing ties to a pod
    _new_netns(live)
    live_inode = os.stat(live).st_ino
    outside = tmp_path / "outside"
    outside.write_bytes(b"")  # empty, like a netns leftover: removed if a link to it were followed
    os.utime(outside, (_OLD, _OLD))
    (folder / "to-live").symlink_to(live)
    (folder / "to-outside").symlink_to(outside)
    (folder / "to-dir").symlink_to(tmp_path)
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, web, sandbox_ips(rt, sid)[0])])

    scan = run_nodegc(node, rt, snap, "scan", "-o", "json")
    assert scan.returncode in (0, 3), scan.stderr[-3000:]
    doc = json.loads(scan.stdout)
    ids = {f["id"] for f in doc["findings"]}
    for name in ("to-live", "to-outside", "to-dir"):
        assert str(folder / name) not in ids
        problems = doc["problems"]
        assert any(p["path"] == str(folder / name) and "symlink" in p["reason"] for p in problems), problems
    clean = run_nodegc(node, rt, snap, "clean", "--apply", "--state-dir", str(tmp_path / "state"), "-o", "json")
    assert clean.returncode in (0, 3), clean.stderr[-3000:]
    for name in ("to-live", "to-outside", "to-dir"):
        assert (folder / name).is_symlink()
    assert outside.exists() and os.path.ismount(live) and os.stat(live).st_ino == live_inode
    assert held(node, netns_of(rt, sid))["mounted"]


def test_a_symlinked_netns_folder_is_not_read(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    """The folder itself replaced by a link (to /run/netns): nothing below it is inventoried or removed."""
    from nodegc.inventory.scanning import scan_node
    from nodegc.settings import ScanOptions

    node = sandbox_node
    _new_netns(node.netns_dir / "live-y")
    state = tmp_path / "state"
    (state / "io.containerd.grpc.v1.cri").mkdir(parents=True)
    (state / "io.containerd.grpc.v1.cri" / "netns").symlink_to(node.netns_dir)
    inv = scan_node(node.roots, ScanOptions(runtime_state_dir=state))
    assert [n.path for n in inv.netns] == [str(node.netns_dir / "live-y")] and not inv.netns[0].runtime_dir
    assert any("symlink, not followed" in p.reason for p in inv.problems), inv.problems


def test_files_that_are_not_mounts(containerd_node: Runtime, tmp_path: Path) -> None:
    """An old empty file no sandbox names is a leftover (removed); a file holding data is no namespace file
    (kept). (A READY sandbox's own netns file that lost its mount containerd removes itself, at the next
    PodSandboxStatus; the planner keeps such a file its sandbox's: tests/unit/test_runtime_netns.py.)"""
    node, rt = containerd_node
    web = new_spec("web")
    sid = rt.run_sandbox(web)
    netns = netns_of(rt, sid)
    before = held(node, netns)
    folder = Path(netns).parent
    empty, data = folder / "cni-empty", folder / "cni-data"
    empty.write_bytes(b"")
    data.write_bytes(b"not a namespace")
    for p in (empty, data):
        os.utime(p, (_OLD, _OLD))
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, web, sandbox_ips(rt, sid)[0])])
    by = _findings(run_nodegc(node, rt, snap, "scan", "-o", "json"))
    assert by[("netns", str(empty))]["class"] == "leaked_netns"
    clean = run_nodegc(node, rt, snap, "clean", "--apply", "--state-dir", str(tmp_path / "state"), "-o", "json")
    assert clean.returncode in (0, 3), clean.stderr[-3000:]
    assert not empty.exists()
    assert data.read_bytes() == b"not a namespace"
    assert held(node, netns) == before


def test_a_ready_sandboxs_netns_that_a_cache_entry_of_another_id_names(containerd_node: Runtime,
                                                                      tmp_path: Path) -> None:
    """Where the runtime says the netns is decides: a dead pod's entry (another container id) naming the
    READY sandbox's namespace is never DEL'd there, and the namespace and its veth stay the sandbox's."""
    node, rt = containerd_node
    web = new_spec("web")
    sid = rt.run_sandbox(web)
    netns = netns_of(rt, sid)
    ip = sandbox_ips(rt, sid)[0]
    before = held(node, netns)
    results = node.cni_data_dir / "results"
    real = json.loads((results / f"{NETWORK_NAME}-{sid}-eth0").read_text())
    fake_id = "f" * 64
    fake = dict(real, containerId=fake_id, netns=netns,
                cniArgs=[["K8S_POD_NAMESPACE", "default"], ["K8S_POD_NAME", "dead"],
                         ["K8S_POD_UID", "00000000-0000-0000-0000-00000000dead"],
                         ["K8S_POD_INFRA_CONTAINER_ID", fake_id]])
    fake_path = results / f"{NETWORK_NAME}-{fake_id}-eth0"
    fake_path.write_text(json.dumps(fake))
    os.utime(fake_path, (_OLD, _OLD))
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, web, ip)])
    by = _findings(run_nodegc(node, rt, snap, "scan", "-o", "json"))
    ns = by[("netns", netns)]
    assert ns["class"] == "in_use" and ns["owner"]["container_id"] == sid, ns  # type: ignore[index]
    assert by[("veth", before["host_veth"])]["class"] == "in_use"
    assert by[("cni_cache", str(fake_path))]["class"] in ("conflict", "protected"), by[("cni_cache", str(fake_path))]
    clean = run_nodegc(node, rt, snap, "clean", "--apply", "--state-dir", str(tmp_path / "state"), "-o", "json")
    assert clean.returncode in (0, 3), clean.stderr[-3000:]
    assert held(node, netns) == before
    assert fake_path.exists() and (node.ipam_dir / NETWORK_NAME / ip).exists()


def test_a_lost_sandboxs_netns_waits_while_the_runtime_is_away(containerd_node: Runtime, tmp_path: Path) -> None:
    """Only the runtime's word ties a lost sandbox's namespace to a dead sandbox: while the runtime is down,
    or its list misses a running pod's sandbox, nothing of it is reclaimed; once it answers, it is."""
    node, rt = containerd_node
    web = new_spec("web")
    old_sid = rt.run_sandbox(web)
    old_netns = netns_of(rt, old_sid)
    old_held = held(node, old_netns)
    lose_metadata(rt)
    snap_missing = write_pods(tmp_path / "missing.json", [pod_record(node, web, "10.244.0.250")])
    # The runtime lists no sandbox for the running pod (it has not been recreated yet): incomplete.
    clean = run_nodegc(node, rt, snap_missing, "clean", "--apply", "--state-dir", str(tmp_path / "state"))
    assert clean.returncode in (0, 3, 5) and "runtime" in clean.stdout, (clean.stdout, clean.stderr[-3000:])
    assert held(node, old_netns) == old_held
    new_sid = rt.run_sandbox(SandboxSpec(web.name, web.namespace, web.uid, attempt=1))
    new_ip = sandbox_ips(rt, new_sid)[0]
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, web, new_ip)])
    rt.kill()  # the runtime is down
    clean = run_nodegc(node, rt, snap, "clean", "--apply", "--state-dir", str(tmp_path / "state"))
    assert clean.returncode in (0, 3, 5) and "unreachable" in clean.stdout, (clean.stdout, clean.stderr[-3000:])
    assert held(node, old_netns) == old_held
    rt.start()
    clean = run_nodegc(node, rt, snap, "clean", "--apply", "--state-dir", str(tmp_path / "state"))
    assert clean.returncode in (0, 3), clean.stderr[-3000:]
    assert not os.path.lexists(old_netns) and not node.link_exists(str(old_held["host_veth"]))
