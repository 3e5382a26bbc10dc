"""Scan cost on sandbox nodes of 100, 500 and 1,000 pods, half of them leaving residue.

Prints one JSON document: per size, the wall time of a full `scan_node` + `correlate`, and in the same
run the bare reads a scan cannot avoid (mountinfo, the directory listings, one netlink link dump, one
iptables-save). Run as root through `make bench` (private mount and network namespaces).

    make bench                      # all sizes
    .venv/bin/python bench/scan.py --sizes 100 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from nodegc.desired.snapshot import SnapshotSource
from nodegc.hostio.netlink import RtnlSocket
from nodegc.inventory.scanning import scan_node
from nodegc.observe.logs import configure_logging
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.sandbox.node import SandboxNode, SandboxPod

SCENARIOS = ("delete_without_cni_del", "delete_netns_only", "delete_leaving_mounts", "delete_leaving_dir")


def build(node: SandboxNode, pods: int) -> None:
    made: list[SandboxPod] = [node.add_pod(f"pod-{i}", volumes=("data",)) for i in range(pods)]
    for i, pod in enumerate(made[::2]):
        getattr(node, SCENARIOS[i % len(SCENARIOS)])(pod)


def timed(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def bare_reads(node: SandboxNode) -> None:
    roots = node.roots
    Path("/proc/self/mountinfo").read_bytes()
    for d in (roots.kubelet_root / "pods", roots.cni_data_dir / "networks", roots.cni_data_dir / "results",
              roots.netns_dir):
        for entry in os.scandir(d):
            if entry.is_dir(follow_symlinks=False):
                os.listdir(entry.path)
    sock = RtnlSocket.open(roots.net_ns)  # the same netlink path the scan uses, so both pay alike
    try:
        sock.dump_links()
    finally:
        sock.close()
    subprocess.run(["nsenter", f"--net={roots.net_ns}", "iptables-save"], capture_output=True, check=True,
                   timeout=60)


def measure(pods: int, repeat: int) -> dict[str, object]:
    with SandboxNode.create() as node:
        start = time.perf_counter()
        build(node, pods)
        build_s = time.perf_counter() - start
        desired = SnapshotSource(node.write_snapshot(node.root / "pods.json"), node.node_name).fetch()
        policy = CorrelationPolicy(min_age_seconds=0)

        def scan() -> None:
            correlate(scan_node(node.roots), desired, now=datetime.now(UTC), policy=policy)

        scan()  # warm the page cache and imports for both sides alike
        bare_reads(node)
        scan_s = timed(scan, repeat)
        bare_s = timed(lambda: bare_reads(node), repeat)
        inventory = scan_node(node.roots)
        findings = correlate(inventory, desired, now=datetime.now(UTC), policy=policy)
        return {
            "pods": pods,
            "build_seconds": round(build_s, 2),
            "scan_seconds": round(scan_s, 4),
            "bare_reads_seconds": round(bare_s, 4),
            "scan_over_bare": round(scan_s / bare_s, 2),
            "findings": len(findings),
            "residue": sum(1 for f in findings if f.cls.is_residue),
            "mounts": len(inventory.mounts),
            "chains": len(inventory.chains),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    configure_logging("warning")
    results = [measure(n, args.repeat) for n in args.sizes]
    per_pod = [float(str(r["scan_seconds"])) / int(str(r["pods"])) for r in results]
    doc = {
        "benchmark": "scan",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "repeat": args.repeat,
        "results": results,
        "scan_seconds_per_pod": [round(x * 1000, 3) for x in per_pod],
        "scan_seconds_per_pod_unit": "ms",
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
