"""Residue made by real faults against a real containerd, and what `nodegc clean --apply` does with it.

Faults: a reboot that kills every process and wipes the runtime's state and metadata (the live pods come
back with new sandboxes, the old ones' CNI files and chains stay); a sandbox whose pod left the API while
the runtime still holds it NotReady; a pod deleted from the API while nothing tears its sandbox down; an
IP file left without its cache entry (id only).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from nodegc.sandbox.containerd import SandboxContainerd, SandboxSpec, new_spec, pod_record, write_pods
from nodegc.sandbox.node import NETWORK_NAME, SandboxNode

Runtime = tuple[SandboxNode, SandboxContainerd]


def _nodegc(node: SandboxNode, rt: SandboxContainerd, snap: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    r = node.roots
    roots = ["--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir), "--netns-dir",
             str(r.netns_dir), "--net-ns", str(r.net_ns), "--cni-bin-dir", "/usr/lib/cni",
             "--cni-conf-dir", str(r.cni_conf_dir), "--pods-from", str(snap), "--node", node.node_name,
             "--runtime-endpoint", rt.endpoint, "--min-age", "0"]
    return subprocess.run([sys.executable, "-m", "nodegc", *argv, *roots], capture_output=True, text=True,
                          timeout=300, check=False)


def _status(rt: SandboxContainerd, sid: str) -> tuple[bool, tuple[str, ...], str | None] | None:
    with rt.client() as c:
        from nodegc.inventory.cri.reading import sandbox_from_status

        reply = c.sandbox_status(sid, verbose=True)
    if reply is None:
        return None
    sb = sandbox_from_status(reply)
    return sb.ready, sb.ips, sb.netns_path


def _ip(rt: SandboxContainerd, sid: str) -> str:
    st = _status(rt, sid)
    assert st is not None and st[1]
    return st[1][0]


def test_reboot_orphans_and_id_only_files(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    web, db = new_spec("web"), new_spec("db")
    old = {s.name: rt.run_sandbox(s) for s in (web, db)}
    old_ips = {name: _ip(rt, sid) for name, sid in old.items()}
    # A reboot: every process dies, the runtime's state and metadata are gone; the CNI files stay.
    rt.kill_everything()
    rt.wipe_state(metadata=True)
    rt.start()
    # The kubelet brings the live pods back in new sandboxes.
    new = {s.name: rt.run_sandbox(SandboxSpec(s.name, s.namespace, s.uid, attempt=1)) for s in (web, db)}
    new_state = {name: _status(rt, sid) for name, sid in new.items()}
    # A pod deleted from the API while the runtime holds its sandbox NotReady (the kubelet never removed it).
    gone = new_spec("gone")
    gone_sid = rt.run_sandbox(gone)
    rt.stop_sandbox(gone_sid)
    # A pod deleted from the API while nothing tore its READY sandbox down.
    orphan = new_spec("orphan")
    orphan_sid = rt.run_sandbox(orphan)
    # One old sandbox's cache entry is lost: its IP file names only a container id.
    results = node.cni_data_dir / "results"
    (results / f"{NETWORK_NAME}-{old['db']}-eth0").unlink()

    snap = write_pods(tmp_path / "pods.json",
                      [pod_record(node, s, new_state[s.name][1][0]) for s in (web, db)])  # type: ignore[index]
    scan = _nodegc(node, rt, snap, "scan", "-o", "json")
    assert scan.returncode in (0, 3), scan.stderr
    doc = json.loads(scan.stdout)
    assert doc["runtime"]["name"] == "containerd" and doc["runtime"]["reachable"]
    by = {(f["kind"], f["id"]): f for f in doc["findings"]}
    for name in ("web", "db"):
        ip_finding = by[("ip_reservation", f"{NETWORK_NAME}/{old_ips[name]}")]
        assert ip_finding["class"] == "leaked_ip", ip_finding
        assert by[("ip_reservation", f"{NETWORK_NAME}/{new_state[name][1][0]}")]["class"] == "in_use"  # type: ignore[index]
        assert by[("sandbox", new[name])]["class"] == "in_use"
    assert by[("sandbox", gone_sid)]["class"] == "orphaned_sandbox"
    assert by[("sandbox", orphan_sid)]["class"] == "running_orphan"
    # Nothing of a READY sandbox or of a pod in the API is residue.
    ready = set(new.values()) | {orphan_sid}
    for f in doc["findings"]:
        if f["class"] in ("in_use", "protected", "unknown", "conflict", "running_orphan"):
            continue
        assert f["owner"]["container_id"] not in ready, f

    clean = _nodegc(node, rt, snap, "clean", "--apply", "--state-dir", str(tmp_path / "state"), "-o", "json")
    assert clean.returncode in (0, 3), clean.stderr[-3000:]
    with rt.client() as c:
        listed = {sb.id: sb.state for sb in c.list_sandboxes()}
    assert gone_sid not in listed
    assert orphan_sid in listed and listed[orphan_sid] == 0  # reported, never stopped by default
    for name, sid in new.items():
        assert _status(rt, sid) == new_state[name]
    for name in ("web", "db"):
        assert not (node.ipam_dir / NETWORK_NAME / old_ips[name]).exists(), name
        assert not list(results.glob(f"*{old[name]}*"))
    for name in ("web", "db"):
        assert (node.ipam_dir / NETWORK_NAME / new_state[name][1][0]).exists()  # type: ignore[index]
    nat = node.node_exec("iptables-save", "-t", "nat")
    for name in ("web", "db"):
        assert old[name] not in nat
        assert new[name] in nat
