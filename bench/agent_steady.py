"""The agent in steady state: CPU per cycle and memory of a real `nodegc agent` on a node of 1,000 live pods.

A sandbox node is built with the real CNI plugins (every pod with its netns, veth, IP, cache entry, chains
and two volume mounts), then `nodegc agent` runs against it as a separate process with its metrics
server. After a warm-up, the CPU the agent process and its children (iptables-save, nsenter) used over a
number of cycles is read from /proc, and divided by the cycles (counted from its `cycle done` log lines).
`core_share_at_interval` is that CPU over the production interval (30 s by default): the share of one core
the agent takes on such a node. RSS is the agent's resident memory after the run (`VmRSS`) and its peak
(`VmHWM`); `startup_rss_mib` is its resident memory when it logs `agent started` (imports, wiring, the
source started), before any cycle: what the cycles add is the rest. Each setup runs `--repeat` times (a
fresh agent and ledger each time) on the same node, and the medians are reported beside every run's
figures: CPU time, not wall time, so other work on the machine slows a cycle but does not change its
figure much. Prints JSON.

Setups (`--setups`, comma-separated):
- `snapshot`: the pods from a snapshot file kept fresh (touched every second);
- `api`: the pods from the HTTP-level test API server (tests/api/fakeapi.py) through the agent's watch, as a
  DaemonSet reads them: the API client (lightkube, httpx2) is loaded. `--api-pods real` gives the server's
  pods what a cluster's also carry and nodegc never reads (about 7.5 KB a pod: managedFields, labels, a
  last-applied annotation, a full container spec and status); by default they hold little more than
  what is read;
- `api+runtime`, `snapshot+runtime`: the same with a real containerd on the node (nodegc.sandbox.containerd),
  so the CRI client (h2, protobuf) is loaded and a cycle asks Version, ListPodSandbox and ListContainers
  and walks /proc for shims. It holds no sandbox of these pods (they are made by the CNI plugins
  directly), so the runtime's view is incomplete: nothing is concluded from it, which costs no less.

Without `+runtime` the agent's runtime endpoint is a socket path under the node's root that does not exist
(a node without a runtime socket; the machine's own containerd is never asked). Root, in private mount and
network namespaces:

    unshare --mount --net --propagation private -- bash -c 'ip link set lo up && exec "$0" "$@"' \\
        .venv/bin/python bench/agent_steady.py --pods 1000
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `tests` lives at the repo root

from nodegc.observe.logs import configure_logging
from nodegc.sandbox.node import CNI_BIN_DIR, SandboxNode

_TICK = os.sysconf("SC_CLK_TCK")
SETUPS = ("snapshot", "api", "snapshot+runtime", "api+runtime")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process and of its waited-for children (iptables-save, nsenter)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + cutime + cstime) / _TICK


def memory_mib(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def loaded_modules(pid: int, names: tuple[str, ...]) -> list[str]:
    """Which of these shared objects the process has mapped (protobuf's _message, the API client's msgspec...)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return [n for n in names if n in maps]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def real_sized(record: dict[str, Any]) -> dict[str, Any]:
    """A pod record with what a cluster's pod also carries (about 7.5 KB in all; nodegc reads none of it)."""
    meta, spec, status = record["metadata"], record["spec"], record["status"]
    created = meta.get("creationTimestamp")
    meta["labels"] = {f"label-{k}": "v" * 20 for k in range(6)}
    meta["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "x" * 2000}
    meta["managedFields"] = [{"manager": manager, "operation": "Update", "apiVersion": "v1", "time": created,
                              "fieldsType": "FieldsV1", "fieldsV1": {f"f:{k}": {} for k in range(60)}}
                             for manager in ("kube-controller-manager", "kube-scheduler", "kubelet")]
    meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "app-5d9c7b", "controller": True,
                                "uid": meta["uid"][::-1]}]
    spec["containers"] = [{"name": c["name"], "image": "registry.example.com/app:1.0",
                           "env": [{"name": f"ENV_{k}", "value": "v" * 30} for k in range(20)],
                           "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                           "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                           "volumeMounts": [{"name": "data", "mountPath": "/data"}]}
                          for c in spec.get("containers", [])]
    spec["volumes"] = [{"name": "data", "emptyDir": {}}]
    status["conditions"] = [{"type": t, "status": "True", "lastTransitionTime": created}
                            for t in ("Ready", "Initialized", "ContainersReady", "PodScheduled")]
    status["containerStatuses"] = [{"name": c["name"], "ready": True, "restartCount": 0, "image": c["image"],
                                    "imageID": "sha256:" + "a" * 64, "containerID": "containerd://" + "b" * 64,
                                    "state": {"running": {"startedAt": created}}} for c in spec["containers"]]
    return record


@contextmanager
def every(seconds: float, action: Callable[[], object], *, now: bool = False) -> Iterator[None]:
    """`action` every `seconds` on a thread while inside (once at entry too when `now`)."""
    stop = threading.Event()

    def loop() -> None:
        if now:
            action()
        while not stop.wait(seconds):
            action()

    worker = threading.Thread(target=loop, daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join()


def kubelet_renewing(api: Any, node: str) -> AbstractContextManager[None]:
    """The node's kubelet renews its Lease every 10 s: the agent proves each list by it, and the renewals
    move the resourceVersion its watch's bookmarks carry, as on a cluster."""
    return every(10.0, lambda: api.renew_node_lease(node), now=True)


def keep_fresh(snapshot: Path) -> AbstractContextManager[None]:
    """A snapshot is as old as its file: the agent acts on it only while someone keeps it fresh."""
    return every(1.0, lambda: os.utime(snapshot))


def run_agent(argv: list[str], *, warmup: int, cycles: int) -> dict[str, Any]:
    agent = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    marks: list[tuple[float, float]] = []
    started: dict[str, float] = {}
    blocked: list[str] = []
    errors: list[str] = []
    try:
        assert agent.stderr is not None
        for line in agent.stderr:
            if '"agent started"' in line:
                started = memory_mib(agent.pid)  # imports and wiring, before any cycle
            if "destructive actions blocked" in line and len(marks) >= warmup:  # the measured cycles only
                blocked.append(line.strip()[:200])
            if '"level": "error"' in line:
                errors.append(line.strip()[:300])
            if '"cycle done"' not in line:
                continue
            marks.append((time.perf_counter(), cpu_seconds(agent.pid)))
            if len(marks) > warmup + cycles:
                break
        memory = memory_mib(agent.pid)
        libraries = loaded_modules(agent.pid, ("cygrpc", "_message", "_ssl", "_sqlite3", "msgspec"))
    finally:
        agent.terminate()
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
    if len(marks) <= warmup + 1:
        raise SystemExit(f"the agent ran {len(marks)} cycles: {errors[:3]}")
    first, last = marks[warmup], marks[-1]
    measured = len(marks) - 1 - warmup
    return {
        "cpu_seconds_per_cycle": round((last[1] - first[1]) / measured, 4),
        "wall_seconds_per_cycle": round((last[0] - first[0]) / measured, 2),
        "startup_rss_mib": started.get("VmRSS"),
        "rss_mib": memory.get("VmRSS"),
        "peak_rss_mib": memory.get("VmHWM"),
        "rss_anon_mib": memory.get("RssAnon"),
        "rss_file_mib": memory.get("RssFile"),
        "libraries": libraries,
        "blocked": blocked[:2],
        "errors": errors[:2],
        "cycles_measured": measured,
    }


def measure_setup(setup: str, node: SandboxNode, pods: list[Any], args: argparse.Namespace,
                  stack: ExitStack) -> dict[str, Any]:
    r = node.roots
    base = ["--node", node.node_name, "--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir),
            "--cni-conf-dir", str(r.cni_conf_dir), "--netns-dir", str(r.netns_dir), "--net-ns", str(r.net_ns),
            "--cni-bin-dir", str(CNI_BIN_DIR), "--static-pod-dir", str(node.root / "manifests"),
            "--pod-log-dir", str(node.root / "var/log/pods"), "--interval", str(args.run_interval),
            "--log-format", "json", "--log-level", "info"]
    source, _, runtime = setup.partition("+")
    if runtime:
        from nodegc.sandbox.containerd import SandboxContainerd, containerd_available

        missing = containerd_available()
        if missing:
            return {"setup": setup, "skipped": missing}
        containerd = SandboxContainerd(node)
        containerd.start()
        stack.callback(containerd.close)
        base += ["--runtime-endpoint", containerd.endpoint, "--runtime-state-dir", str(containerd.run_dir)]
    else:
        base += ["--runtime-endpoint", f"unix://{node.root}/no-runtime/containerd.sock"]
    if source == "api":
        from tests.api.fakeapi import FakeKubeAPI

        api = stack.enter_context(FakeKubeAPI(bookmark_interval=60.0))
        stack.enter_context(kubelet_renewing(api, node.node_name))
        for pod in pods:
            record = node.pod_record(pod)
            api.add_pod(real_sized(record) if args.api_pods == "real" else record)
        base += ["--kubeconfig", str(api.write_kubeconfig(node.root / "kubeconfig"))]
    else:
        snapshot = node.write_snapshot(node.root / "pods.json")
        stack.enter_context(keep_fresh(snapshot))
        base += ["--pods-from", str(snapshot)]
    # rich comes with a development tool only; structlog would load it for tracebacks, production does not
    launch = "import runpy, sys; sys.modules['rich'] = None; runpy.run_module('nodegc', run_name='__main__')"
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="nodegc-steady-") as state:
            argv = [sys.executable, "-c", launch, "agent", *base, "--state-dir", state,
                    "--metrics-address", f"127.0.0.1:{free_port()}"]
            runs.append(run_agent(argv, warmup=args.warmup, cycles=args.cycles))
    cpu = statistics.median(x["cpu_seconds_per_cycle"] for x in runs)
    return {
        "setup": setup,
        "runtime_socket": bool(runtime),
        "cpu_seconds_per_cycle": round(cpu, 4),
        "core_share_at_interval_percent": round(100 * cpu / args.interval, 3),
        "startup_rss_mib": statistics.median(x["startup_rss_mib"] or 0.0 for x in runs),
        "rss_mib": statistics.median(x["rss_mib"] for x in runs),
        "peak_rss_mib": statistics.median(x["peak_rss_mib"] for x in runs),
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=10, help="cycles measured after the warm-up")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3, help="agents run one after another per setup (medians)")
    parser.add_argument("--setups", default="snapshot,api,api+runtime",
                        help=f"comma-separated, of {', '.join(SETUPS)}")
    parser.add_argument("--api-pods", choices=("minimal", "real"), default="minimal",
                        help="the test API server's pods: little more than what nodegc reads, or as big as a"
                             " cluster's (about 7.5 KB: managedFields, labels, a full spec and status)")
    parser.add_argument("--run-interval", type=float, default=2.0,
                        help="the agent's interval during the run (the CPU of a cycle does not depend on it)")
    parser.add_argument("--interval", type=float, default=30.0, help="the production interval the share is for")
    args = parser.parse_args()
    setups = [x.strip() for x in args.setups.split(",") if x.strip()]
    unknown = [x for x in setups if x not in SETUPS]
    if unknown:
        parser.error(f"unknown setups {unknown}: choose from {', '.join(SETUPS)}")
    configure_logging("error")
    load_before = os.getloadavg()
    with SandboxNode.create() as node:
        started = time.perf_counter()
        pods = [node.add_pod(f"pod-{i}", volumes=("data",), host_port=10000 + i if i % 10 == 0 else None)
                for i in range(args.pods)]
        build_s = time.perf_counter() - started
        results = []
        for setup in setups:
            with ExitStack() as stack:
                results.append(measure_setup(setup, node, pods, args, stack))
    doc = {
        "benchmark": "agent_steady",
        "cpus": os.cpu_count(),
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "pods": args.pods,
        "api_pods": args.api_pods,
        "build_seconds": round(build_s, 1),
        "interval_seconds": args.interval,
        "setups": results,
    }
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
