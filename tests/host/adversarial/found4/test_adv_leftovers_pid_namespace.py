"""Adversarial, against a real containerd: nodegc in a pid namespace of its own (a DaemonSet without
hostPID) sees none of containerd's shims, nor the init processes its task bundles name. A sandbox whose
metadata containerd lost while its shim and processes ran was judged from that blind process table: its
task bundles were `orphaned_runtime_dir`, and `clean --apply` unmounted the rootfs of running containers.
Now: the runtime lists a READY sandbox whose shim is not in sight, so no leftover is judged."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from nodegc.inventory.cri.reading import sandbox_from_status
from nodegc.sandbox.containerd import SandboxContainerd, new_spec, pod_record, write_pods
from nodegc.sandbox.node import SandboxNode, is_mounted

Runtime = tuple[SandboxNode, SandboxContainerd]
TASKS = "io.containerd.runtime.v2.task/k8s.io"


def _nodegc_own_pid_ns(node: SandboxNode, rt: SandboxContainerd, snap: Path, *argv: str) -> dict[str, Any]:
    r = node.roots
    roots = ["--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir), "--netns-dir",
             str(r.netns_dir), "--net-ns", str(r.net_ns), "--cni-bin-dir", "/usr/lib/cni",
             "--cni-conf-dir", str(r.cni_conf_dir), "--pods-from", str(snap), "--node", node.node_name,
             "--runtime-endpoint", rt.endpoint, "--runtime-state-dir", str(rt.state), "--min-age", "0",
             "--pod-log-dir", str(rt.log_root)]
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "nodegc", *argv,
                           *roots, "-o", "json"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode in (0, 3), done.stderr[-2000:]
    doc = json.loads(done.stdout)
    return {f["id"]: f for f in doc.get("findings", []) if f["kind"] == "runtime_leftover"}


def test_a_blind_process_table_judges_no_leftover(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    lost = new_spec("lost")
    lost_sid = rt.run_sandbox(lost)
    lost_cid = rt.run_container(lost_sid, lost)
    rt.kill()  # containerd dies and loses its metadata; the shim and the containers run on
    shutil.rmtree(rt.root / "io.containerd.metadata.v1.bolt", ignore_errors=True)
    rt.start()
    live = new_spec("live")
    live_sid = rt.run_sandbox(live)
    rt.run_container(live_sid, live)
    with rt.client() as c:
        status = c.sandbox_status(live_sid, verbose=True)
    assert status is not None
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, live, sandbox_from_status(status).ips[0])])
    rootfs = [rt.state / TASKS / i / "rootfs" for i in (lost_sid, lost_cid)]
    assert all(is_mounted(p) for p in rootfs)

    found = _nodegc_own_pid_ns(node, rt, snap, "scan")
    for cid in (lost_sid, lost_cid):
        f = found[str(rt.state / TASKS / cid)]
        assert f["class"] == "protected" and "shim" in f["evidence"][-1], f

    _nodegc_own_pid_ns(node, rt, snap, "clean", "--apply", "--state-dir", str(tmp_path / "state"))
    assert all(is_mounted(p) for p in rootfs), "the rootfs of running containers was unmounted"
    assert all((rt.state / TASKS / i).is_dir() for i in (lost_sid, lost_cid))
