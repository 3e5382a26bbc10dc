"""`make demo`: a sandbox node with healthy pods and every kind of residue, scanned by `nodegc scan`.

Runs as root inside private mount and network namespaces (the Makefile arranges that), so nothing it
creates (mounts, namespaces, veths, iptables chains) can reach the machine, and all of it goes away
when it exits. The processes its containerd starts (the daemon, shims, containers) and their cgroups
would outlive a demo killed outright; a reaper (`sandbox.reaper`) ends them when the demo dies however
it dies, and SIGTERM or SIGHUP tear the node down as an error does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

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
from nodegc.sandbox.reaper import start_reaper

_LONG_ID = re.compile(r"[0-9a-f]{64}")
TASKS = "io.containerd.runtime.v2.task/k8s.io"


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


def _shown(text: str, root: Path) -> str:
    return _LONG_ID.sub(lambda m: m.group(0)[:12], text.replace(str(root), "<node>"))


def _why(node: SandboxNode, argv: list[str]) -> None:
    """The evidence behind the rows a reader asks about: containerd's leftovers, its sandboxes, and what
    is kept (the table shows classes; `-o json` carries each finding's evidence)."""
    done = subprocess.run([*argv, "-o", "json"], capture_output=True, text=True, timeout=120, check=False)
    try:
        findings: list[dict[str, Any]] = json.loads(done.stdout)["findings"]
    except (ValueError, KeyError, TypeError):
        print(f"(no JSON report: exit status {done.returncode})")
        return
    rows = [f for f in findings if f.get("class") != "in_use" and (
        f.get("kind") in ("runtime_leftover", "sandbox") or f.get("class") in ("protected", "unknown", "conflict")
        or (f.get("residue") and f.get("owner_state") == "live" and f.get("kind") == "ip_reservation"))]
    if not rows:
        return
    print("why (the evidence in `nodegc scan -o json`): containerd's leftovers and sandboxes, the addresses a dead"
          "\nsandbox of a live pod holds, and what is kept:")
    for f in rows:
        evidence = [str(e) for e in f.get("evidence") or []]
        because = "; ".join(dict.fromkeys([evidence[0], evidence[-1]])) if evidence else "no evidence"
        print(f"  {f.get('class', '?'):<17} {_shown(str(f.get('id', '')), node.root)}\n"
              f"  {'':<17}   {_shown(because, node.root)}")


def _wait_for_cleanup(runtime: SandboxContainerd, ids: list[str], timeout: float = 15.0) -> bool:
    """containerd's own cleanup of a stopped shim (`containerd-shim-runc-v2 ... delete`) removes its task
    bundle and rootfs mount; True once no shim of `ids` runs and their bundles are gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shims = [Path(f"/proc/{pid}/cmdline") for pid in runtime.shim_pids()]
        running = set()
        for cmdline in shims:
            try:
                running.add(cmdline.read_bytes())
            except OSError:
                continue
        if not any(i.encode() in line for i in ids for line in running) and not any(
                (runtime.state / TASKS / i).exists() for i in ids):
            return True
        time.sleep(0.2)
    return False


def runtime_part(node: SandboxNode, *, config: Path, cgroup: str) -> bool:
    """The container runtime's part: a real containerd through CRI, residue made by real faults."""
    missing = containerd_available()
    if missing:
        print(f"(the container runtime's part needs containerd, runc and busybox-static: {missing}; skipped)")
        return True
    print("\n--- the container runtime's part: a real containerd (CRI, runc) on the same node ---\n")
    for pod in list(node.api_pods()):
        node.delete_cleanly(pod)  # the first part's pods leave: from here on the runtime runs every pod
    runtime = SandboxContainerd(node, firewall=True)
    if runtime.config != config:
        raise SandboxError(f"the reaper watches {config}, containerd's configuration is {runtime.config}")
    runtime.cgroup_parent = cgroup
    try:
        return _runtime_story(node, runtime)
    except SandboxError as e:
        print(f"the container runtime's part failed: {e}")
        return False
    finally:
        runtime.close()


def _runtime_story(node: SandboxNode, runtime: SandboxContainerd) -> bool:
    runtime.start()
    shop = [new_spec("front-0", namespace="shop"), new_spec("front-1", namespace="shop")]
    old = [runtime.run_sandbox(s) for s in shop]
    etl = new_spec("etl-0", namespace="batch")
    etl_sid = runtime.run_sandbox(etl)
    etl_cid = runtime.run_container(etl_sid, etl)
    print("RunPodSandbox for shop/front-0, shop/front-1 and batch/etl-0 (with an app container); then containerd\n"
          "crashed and lost its database (io.containerd.metadata.v1.bolt) while its shims and sandboxes ran")
    runtime.kill()
    shutil.rmtree(runtime.root / "io.containerd.metadata.v1.bolt", ignore_errors=True)
    runtime.start()
    new = [runtime.run_sandbox(SandboxSpec(s.name, s.namespace, s.uid, attempt=1)) for s in shop]
    runtime.forget_pod(etl)
    gone = new_spec("worker-5f7", namespace="batch")
    runtime.stop_sandbox(runtime.run_sandbox(gone))
    runtime.forget_pod(gone)
    orphan = new_spec("stray-0", namespace="batch")
    runtime.run_sandbox(orphan)
    runtime.forget_pod(orphan)
    lost = [*old, etl_sid]
    print(f"the kubelet ran the shop pods again in new sandboxes ({', '.join(sid[:12] for sid in new)});\n"
          f"the old ones ({', '.join(sid[:12] for sid in old)}) and batch/etl-0's ({etl_sid[:12]}) run on, unknown"
          " to containerd:\n"
          "  their shims, task bundles (rootfs mounts), netns, veths, IPs, chains and firewall rules stay\n"
          "batch/etl-0: deleted from the API meanwhile\n"
          "batch/worker-5f7: deleted from the API while the runtime holds its sandbox NotReady\n"
          "batch/stray-0: deleted from the API while nothing tore its READY sandbox down\n")
    records = [pod_record(node, s, (sandbox_ips(runtime, sid) or (None,))[0]) for s, sid in zip(shop, new, strict=True)]
    snapshot = write_pods(node.root / "pods-cri.json", records)
    print("$ crictl pods   (through nodegc's CRI client)")
    _sandboxes(runtime)
    cri = ["--runtime-endpoint", runtime.endpoint, "--runtime-state-dir", str(runtime.state)]
    state = ["--state-dir", str(node.root / "state-cri")]
    scan = _argv("scan", node, snapshot, *cri)
    print(f"\n$ nodegc scan --runtime-endpoint {runtime.endpoint} \\\n    --runtime-state-dir {runtime.state}"
          " <same flags>\n", flush=True)
    scanned = subprocess.run(scan, timeout=120, check=False)
    print()
    _why(node, scan)
    print("\n$ nodegc clean --apply --runtime-endpoint ... --runtime-state-dir ... <same flags>\n", flush=True)
    cleaned = subprocess.run(_argv("clean", node, snapshot, *cri, *state, "--apply"), timeout=300, check=False)
    shims = sum(1 for pid in runtime.shim_pids() for i in lost if i.encode() in _cmdline(pid))
    print(f"\nexit status {cleaned.returncode}: the lost sandboxes' network is reclaimed; their {shims} shims still"
          " run (a shim is stopped only\non opt-in) and their task bundles stay while their shims run\n")
    print("$ nodegc clean --apply --stop-orphan-shims <same flags>\n", flush=True)
    stopped = subprocess.run(_argv("clean", node, snapshot, *cri, *state, "--apply", "--stop-orphan-shims"),
                             timeout=300, check=False)
    if _wait_for_cleanup(runtime, [*lost, etl_cid]):
        print(f"\nexit status {stopped.returncode}; containerd's own cleanup of each stopped shim"
              " (containerd-shim-runc-v2 ... delete)\nremoved its task bundles and rootfs mounts")
    else:
        print(f"\nexit status {stopped.returncode}; the stopped shims' task bundles are still there: the next"
              " clean removes them\n", flush=True)
        stopped = subprocess.run(_argv("clean", node, snapshot, *cri, *state, "--apply", "--stop-orphan-shims"),
                                 timeout=300, check=False)
    print("\n$ crictl pods")
    _sandboxes(runtime)
    print("\n$ nodegc scan --runtime-endpoint ... --runtime-state-dir ... <same flags>\n", flush=True)
    after = subprocess.run(scan, timeout=120, check=False)
    print()
    _why(node, scan)
    print(f"\nexit status {after.returncode}; batch/stray-0 stays READY until --stop-running-orphans is given")
    return all(r.returncode in (0, 3) for r in (scanned, cleaned, stopped, after))


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _torn_down_on(signum: int, frame: FrameType | None) -> None:
    """SIGTERM and SIGHUP (a closed terminal) unwind like an error: every `finally` tears its part down."""
    raise SystemExit(128 + signum)


def main() -> int:
    if os.geteuid() != 0:
        print("make demo needs root: it builds a sandbox node with real mounts, namespaces and CNI plugins")
        return 2
    if not (namespace_is_private("mnt") and namespace_is_private("net")):
        print("run the demo through `make demo`: it needs private mount and network namespaces")
        return 2
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _torn_down_on)
    started = time.monotonic()
    try:
        node = SandboxNode.create()
    except SandboxError as e:
        print(f"cannot build the sandbox node: {e}")
        return 1
    cgroup = f"nodegc-sandbox-{uuid.uuid4().hex[:12]}"
    config = node.root / "containerd" / "config.toml"
    reaper = start_reaper(root=node.root, config=config, cgroup=cgroup)
    try:
        with node:
            cri_ok = _demo(node, started, config=config, cgroup=cgroup)
    finally:
        if reaper.stdin is not None:
            reaper.stdin.close()
        reaper.wait(timeout=60)
    print("sandbox node torn down")
    return 0 if cri_ok else 1


def _demo(node: SandboxNode, started: float, *, config: Path, cgroup: str) -> bool:
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
    none = ["--runtime-endpoint", "none", "--runtime-state-dir", "none"]
    argv = _argv("scan", node, snapshot, *none)
    print("$ nodegc scan --pods-from pods.json --min-age 0 <sandbox roots>\n", flush=True)
    result = subprocess.run(argv, timeout=120, check=False)
    print(f"\nexit status {result.returncode} (0 clean, 3 residue or conflicts found)")
    print("the same report for machines: nodegc scan ... -o json | -o yaml\n")

    state = ["--state-dir", str(node.root / "state")]
    print("$ nodegc clean --apply <same flags>   (one shot: re-verify, reclaim, confirm)\n", flush=True)
    cleaned = subprocess.run(_argv("clean", node, snapshot, *state, "--apply", *none), timeout=300, check=False)
    print(f"\nexit status {cleaned.returncode} (0 everything reclaimed and confirmed); ok: removed by that step,"
          " gone: already\ngone at its turn (an attachment's teardown takes its rules, veth and address with"
          " it); each was\nre-verified before and confirmed absent after\n")
    print("$ nodegc scan <same flags>\n", flush=True)
    after = subprocess.run(argv, timeout=120, check=False)
    print(f"\nexit status {after.returncode}; the audit trail: nodegc history --state-dir <dir>")
    cri_ok = runtime_part(node, config=config, cgroup=cgroup)
    return result.returncode in (0, 3) and cleaned.returncode == 0 and after.returncode == 0 and cri_ok


if __name__ == "__main__":
    sys.exit(main())
