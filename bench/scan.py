"""Scan cost on sandbox nodes of 100, 500 and 1,000 pods, half of them leaving residue.

Prints one JSON document: per size, the wall time of a full `scan_node` + `correlate`, and in the same
run the bare reads a scan cannot avoid (mountinfo, the directory listings, one netlink link dump, one
iptables-save). Run as root through `make bench` (private mount and network namespaces).

    make bench                      # all sizes
    .venv/bin/python bench/scan.py --sizes 100 --repeat 3
    .venv/bin/python bench/scan.py --sizes 1000 --runtime-sandboxes 1000   # + a real containerd's CRI calls

With --runtime-sandboxes N, a real containerd (nodegc.sandbox.containerd) runs on the node with N
sandboxes made through CRI (RunPodSandbox, then StopPodSandbox for all but --runtime-ready of them, so
they cost no processes: a NotReady item of ListPodSandbox is as big as a READY one), and each size also
reports the scan with the runtime read: the first scan (one verbose PodSandboxStatus per sandbox) and
the steady state (Version, ListPodSandbox, ListContainers), against the same scan without the runtime.
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
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from nodegc.desired.snapshot import SnapshotSource
from nodegc.hostio.netlink import RtnlSocket
from nodegc.inventory.cri.runtimes import forget_readers, runtime_reader
from nodegc.inventory.scanning import scan_node
from nodegc.model.pods import DesiredState
from nodegc.observe.logs import configure_logging
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.sandbox.containerd import SandboxContainerd, new_spec
from nodegc.sandbox.node import SandboxNode, SandboxPod
from nodegc.settings import ScanOptions

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


def start_runtime(node: SandboxNode, sandboxes: int, ready: int) -> SandboxContainerd:
    runtime = SandboxContainerd(node)
    runtime.start()

    def one(i: int) -> None:
        sid = runtime.run_sandbox(new_spec(f"cri-{i}"))
        if i >= ready:
            runtime.stop_sandbox(sid)

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(one, range(sandboxes)))
    return runtime


def measure_runtime(node: SandboxNode, desired: DesiredState, repeat: int, endpoint: str) -> dict[str, object]:
    """Scans with and without the runtime, interleaved so both see the same machine load."""
    policy = CorrelationPolicy(min_age_seconds=0)
    without_rt, with_rt = ScanOptions(), ScanOptions(runtime_endpoint=endpoint)

    def scan(options: ScanOptions) -> None:
        correlate(scan_node(node.roots, options), desired, now=datetime.now(UTC), policy=policy)

    forget_readers()
    start = time.perf_counter()
    scan(with_rt)  # cold: one verbose PodSandboxStatus per sandbox
    first_s = time.perf_counter() - start
    without: list[float] = []
    with_: list[float] = []
    for i in range(2 * max(repeat, 5)):
        # Alternating which goes first: the second of a pair finds the caches the first one warmed.
        pair = [(without, without_rt), (with_, with_rt)]
        for samples, options in pair if i % 2 == 0 else reversed(pair):
            start = time.perf_counter()
            scan(options)
            samples.append(time.perf_counter() - start)
    reader = runtime_reader(with_rt)
    assert reader is not None
    read_s = timed(reader.read, repeat)
    view = reader.read()
    forget_readers()
    without_s, with_s = statistics.median(without), statistics.median(with_)
    return {
        "runtime": f"{view.runtime_name} {view.runtime_version}",
        "sandboxes": len(view.sandboxes),
        "ready": sum(1 for sb in view.sandboxes if sb.ready),
        "first_scan_seconds": round(first_s, 4),
        "scan_seconds_without_runtime": round(without_s, 4),
        "scan_seconds_with_runtime": round(with_s, 4),
        "cri_read_seconds": round(read_s, 4),
        "overhead": round(with_s / without_s - 1, 3),
    }


def measure(pods: int, repeat: int, runtime_sandboxes: int = 0, runtime_ready: int = 0) -> dict[str, object]:
    with SandboxNode.create() as node:
        start = time.perf_counter()
        build(node, pods)
        build_s = time.perf_counter() - start
        start = time.perf_counter()
        runtime = start_runtime(node, runtime_sandboxes, runtime_ready) if runtime_sandboxes else None
        runtime_build_s = time.perf_counter() - start
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
        with_runtime: dict[str, object] | None = None
        if runtime is not None:
            try:
                with_runtime = {"build_seconds": round(runtime_build_s, 2),
                                **measure_runtime(node, desired, repeat, runtime.endpoint)}
            finally:
                runtime.close()
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
            **({"with_runtime": with_runtime} if with_runtime else {}),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--runtime-sandboxes", type=int, default=0, metavar="N",
                        help="also run a real containerd holding N sandboxes and measure the scan with it")
    parser.add_argument("--runtime-ready", type=int, default=20, metavar="N",
                        help="of which this many stay READY (default: %(default)s)")
    args = parser.parse_args()
    configure_logging("warning")
    results = [measure(n, args.repeat, args.runtime_sandboxes, min(args.runtime_ready, args.runtime_sandboxes))
               for n in args.sizes]
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
