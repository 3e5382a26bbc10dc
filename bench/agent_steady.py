"""The agent in steady state: CPU per cycle and memory of a real `nodegc agent` on a node of 1,000 live pods.

A sandbox node is built with the real CNI plugins (every pod with its netns, veth, IP, cache entry, chains
and two volume mounts), then `nodegc agent` runs against it as a separate process with its metrics
server, reading the pods from a snapshot kept fresh. After a warm-up, the CPU the agent process and its
children (iptables-save, nsenter) used over a number of cycles is read from /proc, and divided by the
cycles (counted from its `cycle done` log lines). `core_share_at_interval` is that CPU over the production
interval (30 s by default): the share of one core the agent takes on such a node. RSS is the agent's
resident memory after the run (`VmRSS`) and its peak (`VmHWM`). Prints JSON. Root, in private mount and
network namespaces:

    unshare --mount --net --propagation private -- bash -c 'ip link set lo up && exec "$0" "$@"' \\
        .venv/bin/python bench/agent_steady.py --pods 1000
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from nodegc.observe.logs import configure_logging
from nodegc.sandbox.node import CNI_BIN_DIR, SandboxNode

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process and of its waited-for children (iptables-save, nsenter)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + cutime + cstime) / _TICK


def memory_mib(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=10, help="cycles measured after the warm-up")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--run-interval", type=float, default=2.0,
                        help="the agent's interval during the run (the CPU of a cycle does not depend on it)")
    parser.add_argument("--interval", type=float, default=30.0, help="the production interval the share is for")
    args = parser.parse_args()
    configure_logging("error")
    with SandboxNode.create() as node, tempfile.TemporaryDirectory(prefix="nodegc-steady-") as state:
        started = time.perf_counter()
        for i in range(args.pods):
            node.add_pod(f"pod-{i}", volumes=("data",), host_port=10000 + i if i % 10 == 0 else None)
        build_s = time.perf_counter() - started
        snapshot = node.write_snapshot(node.root / "pods.json")
        r = node.roots
        # rich comes with a development tool only; structlog would load it for tracebacks, production does not
        launch = "import runpy, sys; sys.modules['rich'] = None; runpy.run_module('nodegc', run_name='__main__')"
        argv = [sys.executable, "-c", launch, "agent", "--pods-from", str(snapshot), "--node", node.node_name,
                "--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir),
                "--cni-conf-dir", str(r.cni_conf_dir), "--netns-dir", str(r.netns_dir), "--net-ns", str(r.net_ns),
                "--cni-bin-dir", str(CNI_BIN_DIR), "--static-pod-dir", str(node.root / "manifests"),
                "--pod-log-dir", str(node.root / "var/log/pods"), "--state-dir", state,
                "--interval", str(args.run_interval), "--metrics-address", f"127.0.0.1:{free_port()}",
                "--log-format", "json", "--log-level", "info"]
        stop = threading.Event()

        def keep_fresh() -> None:  # a snapshot is as old as its file: the agent acts on it only while fresh
            while not stop.wait(1.0):
                os.utime(snapshot)

        toucher = threading.Thread(target=keep_fresh, daemon=True)
        toucher.start()
        agent = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        marks: list[tuple[float, float]] = []
        blocked: list[str] = []
        try:
            assert agent.stderr is not None
            for line in agent.stderr:
                if "destructive actions blocked" in line:
                    blocked.append(line.strip()[:200])
                if '"cycle done"' not in line:
                    continue
                marks.append((time.perf_counter(), cpu_seconds(agent.pid)))
                if len(marks) > args.warmup + args.cycles:
                    break
            memory = memory_mib(agent.pid)
        finally:
            stop.set()
            agent.terminate()
            try:
                agent.wait(timeout=30)
            except subprocess.TimeoutExpired:
                agent.kill()
        first, last = marks[args.warmup], marks[-1]
        cycles = len(marks) - 1 - args.warmup
        per_cycle = (last[1] - first[1]) / cycles
        doc = {
            "benchmark": "agent_steady",
            "cpus": os.cpu_count(),
            "pods": args.pods,
            "build_seconds": round(build_s, 1),
            "cycles_measured": cycles,
            "cpu_seconds_per_cycle": round(per_cycle, 4),
            "interval_seconds": args.interval,
            "core_share_at_interval_percent": round(100 * per_cycle / args.interval, 3),
            "rss_mib": memory.get("VmRSS"),
            "peak_rss_mib": memory.get("VmHWM"),
            "wall_seconds_per_cycle_at_run_interval": round((last[0] - first[0]) / cycles, 2),
            "blocked": blocked[:3],
        }
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
