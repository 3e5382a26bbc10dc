"""Scan cost on sandbox nodes of 100, 500 and 1,000 pods, half of them leaving residue.

Prints one JSON document. Every scan runs with the agent's scan options
(`nodegc.wiring.agent_engine_settings`: the defaults plus the inotify-backed pod directory watch), and the
process's start-up objects are frozen out of the cyclic collector (`gc.freeze`) as the agent does. Per size:
- `scan_seconds`: the median wall time of a full `scan_node` + `detect` (the correlation, the reads of
  the addresses in the namespaces its residue would act in, and the correlation again), as the agent's
  cycle runs them scan after scan (what is provably unchanged is taken again: an unchanged nf_tables
  ruleset is not dumped again, unchanged files are not parsed again, unchanged pod directories are not
  walked again, and a correlation of the very same records and pods at a time that answers alike is
  taken again: `correlations_taken_again` counts those); `cold_scan_seconds` forgets all of that before
  each scan (`nodegc.inventory.scanning.forget_remembered`, `nodegc.engine.detecting.forget_correlations`),
  as the first scan of a process;
  `scan_seconds_without_pod_dir_watch` is the steady scan without the watch (as `nodegc scan` would
  scan again and again); `scan_seconds_desired_changed` is the steady scan with one more pod (a new
  UID, Pending with no address yet, nothing of it on the node) in the desired state each time, so no
  correlation is taken again: what
  a node whose pods change every cycle pays (a correlation made anew takes from the scan before the
  verdicts whose inputs are the same: `desired_changed_verdicts_taken_from_earlier` counts them), and
  `scan_seconds_desired_changed_without_earlier` the same scan taking nothing from the scan before
  (`Correlations.from_earlier` off), interleaved with it; `desired_changed_over_bare_beside` is the
  median of the ratio of each of those changed scans to the bare reads timed right after it
  (`bare_reads_seconds_beside_changed`): a ratio a loaded machine moves less than that of two medians
  taken minutes apart;
- `bare_reads_seconds`: in the same run, the reads a scan cannot avoid (mountinfo, the directory
  listings, one netlink link dump, one iptables-save), and `scan_over_bare`, the ratio of the two;
  `bare_reads_with_files_seconds` adds what a scan must read beyond listing (every reservation and
  cache file, the pod directories two levels down, ip6tables-save);
- `where_the_time_goes`: each reader, one correlation, detect's namespace reads and its second
  correlation timed alone, one after the other, each as the steady scan calls it (in a scan
  iptables-save runs beside the file readers, so the parts add up to more than the scan);
- `netlink_vs_pyroute2`: nodegc's link dump against a pyroute2 dump of the same links.
Run as root through `make bench` (private mount and network namespaces).

    make bench                      # all sizes
    .venv/bin/python bench/scan.py --sizes 100 --repeat 3
    .venv/bin/python bench/scan.py --sizes 1000 --runtime-sandboxes 1000   # + a real containerd's CRI calls
    .venv/bin/python bench/scan.py --sizes 1000 --against <other checkout>/src --rounds 2   # A/B by process

With --runtime-sandboxes N, a real containerd (nodegc.sandbox.containerd) runs on the node with N
sandboxes made through CRI (RunPodSandbox, then StopPodSandbox for all but --runtime-ready of them, so
they cost no processes: a NotReady item of ListPodSandbox is as big as a READY one), and each size also
reports the scan with the runtime read: the first scan (one verbose PodSandboxStatus per sandbox) and
the steady state (Version, ListPodSandbox, ListContainers), against the same scan without the runtime
(each keeping its own remembered correlations, as an agent process does: `correlations_taken_again_with_runtime`)
and the scan with the runtime whose correlations are made anew every time
(`scan_seconds_with_runtime_correlated_anew`).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine import detecting
from nodegc.engine.detecting import REMEMBERED, detect, forget_correlations, netns_to_read
from nodegc.hostio.iptables_backend import commands as iptables_commands
from nodegc.hostio.mountinfo import read_mounts
from nodegc.hostio.netlink import RtnlSocket
from nodegc.inventory.cni_cache import scan_cni_cache
from nodegc.inventory.cni_conf import scan_ranges
from nodegc.inventory.cni_ipam import scan_ip_reservations
from nodegc.inventory.cri.runtimes import forget_readers, runtime_reader
from nodegc.inventory.iptables import scan_iptables
from nodegc.inventory.links import scan_veths
from nodegc.inventory.netns import scan_netns
from nodegc.inventory.pod_dirs import pod_dir_watcher, scan_pod_dirs
from nodegc.inventory.scanning import forget_remembered, scan_node, with_netns_addresses
from nodegc.model.pods import DesiredState
from nodegc.observe.logs import configure_logging
from nodegc.planning.correlate import CorrelationPolicy, correlate, correlation
from nodegc.planning.phases import PhasePolicy
from nodegc.planning.remembered import Correlations
from nodegc.sandbox.containerd import SandboxContainerd, new_spec
from nodegc.sandbox.node import SandboxNode, SandboxPod
from nodegc.settings import ScanOptions
from nodegc.wiring import SafetySettings, agent_engine_settings

AGENT_SCAN: ScanOptions = agent_engine_settings(SafetySettings(), PhasePolicy()).scan
"""The options the agent scans with (its flags' defaults, no runtime socket)."""

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


def interleaved(scan: Callable[[bool], None], repeat: int,
                beside: Callable[[], None]) -> tuple[float, float, float, float]:
    """The median of `scan(True)` and of `scan(False)`, interleaved (each pair in the other order, so both
    see the same machine load), each after an untimed one of its own kind (the scan before it); and the
    median of `beside()` timed right after each `scan(True)`, and of the ratio of the two in each round
    (what a loaded machine changes between rounds moves both alike)."""
    samples: dict[bool, list[float]] = {True: [], False: []}
    besides: list[float] = []
    for i in range(repeat):
        for flag in (True, False) if i % 2 == 1 else (False, True):
            scan(flag)
            start = time.perf_counter()
            scan(flag)
            samples[flag].append(time.perf_counter() - start)
            if flag:
                start = time.perf_counter()
                beside()
                besides.append(time.perf_counter() - start)
    REMEMBERED.from_earlier = True
    ratios = [a / b for a, b in zip(samples[True], besides, strict=True)]
    return (statistics.median(samples[True]), statistics.median(samples[False]), statistics.median(besides),
            statistics.median(ratios))


def _read_tree(path: Path, depth: int) -> None:
    """List a directory and, below it, `depth` more levels; read the regular files met on the way."""
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            if depth > 0:
                _read_tree(Path(entry.path), depth - 1)
        elif entry.is_file(follow_symlinks=False):
            with open(entry.path, "rb") as f:
                f.read()


def bare_reads(node: SandboxNode) -> None:
    """The reads the issue counts: mountinfo, the directory listings, one netlink link dump, one
    iptables-save."""
    roots = node.roots
    Path("/proc/self/mountinfo").read_bytes()
    for d in (roots.kubelet_root / "pods", roots.cni_data_dir / "networks", roots.cni_data_dir / "results",
              roots.netns_dir):
        for entry in os.scandir(d):
            if entry.is_dir(follow_symlinks=False):
                os.listdir(entry.path)
    with RtnlSocket.open(roots.net_ns) as sock:  # the same netlink path the scan uses, so both pay alike
        sock.dump_links()
    subprocess.run(["nsenter", f"--net={roots.net_ns}", "iptables-save"], capture_output=True, check=True,
                   timeout=60)


def bare_reads_with_files(node: SandboxNode) -> None:
    """Everything a scan has to read, not only list: the pod directories two levels down, every
    reservation and cache file, a stat of every netns file, and both iptables families."""
    roots = node.roots
    Path("/proc/self/mountinfo").read_bytes()
    for pod in os.scandir(roots.kubelet_root / "pods"):  # pods/<uid>/{volumes,plugins,containers}/<x>/<y>
        for child in os.scandir(pod.path):
            if child.is_dir(follow_symlinks=False):
                for sub in os.scandir(child.path):
                    if sub.is_dir(follow_symlinks=False):
                        os.listdir(sub.path)
    _read_tree(roots.cni_data_dir / "networks", 1)
    _read_tree(roots.cni_data_dir / "results", 0)
    for entry in os.scandir(roots.netns_dir):
        os.lstat(entry.path)
    with RtnlSocket.open(roots.net_ns) as sock:
        sock.dump_links()
    for cmd in ("iptables-save", "ip6tables-save"):
        subprocess.run(["nsenter", f"--net={roots.net_ns}", cmd], capture_output=True, check=True, timeout=60)


def readers(node: SandboxNode, desired: object, policy: CorrelationPolicy, repeat: int) -> dict[str, float]:
    roots = node.roots
    options = AGENT_SCAN
    mounts, _ = read_mounts(roots.proc_root, reuse=True)
    cache, _ = scan_cni_cache(roots.cni_data_dir)
    netns, _ = scan_netns(roots.netns_dir, mounts)
    saves = iptables_commands(options.iptables_backend, net_ns=roots.net_ns, timeout=30).save
    inventory = scan_node(roots, options)
    now = datetime.now(UTC)
    first = correlation(inventory, desired, now=now, policy=policy)  # type: ignore[arg-type]
    to_read = netns_to_read(inventory, first.findings)
    read = with_netns_addresses(inventory, to_read)
    parts: dict[str, Callable[[], object]] = {
        "mountinfo": lambda: read_mounts(roots.proc_root, reuse=True),
        "mountinfo_parsed": lambda: read_mounts(roots.proc_root),
        "pod_dirs": lambda: scan_pod_dirs(roots.kubelet_root, mounts, watcher=pod_dir_watcher(roots.kubelet_root)),
        "pod_dirs_walked": lambda: scan_pod_dirs(roots.kubelet_root, mounts),
        "ip_reservations": lambda: scan_ip_reservations(roots.cni_data_dir),
        "cni_cache": lambda: scan_cni_cache(roots.cni_data_dir),
        "netns": lambda: scan_netns(roots.netns_dir, mounts),
        "veths": lambda: scan_veths(netns_entries=netns, net_ns=roots.net_ns),
        "iptables": lambda: scan_iptables(net_ns=roots.net_ns, commands=saves, timeout=30),
        "iptables_dump_and_parse": lambda: scan_iptables(net_ns=roots.net_ns, commands=saves, timeout=30,
                                                         reuse=False),
        "ip_ranges": lambda: scan_ranges(roots.cni_conf_dir, cache, networks_dir=roots.cni_data_dir / "networks"),
        "correlate": lambda: correlate(inventory, desired, now=now, policy=policy),  # type: ignore[arg-type]
        "detect_netns_addresses": lambda: with_netns_addresses(inventory, to_read),
        "detect_second_correlation": lambda: correlation(read, desired, now=now, policy=policy,  # type: ignore[arg-type]
                                                         previous=first),
    }
    out = {name: round(timed(fn, repeat) * 1000, 2) for name, fn in parts.items()}
    out["detect_netns_read"] = len(to_read)
    return out


def netlink_vs_pyroute2(node: SandboxNode, repeat: int) -> dict[str, object]:
    from pyroute2 import NetNS  # a development dependency: only the benchmark and a test compare with it

    def ours() -> int:
        with RtnlSocket.open(node.roots.net_ns) as sock:
            return len(sock.dump_links()[0])

    def theirs() -> int:
        with NetNS(str(node.roots.net_ns), flags=0) as ipr:
            return len(list(ipr.get_links()))

    links = ours()
    assert theirs() == links
    ours_s, theirs_s = timed(ours, repeat), timed(theirs, repeat)
    return {"links": links, "nodegc_ms": round(ours_s * 1000, 2), "pyroute2_ms": round(theirs_s * 1000, 2),
            "pyroute2_over_nodegc": round(theirs_s / ours_s, 1)}


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
    """Scans with and without the runtime, interleaved so both see the same machine load. Each way keeps
    its own remembered correlations, as an agent process does (one configuration); `anew` is the scan with
    the runtime whose correlations are forgotten before each scan (made anew, the readers' memos kept)."""
    policy = CorrelationPolicy(min_age_seconds=0)
    without_rt, with_rt = AGENT_SCAN, dataclasses.replace(AGENT_SCAN, runtime_endpoint=endpoint)
    memos = {"without": Correlations(), "with": Correlations(), "anew": Correlations()}

    def scan(options: ScanOptions, memo: str) -> None:
        detecting.REMEMBERED = memos[memo]
        if memo == "anew":
            memos[memo].forget()
        detect(scan_node(node.roots, options), desired, now=datetime.now(UTC), policy=policy)

    kept = detecting.REMEMBERED
    try:
        forget_readers()
        start = time.perf_counter()
        scan(with_rt, "with")  # cold: one verbose PodSandboxStatus per sandbox
        first_s = time.perf_counter() - start
        scan(with_rt, "anew")
        samples: dict[str, list[float]] = {"without": [], "with": [], "anew": []}
        taken = memos["with"].taken_again
        for i in range(2 * max(repeat, 5)):
            # Rotating which goes first: a later one of a round finds the caches an earlier one warmed.
            order = [("without", without_rt), ("with", with_rt), ("anew", with_rt)]
            for memo, options in order[i % 3:] + order[:i % 3]:
                start = time.perf_counter()
                scan(options, memo)
                samples[memo].append(time.perf_counter() - start)
        taken = memos["with"].taken_again - taken
    finally:
        detecting.REMEMBERED = kept
    without, with_ = samples["without"], samples["with"]
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
        "correlations_taken_again_with_runtime": f"{taken} in {len(with_)} scans",
        "scan_seconds_with_runtime_correlated_anew": round(statistics.median(samples["anew"]), 4),
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

        def scan(options: ScanOptions = AGENT_SCAN) -> None:
            detect(scan_node(node.roots, options), desired, now=datetime.now(UTC), policy=policy)

        def changed_scan(from_earlier: bool = True) -> None:
            # A pod just bound to the node: Pending, no address yet, nothing of it on the node. (A copy of pod 0
            # with its address, as this was before, is a second live pod claiming that address: a conflict
            # every scan, which no node sees from churn.)
            extra = dataclasses.replace(desired.pods[0], uid=str(uuid.uuid4()), name=f"extra-{uuid.uuid4().hex[:8]}",
                                        static_uid=None, phase="Pending", pod_ips=())
            other = dataclasses.replace(desired, pods=(*desired.pods, extra))
            taken = REMEMBERED.taken_again
            REMEMBERED.from_earlier = from_earlier  # back to True at the end of `interleaved`
            detect(scan_node(node.roots, AGENT_SCAN), other, now=datetime.now(UTC), policy=policy)
            assert REMEMBERED.taken_again == taken, "a correlation of another desired state was taken again"

        def cold_scan() -> None:
            forget_remembered()
            forget_correlations()
            scan()

        unwatched = dataclasses.replace(AGENT_SCAN, watch_pod_dirs=False)
        scan()  # warm the page cache and imports for both sides alike
        bare_reads(node)
        gc.collect()
        gc.freeze()  # as the agent does once started: what exists now lives on, the collector skips it
        cold_s = timed(cold_scan, repeat)
        scan()
        taken_before = REMEMBERED.taken_again
        scan_s = timed(scan, repeat)
        taken_again = REMEMBERED.taken_again - taken_before
        unwatched_s = timed(lambda: scan(unwatched), repeat)
        reused = REMEMBERED.reused
        changed_s, without_earlier_s, beside_s, beside_ratio = interleaved(changed_scan, repeat,
                                                                           lambda: bare_reads(node))
        bare_s = timed(lambda: bare_reads(node), repeat)
        files_s = timed(lambda: bare_reads_with_files(node), repeat)
        inventory, findings = detect(scan_node(node.roots, AGENT_SCAN), desired, now=datetime.now(UTC), policy=policy)
        with_runtime: dict[str, object] | None = None
        if runtime is not None:
            try:
                with_runtime = {"build_seconds": round(runtime_build_s, 2),
                                **measure_runtime(node, desired, repeat, runtime.endpoint)}
            finally:
                runtime.close()
        result = {
            "pods": pods,
            "build_seconds": round(build_s, 2),
            "scan_seconds": round(scan_s, 4),
            "correlations_taken_again": f"{taken_again} in {repeat} scans",
            "bare_reads_seconds": round(bare_s, 4),
            "scan_over_bare": round(scan_s / bare_s, 2),
            "scan_seconds_desired_changed": round(changed_s, 4),
            "desired_changed_over_bare": round(changed_s / bare_s, 2),
            "bare_reads_seconds_beside_changed": round(beside_s, 4),
            "desired_changed_over_bare_beside": round(beside_ratio, 2),
            "desired_changed_verdicts_taken_from_earlier": f"{REMEMBERED.reused - reused} in {2 * repeat} scans",
            "scan_seconds_desired_changed_without_earlier": round(without_earlier_s, 4),
            "desired_changed_without_earlier_over_bare": round(without_earlier_s / bare_s, 2),
            "cold_scan_seconds": round(cold_s, 4),
            "cold_scan_over_bare": round(cold_s / bare_s, 2),
            "scan_seconds_without_pod_dir_watch": round(unwatched_s, 4),
            "bare_reads_with_files_seconds": round(files_s, 4),
            "scan_over_bare_with_files": round(scan_s / files_s, 2),
            "where_the_time_goes_ms": readers(node, desired, policy, repeat),
            "netlink_vs_pyroute2": netlink_vs_pyroute2(node, repeat),
            "findings": len(findings),
            "residue": sum(1 for f in findings if f.cls.is_residue),
            "mounts": len(inventory.mounts),
            "chains": len(inventory.chains),
            **({"with_runtime": with_runtime} if with_runtime else {}),
        }
        gc.unfreeze()
        return result


_SUMMED = ("scan_seconds", "bare_reads_seconds", "scan_over_bare", "scan_seconds_desired_changed",
           "desired_changed_over_bare", "desired_changed_over_bare_beside",
           "scan_seconds_desired_changed_without_earlier")


def against(other: Path, rounds: int) -> int:
    """This benchmark's arguments but --against and --rounds, run on this checkout's src and on `other`,
    alternately (one process each, the other order every round, so that both see the machine's load
    alike), in the namespaces this process runs in."""
    argv = sys.argv[1:]
    args: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--against", "--rounds"):
            skip = True
        elif not arg.startswith(("--against=", "--rounds=")):
            args.append(arg)
    trees = {"this": Path(__file__).resolve().parents[1] / "src", "against": other.resolve()}
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "against": []}
    for i in range(rounds):
        for name in ("this", "against") if i % 2 == 0 else ("against", "this"):
            env = {**os.environ, "PYTHONPATH": str(trees[name])}
            out = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, check=True,
                                 timeout=7200)
            runs[name].append(json.loads(out.stdout))
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for name, docs in runs.items():
        by_size: dict[str, dict[str, list[float]]] = {}
        for doc in docs:
            for r in doc["results"]:
                for key in _SUMMED:
                    if key in r:
                        by_size.setdefault(str(r["pods"]), {}).setdefault(key, []).append(float(r[key]))
        summary[name] = {size: {k: round(statistics.median(v), 4) for k, v in figures.items()}
                         for size, figures in by_size.items()}
    json.dump({"benchmark": "scan", "against": str(other), "rounds": rounds, "medians": summary, **runs},
              sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--runtime-sandboxes", type=int, default=0, metavar="N",
                        help="also run a real containerd holding N sandboxes and measure the scan with it")
    parser.add_argument("--runtime-ready", type=int, default=20, metavar="N",
                        help="of which this many stay READY (default: %(default)s)")
    parser.add_argument("--against", type=Path, default=None, metavar="SRC",
                        help="run this benchmark on this checkout's src and on another's (its `nodegc` package),"
                             " process after process, each round in the other order; both are printed, under"
                             " `this` and `against`, with the medians of the rounds")
    parser.add_argument("--rounds", type=int, default=2, help="with --against: rounds (default: %(default)s)")
    args = parser.parse_args()
    if args.against is not None:
        return against(args.against, args.rounds)
    configure_logging("warning")
    results = [measure(n, args.repeat, args.runtime_sandboxes, min(args.runtime_ready, args.runtime_sandboxes))
               for n in args.sizes]
    per_pod = [float(str(r["scan_seconds"])) / int(str(r["pods"])) for r in results]
    doc = {
        "benchmark": "scan",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "repeat": args.repeat,
        "scan_options": {"as": "the agent's (nodegc.wiring.agent_engine_settings)",
                         "watch_pod_dirs": AGENT_SCAN.watch_pod_dirs, "iptables_backend": AGENT_SCAN.iptables_backend,
                         "gc_freeze": True},
        "results": results,
        "scan_over_bare": {str(r["pods"]): r["scan_over_bare"] for r in results},
        "scan_ms_per_pod": [round(x * 1000, 3) for x in per_pod],
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
