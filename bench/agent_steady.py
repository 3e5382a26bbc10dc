"""The agent in steady state: CPU per cycle and memory of a real `nodegc agent` on a node of 1,000 live pods.

A sandbox node is built with the real CNI plugins (every pod with its netns, veth, IP, cache entry, chains
and two volume mounts), then `nodegc agent` runs against it as a separate process with its metrics
server. After a warm-up, the CPU the agent process and its children (iptables-save, nsenter) used over a
number of cycles is read from /proc, and divided by the cycles (counted from its `cycle done` log lines).
`core_share_at_interval` is that CPU over the production interval (30 s by default): the share of one core
the agent takes on such a node. RSS is the agent's resident memory after the run (`VmRSS`) and its peak
(`VmHWM`); `startup_rss_mib` is its resident memory when it logs `agent started` (imports, wiring, the
source started), before any cycle: what the cycles add is the rest; `rss_parts_mib` is where the RSS
after the run sits (`rss_parts_mib()`). Each setup runs `--repeat` times (a
fresh agent and ledger each time) on the same node, and the medians are reported beside every run's
figures: CPU time, not wall time, so other work on the machine slows a cycle but does not change its
figure much. `--pods` may name several counts (`--pods 110,250,500,1000`): the node grows to each in turn,
every setup is measured at each (under `sizes`), and `sizing` fits each setup's RSS to a line, its floor and
its cost per pod, for sizing the agent's memory request. Prints JSON.

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


def rss_parts_mib(pid: int, *, top: int = 6) -> dict[str, Any]:
    """Where the resident memory sits (/proc/<pid>/smaps): the C heap (glibc's brk heap: Python objects of
    more than 512 bytes, the libraries' allocations), the other anonymous maps (pymalloc's 1 MiB arenas,
    blocks mmapped by malloc, thread stacks), the libraries' own writable data (the anonymous part of
    their maps), and what is read from files (their code and constants, shared and clean), by file."""
    parts = {"heap": 0, "anon_maps": 0, "library_data": 0, "file": 0}
    files: dict[str, int] = {}
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head, _, rest = line.partition(" ")
        if not head.endswith(":"):  # a map's first line: range, permissions, offset, device, inode, path
            fields = line.split(maxsplit=5)
            name = fields[5] if len(fields) > 5 else ""
        elif head == "Rss:":
            kib = int(rest.split()[0])
            if name == "[heap]":
                parts["heap"] += kib
            elif not name or name.startswith("["):
                parts["anon_maps"] += kib
            else:
                files[name.rsplit("/", 1)[-1]] = files.get(name.rsplit("/", 1)[-1], 0) + kib
        elif head == "Anonymous:" and name and not name.startswith("["):
            kib = int(rest.split()[0])
            parts["library_data"] += kib
            key = name.rsplit("/", 1)[-1]
            files[key] -= kib
    parts["file"] = sum(files.values())
    out: dict[str, Any] = {k: round(v / 1024, 1) for k, v in parts.items()}
    out["file_top"] = {k: round(v / 1024, 1) for k, v in sorted(files.items(), key=lambda kv: -kv[1])[:top]}
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


def run_agent(argv: list[str], *, warmup: int, cycles: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    agent = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
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
        parts = rss_parts_mib(agent.pid)
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
        "rss_parts_mib": parts,
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
    trees: list[tuple[str, Path | None, str | None]] = [("this", None, None)]
    if args.against is not None:
        trees.append(("against", args.against, None))
    trees += [(f"forget:{mode}", None, mode) for mode in args.forget]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in trees}
    for _ in range(args.repeat):
        for label, src, forget in trees:  # interleaved: every variant sees the same load
            with tempfile.TemporaryDirectory(prefix="nodegc-steady-") as state:
                trace = Path(state) / "trace" if args.trace_memory and forget is None else None
                launch = TRACED_LAUNCH if trace else FORGETTING_LAUNCH if forget else LAUNCH
                argv = [sys.executable, "-c", launch, "agent", *base, "--state-dir",
                        state, "--metrics-address", f"127.0.0.1:{free_port()}"]
                env = agent_env(src, trace, args.warmup)
                if forget is not None:
                    env = (env or dict(os.environ)) | {"NODEGC_FORGET": forget}
                run = run_agent(argv, warmup=args.warmup, cycles=args.cycles, env=env)
                if trace is not None:
                    run["memory_trace"] = read_trace(trace, args.warmup, top=args.trace_top)
                runs[label].append(run)
    out = {"setup": setup, "runtime_socket": bool(runtime), **summary(runs["this"], args)}
    if args.against is not None:
        out["against"] = {"src": str(args.against), **summary(runs["against"], args)}
    if args.forget:
        out["forgetting"] = {mode: summary(runs[f"forget:{mode}"], args) for mode in args.forget}
    return out


# rich comes with a development tool only; structlog would load it for tracebacks, production does not
LAUNCH = "import runpy, sys; sys.modules['rich'] = None; runpy.run_module('nodegc', run_name='__main__')"
FORGET_MODES = ("earlier", "correlations", "all")
FORGETTING_LAUNCH = """
import os, runpy, sys
sys.modules['rich'] = None
import nodegc.agent as agent
import nodegc.engine.detecting as detecting
from nodegc.hostio.libc import trim_malloc
from nodegc.inventory.scanning import forget_remembered
mode, wait = os.environ['NODEGC_FORGET'], agent.Wakeups.wait
def forgetting(self, timeout, stop):
    if mode == 'earlier':
        detecting.REMEMBERED._earlier = None
    else:
        detecting.REMEMBERED.forget()
        if mode == 'all':
            forget_remembered()
    trim_malloc()
    return wait(self, timeout, stop)
agent.Wakeups.wait = forgetting
runpy.run_module('nodegc', run_name='__main__')
"""
"""The agent forgetting, after every cycle, what the next one would reuse (`--forget`): `earlier`, what a
correlation made anew takes from the last one (`planning.context.Earlier`); `correlations`, the remembered
correlations too (`planning.remembered`); `all`, every reader's reuse as well (`scanning.forget_remembered`:
the mount table's parse, the iptables rules, the parsed files, the pod directory watch, the netnsids). What
that saves of the RSS, and what it costs a cycle."""
TRACED_LAUNCH = """
import json, os, runpy, sys, tracemalloc
sys.modules['rich'] = None
tracemalloc.start(int(os.environ['NODEGC_TRACE_FRAMES']))
import nodegc.agent as agent
import nodegc.engine.cycle as cycle
out, at = os.environ['NODEGC_TRACE_DIR'], int(os.environ['NODEGC_TRACE_AT'])
high = [0]
def note(when):
    current, peak = tracemalloc.get_traced_memory()
    peak, high[0] = max(peak, high[0]), 0  # the parts below reset tracemalloc's peak
    with open(os.path.join(out, 'memory.jsonl'), 'a') as f:
        f.write(json.dumps({'at': when, 'current': current, 'peak': peak, 'modules': sorted(sys.modules)}) + '\\n')
    tracemalloc.reset_peak()
freeze, wait, cycles = agent._freeze_startup_objects, agent.Wakeups.wait, [0]
def frozen():
    freeze()
    tracemalloc.take_snapshot().dump(os.path.join(out, 'startup.snapshot'))
    note(0)
def waiting(self, timeout, stop):
    cycles[0] += 1
    if cycles[0] == at:
        tracemalloc.take_snapshot().dump(os.path.join(out, 'between.snapshot'))
    note(cycles[0])
    return wait(self, timeout, stop)
judged = cycle.Engine._judged
def judging(self, inventory, findings, report):
    if cycles[0] == at:  # the cycle after the one above: its inventory and findings are alive here
        tracemalloc.take_snapshot().dump(os.path.join(out, 'judged.snapshot'))
    return judged(self, inventory, findings, report)
agent._freeze_startup_objects, agent.Wakeups.wait, cycle.Engine._judged = frozen, waiting, judging
stack, peaks = [], {}
def peaked(name, fn):
    # The peak of each part of a cycle above the memory it started from (nested parts are parts of their caller).
    def run(*args, **kwargs):
        if cycles[0] <= at:
            return fn(*args, **kwargs)
        start = tracemalloc.get_traced_memory()[0]
        if stack:
            stack[-1][1] = max(stack[-1][1], tracemalloc.get_traced_memory()[1])
        stack.append([start, 0])
        tracemalloc.reset_peak()
        try:
            return fn(*args, **kwargs)
        finally:
            begun, seen = stack.pop()
            top = max(seen, tracemalloc.get_traced_memory()[1])
            peaks.setdefault(name, []).append(top - begun)
            high[0] = max(high[0], top)
            if stack:
                stack[-1][1] = max(stack[-1][1], top)
            with open(os.path.join(out, 'peaks.json'), 'w') as f:
                json.dump(peaks, f)
    return run
import nodegc.inventory.scanning as scanning
for owner, name in ((cycle.Engine, '_fresh_desired'), (cycle.Engine, '_scan'), (cycle.Engine, '_mark'),
                    (cycle.Engine, '_report_items'), (cycle.Engine, '_cycle'), (scanning, '_read_host'),
                    (scanning, 'scan_node')):
    setattr(owner, name, peaked(name, getattr(owner, name)))
cycle.detect = peaked('detect', cycle.detect)
runpy.run_module('nodegc', run_name='__main__')
"""
"""The agent under tracemalloc: a snapshot when start-up is done (after its gc.freeze), one between two
cycles (after the warm-up) and one in the next cycle when its findings are made (`Engine._judged`, near its
peak), the traced memory and its peak at every wait between cycles."""


def agent_env(src: Path | None, trace: Path | None, warmup: int) -> dict[str, str] | None:
    if src is None and trace is None:
        return None
    env = dict(os.environ)
    if src is not None:  # another checkout's nodegc, ahead of this one's editable install
        env["PYTHONPATH"] = os.pathsep.join(x for x in (str(src), env.get("PYTHONPATH")) if x)
    if trace is not None:
        trace.mkdir()
        env |= {"NODEGC_TRACE_DIR": str(trace), "NODEGC_TRACE_AT": str(warmup), "NODEGC_TRACE_FRAMES": "16"}
    return env


def read_trace(trace: Path, warmup: int, *, top: int) -> dict[str, Any]:
    """Python objects (tracemalloc), MB: at start-up, kept between cycles after the warm-up, a cycle's peak
    above what it started from; the sites of what is kept between cycles but was not there at start-up, and
    of what a cycle holds when its findings are made beyond that; the modules loaded at start-up."""
    notes = [json.loads(line) for line in (trace / "memory.jsonl").read_text().splitlines()]
    startup, cycles = notes[0], notes[1:]
    kept = next((n for n in cycles if n["at"] == warmup), cycles[-1])
    before = {n["at"]: n["current"] for n in notes}
    peaks = [n["peak"] - before[n["at"] - 1] for n in cycles if n["at"] > warmup]
    kept_sites = _sites(*(trace / f"{x}.snapshot" for x in ("startup", "between")))
    cycle_sites = _sites(*(trace / f"{x}.snapshot" for x in ("between", "judged")))
    mb = 1e6
    return {
        "startup_mb": round(startup["current"] / mb, 2),
        "startup_modules": len(startup["modules"]),
        "between_cycles_mb": round(kept["current"] / mb, 2),
        "cycle_peak_above_start_mb": round(statistics.median(peaks) / mb, 2) if peaks else None,
        "modules_after_cycles": len(cycles[-1]["modules"]),
        "modules_loaded_by_cycles": sorted(set(cycles[-1]["modules"]) - set(startup["modules"])),
        "kept_sites_mb": {k: round(v / mb, 3) for k, v in sorted(kept_sites.items(), key=lambda kv: -kv[1])[:top]},
        "cycle_sites_mb": {k: round(v / mb, 3) for k, v in sorted(cycle_sites.items(), key=lambda kv: -kv[1])[:top]},
        "cycle_part_peaks_mb": {k: round(statistics.median(v) / mb, 2)
                                for k, v in json.loads((trace / "peaks.json").read_text()).items()},
        "startup_module_names": startup["modules"],
    }


def _sites(before: Path, after: Path) -> dict[str, int]:
    """Bytes allocated at each site, after minus before; an allocation is charged to its innermost frame
    in nodegc (else its innermost frame)."""
    import tracemalloc

    sites: dict[str, int] = {}
    for sign, path in ((-1, before), (1, after)):
        for t in tracemalloc.Snapshot.load(str(path)).traces:
            frames = list(t.traceback)
            frame = next((f for f in reversed(frames) if "/nodegc/" in f.filename), frames[-1])
            where = f"{frame.filename.rpartition('/src/')[2] or frame.filename}:{frame.lineno}"
            sites[where] = sites.get(where, 0) + sign * t.size
    return sites


def summary(runs: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    cpu = statistics.median(x["cpu_seconds_per_cycle"] for x in runs)
    out: dict[str, Any] = {
        "cpu_seconds_per_cycle": round(cpu, 4),
        "core_share_at_interval_percent": round(100 * cpu / args.interval, 3),
        "startup_rss_mib": statistics.median(x["startup_rss_mib"] or 0.0 for x in runs),
        "rss_mib": statistics.median(x["rss_mib"] for x in runs),
        "peak_rss_mib": statistics.median(x["peak_rss_mib"] for x in runs),
    }
    traced = [x["memory_trace"] for x in runs if "memory_trace" in x]
    if traced:
        out |= {f"traced_{k}": statistics.median(t[k] for t in traced)
                for k in ("startup_mb", "between_cycles_mb", "cycle_peak_above_start_mb") if traced[0][k] is not None}
    return {**out, "runs": runs}


def pod_counts(text: str) -> list[int]:
    try:
        counts = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a pod count or a comma-separated list of them: {text!r}") from None
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"pod counts must be 1 or more: {text!r}")
    return counts


def sizing(sizes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each setup's RSS after the run against the pod count, fitted by least squares to a straight line:
    `floor_mib` (the line at no pod) and `kib_per_pod`, beside the measured points, for sizing the agent's
    memory request on nodes of other sizes."""
    fits = []
    for setup in [s["setup"] for s in sizes[0]["setups"] if "rss_mib" in s]:
        points = [(size["pods"], s["rss_mib"]) for size in sizes for s in size["setups"]
                  if s["setup"] == setup and "rss_mib" in s]
        mean_x = statistics.fmean(x for x, _ in points)
        mean_y = statistics.fmean(y for _, y in points)
        slope = (sum((x - mean_x) * (y - mean_y) for x, y in points)
                 / sum((x - mean_x) ** 2 for x, _ in points))
        fits.append({"setup": setup, "points_pods_rss_mib": points, "floor_mib": round(mean_y - slope * mean_x, 1),
                     "kib_per_pod": round(slope * 1024, 1)})
    return fits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=pod_counts, default=[1000], metavar="N[,N...]",
                        help="live pods on the node; several counts (`110,250,500,1000`): the node grows to each"
                             " in turn, every setup is measured at each, and `sizing` fits RSS to the count")
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
    parser.add_argument("--against", type=Path, default=None, metavar="SRC",
                        help="another checkout's src directory: each repeat runs its agent too, right after this"
                             " one's (interleaved), reported under `against`")
    parser.add_argument("--trace-memory", action="store_true",
                        help="run the agents under tracemalloc (slower; RSS and CPU then include its cost) and"
                             " report Python objects at start-up, kept between cycles, a cycle's peak, and where"
                             " what is kept between cycles was allocated")
    parser.add_argument("--trace-top", type=int, default=25, help="sites listed with --trace-memory")
    parser.add_argument("--forget", default="", metavar="MODES",
                        help=f"comma-separated, of {', '.join(FORGET_MODES)}: each repeat also runs this tree's"
                             " agent forgetting that reuse after every cycle (interleaved), reported under"
                             " `forgetting`")
    args = parser.parse_args()
    args.forget = [x.strip() for x in args.forget.split(",") if x.strip()]
    if bad := [x for x in args.forget if x not in FORGET_MODES]:
        parser.error(f"unknown --forget modes {bad}: choose from {', '.join(FORGET_MODES)}")
    setups = [x.strip() for x in args.setups.split(",") if x.strip()]
    unknown = [x for x in setups if x not in SETUPS]
    if unknown:
        parser.error(f"unknown setups {unknown}: choose from {', '.join(SETUPS)}")
    configure_logging("error")
    load_before = os.getloadavg()
    sizes: list[dict[str, Any]] = []
    with SandboxNode.create() as node:
        pods: list[Any] = []
        for count in args.pods:  # one node, grown to each count in turn
            started = time.perf_counter()
            pods += [node.add_pod(f"pod-{i}", volumes=("data",), host_port=10000 + i if i % 10 == 0 else None)
                     for i in range(len(pods), count)]
            build_s = time.perf_counter() - started
            results = []
            for setup in setups:
                with ExitStack() as stack:
                    results.append(measure_setup(setup, node, pods, args, stack))
            sizes.append({"pods": count, "build_seconds": round(build_s, 1), "setups": results})
    doc: dict[str, Any] = {
        "benchmark": "agent_steady",
        "cpus": os.cpu_count(),
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "api_pods": args.api_pods,
        "interval_seconds": args.interval,
    }
    if len(sizes) == 1:
        doc |= sizes[0]
    else:
        doc |= {"sizes": sizes, "sizing": sizing(sizes)}
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
