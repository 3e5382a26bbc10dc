"""`make demo`: a sandbox node with healthy pods and every kind of residue, scanned by `nodegc scan`.

Runs as root inside private mount and network namespaces (the Makefile arranges that), so nothing it
creates (mounts, namespaces, veths, iptables chains) can reach the machine, and all of it goes away
when it exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from nodegc.sandbox.containerd import (
    SandboxContainerd,
    SandboxSpec,
    containerd_available,
    new_spec,
    pod_record,
    sandbox_ips,
    write_pods,
)
from nodegc.sandbox.node import SandboxError, SandboxNode, namespace_is_private


def _argv(verb: str, node: SandboxNode, snapshot: Path, *extra: str) -> list[str]:
    roots = node.roots
    return [
        sys.executable, "-m", "nodegc", verb,
        "--pods-from", str(snapshot),
        "--node", node.node_name,
        "--kubelet-root", str(roots.kubelet_root),
        "--cni-conf-dir", str(roots.cni_conf_dir),
        "--cni-bin-dir", "/usr/lib/cni",
        "--cni-data-dir", str(roots.cni_data_dir),
        "--netns-dir", str(roots.netns_dir),
        "--net-ns", str(roots.net_ns),
        # The demo's residue is seconds old; production keeps the 60 s minimum age.
        "--min-age", "0",
        "--pod-log-dir", str(node.pod_log_dir),
        *extra,
    ]


def _sandboxes(runtime: SandboxContainerd) -> None:
    """What `crictl pods` would show."""
    with runtime.client() as c:
        for sb in c.list_sandboxes():
            state = "Ready" if sb.state == 0 else "NotReady"
            pod = f"{sb.metadata.namespace}/{sb.metadata.name}"
            print(f"    {sb.id[:13]}  {state:8}  {pod}  attempt {sb.metadata.attempt}")


def runtime_part(node: SandboxNode) -> bool:
    """The container runtime's part: a real containerd through CRI, residue made by real faults."""
    missing = containerd_available()
    if missing:
        print(f"(the container runtime's part needs containerd, runc and busybox-static: {missing}; skipped)")
        return True
    print("\n--- the container runtime's part: a real containerd (CRI, runc) on the same node ---\n")
    for pod in list(node.api_pods()):
        node.delete_cleanly(pod)  # the first part's pods leave: from here on the runtime runs every pod
    runtime = SandboxContainerd(node, firewall=True)
    try:
        runtime.start()
        shop = [new_spec("front-0", namespace="shop"), new_spec("front-1", namespace="shop")]
        old = [runtime.run_sandbox(s) for s in shop]
        print("RunPodSandbox for shop/front-0 and shop/front-1, then a reboot: every process killed, containerd's"
              " state and metadata wiped; the CNI files and chains stay")
        runtime.kill_everything()
        runtime.wipe_state(metadata=True)
        runtime.start()
        new = [runtime.run_sandbox(SandboxSpec(s.name, s.namespace, s.uid, attempt=1)) for s in shop]
        gone = new_spec("worker-5f7", namespace="batch")
        runtime.stop_sandbox(runtime.run_sandbox(gone))
        runtime.forget_pod(gone)
        orphan = new_spec("stray-0", namespace="batch")
        runtime.run_sandbox(orphan)
        runtime.forget_pod(orphan)
        print(f"the pods came back in new sandboxes ({', '.join(sid[:12] for sid in new)}); old ones were"
              f" {', '.join(sid[:12] for sid in old)}\n"
              "batch/worker-5f7: deleted from the API while the runtime holds its sandbox NotReady\n"
              "batch/stray-0: deleted from the API while nothing tore its READY sandbox down\n")
        records = [pod_record(node, s, (sandbox_ips(runtime, sid) or (None,))[0])
                   for s, sid in zip(shop, new, strict=True)]
        snapshot = write_pods(node.root / "pods-cri.json", records)
        print("$ crictl pods   (through nodegc's CRI client)")
        _sandboxes(runtime)
        cri = ["--runtime-endpoint", runtime.endpoint]
        print(f"\n$ nodegc scan --runtime-endpoint {runtime.endpoint} <same flags>\n", flush=True)
        scanned = subprocess.run(_argv("scan", node, snapshot, *cri), timeout=120, check=False)
        state = ["--state-dir", str(node.root / "state-cri")]
        print("\n$ nodegc clean --apply --runtime-endpoint ... <same flags>\n", flush=True)
        cleaned = subprocess.run(_argv("clean", node, snapshot, *cri, *state, "--apply"), timeout=300, check=False)
        print("\n$ crictl pods")
        _sandboxes(runtime)
        print("\n$ nodegc scan --runtime-endpoint ... <same flags>\n", flush=True)
        after = subprocess.run(_argv("scan", node, snapshot, *cri), timeout=120, check=False)
        print(f"\nexit status {after.returncode}; batch/stray-0 stays READY until --stop-running-orphans is given")
        return scanned.returncode in (0, 3) and cleaned.returncode in (0, 3) and after.returncode in (0, 3)
    except SandboxError as e:
        print(f"the container runtime's part failed: {e}")
        return False
    finally:
        runtime.close()


def main() -> int:
    if os.geteuid() != 0:
        print("make demo needs root: it builds a sandbox node with real mounts, namespaces and CNI plugins")
        return 2
    if not (namespace_is_private("mnt") and namespace_is_private("net")):
        print("run the demo through `make demo`: it needs private mount and network namespaces")
        return 2
    started = time.monotonic()
    try:
        node = SandboxNode.create()
    except SandboxError as e:
        print(f"cannot build the sandbox node: {e}")
        return 1
    with node:
        print(f"building sandbox node {node.node_name} under {node.root} (real bridge, host-local, portmap)")
        node.add_pod("web-0", namespace="shop", host_port=8080)
        node.add_pod("web-1", namespace="shop")
        node.add_pod("db-0", namespace="shop", volumes=("data", "wal"))
        job = node.add_pod("report-28110", namespace="batch")
        gone_no_del = node.add_pod("api-7d9f-x2x", namespace="shop", host_port=9090)
        gone_netns = node.add_pod("api-7d9f-k8p", namespace="shop")
        gone_mounts = node.add_pod("cache-0", namespace="shop", volumes=("data",))
        gone_dir = node.add_pod("cron-1765", namespace="batch")

        node.delete_without_cni_del(gone_no_del)
        node.delete_netns_only(gone_netns)
        node.delete_leaving_mounts(gone_mounts)
        node.delete_leaving_dir(gone_dir)
        node.terminate(job, phase="Succeeded")
        snapshot = node.write_snapshot(node.root / "pods.json")
        print(
            f"residue left the ways real nodes leave it ({time.monotonic() - started:.1f}s):\n"
            f"  {gone_no_del.key}: deleted from the API, CNI DEL never ran\n"
            f"  {gone_netns.key}: netns deleted, IPAM file, cache entry and chains left\n"
            f"  {gone_mounts.key}: deleted, volumes still mounted\n"
            f"  {gone_dir.key}: deleted, pod directory left after unmount\n"
            f"  {job.key}: Succeeded, volumes and network not torn down\n"
        )
        # The first part asks no container runtime; the second one starts its own containerd.
        argv = _argv("scan", node, snapshot, "--runtime-endpoint", "none")
        print("$ nodegc scan --pods-from pods.json --min-age 0 <sandbox roots>\n", flush=True)
        result = subprocess.run(argv, timeout=120, check=False)
        print(f"\nexit status {result.returncode} (0 clean, 3 residue or conflicts found)")
        print("the same report for machines: nodegc scan ... -o json | -o yaml\n")

        state = ["--state-dir", str(node.root / "state")]
        print("$ nodegc clean --apply <same flags>   (one shot: re-verify, reclaim, confirm)\n", flush=True)
        cleaned = subprocess.run(_argv("clean", node, snapshot, *state, "--apply", "--runtime-endpoint", "none"),
                                 timeout=300, check=False)
        print(f"\nexit status {cleaned.returncode} (0 everything reclaimed and confirmed)\n")
        print("$ nodegc scan <same flags>\n", flush=True)
        after = subprocess.run(argv, timeout=120, check=False)
        print(f"\nexit status {after.returncode}; the audit trail: nodegc history --state-dir <dir>")
        cri_ok = runtime_part(node)
    print("sandbox node torn down")
    ok = result.returncode in (0, 3) and cleaned.returncode == 0 and after.returncode == 0 and cri_ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
