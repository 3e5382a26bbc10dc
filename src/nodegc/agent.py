"""The node agent's loop: a cycle every interval, extra cycles after a pod deletion, Events, health.

With the API as desired state it watches the node's pods (PodReflector): one watch plus resyncs, and a
live GET per reclaim candidate at terminate; never a list per scan. A deletion event schedules K cycles
spread over the grace period, so the deleted pod's residue is marked (K scans, grace) and reclaimed
within grace plus a few seconds, without waiting for the interval.
"""

from __future__ import annotations

import gc
import heapq
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nodegc.console import require_root
from nodegc.desired.source import DesiredSource, SourceError
from nodegc.engine.cycle import CycleReport, Engine
from nodegc.exitcodes import EXIT_BLOCKED, EXIT_CLEAN, EXIT_ERROR, EXIT_SOURCE, EXIT_USAGE
from nodegc.hostio.libc import trim_malloc, tune_malloc
from nodegc.hostio.mountinfo import read_mounts
from nodegc.inventory.pod_dirs import pod_dir_watcher
from nodegc.ledger.store import LedgerError, LedgerLocked
from nodegc.model.findings import Finding
from nodegc.model.pods import OwnerState, Pod
from nodegc.observe.health import HealthServer, HealthServerError, Heartbeat
from nodegc.observe.logs import get_logger
from nodegc.observe.metrics import Metrics
from nodegc.planning.conditions import node_conditions
from nodegc.planning.ipranges import RangeTracker
from nodegc.reclaim.runtime_leftovers import cgroup_view_doubt
from nodegc.wiring import (
    AgentSettings,
    agent_engine_settings,
    iptables_backend,
    make_api_client,
    make_event_recorder,
    make_executor,
    make_node_conditions,
    make_reflector,
    make_source,
    open_ledger,
    reads_stdin,
)

if TYPE_CHECKING:
    # The API client (lightkube, httpx2, msgspec) is loaded only when the pods come from the API: an agent
    # fed by a snapshot file never pays its memory (nodegc.kube imports it).
    from nodegc.kube.events import EventRecorder
    from nodegc.kube.nodes import NodeConditionWriter

log = get_logger("nodegc.agent")


@dataclass
class Wakeups:
    """Times (monotonic) at which an extra cycle is due; fed from the watch thread."""

    clock: Callable[[], float] = time.monotonic
    _due: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    event: threading.Event = field(default_factory=threading.Event)

    def after_deletion(self, *, consecutive_scans: int, grace: float) -> None:
        """Cycles at 0, grace/(K-1), ..., grace (+ a margin), so the K-th scan sees the grace passed."""
        now = self.clock()
        k = max(1, consecutive_scans)
        steps = [grace * i / (k - 1) for i in range(k)] if k > 1 else [0.0, grace]
        with self._lock:
            for offset in steps:
                heapq.heappush(self._due, now + offset + (0.5 if offset else 0.0))
        self.event.set()

    def wait(self, timeout: float, stop: threading.Event) -> None:
        """Sleep until the interval passes, a scheduled cycle is due, or stop is set. Every slot due by
        now is consumed at once: a drain of 100 pods asks for a few cycles, not 300 in a row."""
        deadline = self.clock() + timeout
        while not stop.is_set():
            with self._lock:
                self.event.clear()  # under the lock: a push after this sets it again, nothing is lost
                now = self.clock()
                if self._due and self._due[0] <= now:
                    while self._due and self._due[0] <= now:
                        heapq.heappop(self._due)
                    return
                if now >= deadline:
                    return
                nxt = min(deadline, self._due[0]) if self._due else deadline
            self.event.wait(min(nxt - now, 1.0))


def record_events(events: EventRecorder, node: str, report: CycleReport) -> None:
    """Reclaims and failures as Events: on the pod while it exists (terminal, same UID), else the Node."""
    from nodegc.kube.events import EventType, ObjectRef

    findings: dict[str, Finding] = {f"{f.kind.value}:{f.id}": f for f in report.findings}
    for item, outcome in report.outcomes:
        if outcome.skipped:
            continue
        finding = findings.get(item.key)
        ref = ObjectRef.node(node)
        if (finding is not None and finding.owner_state is OwnerState.TERMINAL and item.owner_namespace
                and item.owner_name):
            ref = ObjectRef.pod(item.owner_namespace, item.owner_name, item.owner_uid)
        if outcome.ok:
            events.record(ref, reason="ResidueReclaimed",
                          message=f"nodegc reclaimed {item.kind.value} {item.resource_id}: {outcome.detail}")
        else:
            events.record(ref, reason="ResidueReclaimFailed", type=EventType.WARNING,
                          message=f"nodegc could not reclaim {item.kind.value} {item.resource_id}: {outcome.detail}")
    for f in report.running_orphans:
        events.record(ObjectRef.node(node), reason="RunningOrphanSandbox", type=EventType.WARNING,
                      message=f"sandbox {f.id[:12]} of {f.owner.label()} (uid {f.owner.uid}) is READY but its pod"
                              " is not in the API")
    for f in report.orphan_shims:
        events.record(ObjectRef.node(node), reason="OrphanShim", type=EventType.WARNING,
                      message=f"containerd shim {f.id} of id {(f.owner.container_id or '?')[:12]} runs, but the"
                              " runtime lists no such sandbox or container")
    for f, stopped, why in report.stopped_orphans:
        if stopped:
            events.record(ObjectRef.node(node), reason="RunningOrphanStopped", type=EventType.WARNING,
                          message=f"nodegc stopped sandbox {f.id[:12]} of {f.owner.label()}: {why}")
    for reason in report.blocked:
        events.record(ObjectRef.node(node), reason="ReclaimBlocked", type=EventType.WARNING,
                      message=f"nodegc did nothing destructive: {reason}")


def run_loop(
    engine: Engine,
    *,
    interval: float,
    stop: threading.Event,
    wakeups: Wakeups,
    heartbeat: Heartbeat,
    on_report: Callable[[CycleReport], None] | None = None,
    max_cycles: int = 0,
) -> None:
    cycles = 0
    while not stop.is_set():
        started = time.monotonic()
        heartbeat.cycle_started()
        try:
            report = engine.cycle()
            heartbeat.cycle_finished(report.blocked)
            log.info("cycle done", residue=sum(1 for f in report.findings if f.cls.is_residue),
                     reclaimed=sum(1 for _, o in report.outcomes if o.ok), blocked=len(report.blocked),
                     closed=len(report.closed), seconds=round(time.monotonic() - started, 3))
            if on_report is not None:
                on_report(report)
            # Not kept through the wait: the next cycle's scan would otherwise build its inventory and
            # findings while this one's are still alive, and the process's memory is set by that peak.
            del report
            trim_malloc()
        except LedgerError as e:
            heartbeat.cycle_finished(error=str(e))
            log.error("ledger error; nothing destructive this cycle", error=str(e))
        except Exception as e:
            # A bug or an input no reader foresaw must not stop the agent: the ledger resumes any step
            # that was in flight, /readyz turns red, and the traceback is in the log.
            heartbeat.cycle_finished(error=f"{type(e).__name__}: {e}")
            log.exception("cycle failed; the next cycle starts from the ledger", error=f"{type(e).__name__}: {e}")
        cycles += 1
        if max_cycles and cycles >= max_cycles:
            return
        wakeups.wait(max(0.0, interval - (time.monotonic() - started)), stop)


def deletion_hook(wakeups: Wakeups, *, consecutive_scans: int, grace: float) -> Callable[[Pod], None]:
    def on_delete(pod: Pod) -> None:
        log.info("pod deleted; extra cycles scheduled", pod=f"{pod.namespace}/{pod.name}", uid=pod.uid)
        wakeups.after_deletion(consecutive_scans=consecutive_scans, grace=grace)

    return on_delete


RANGES_FILE = "ip-ranges.json"
MAX_RANGES_FILE_BYTES = 16 * 1024 * 1024


class RangeWindowFile:
    """The IP range forecast's window, kept in the state directory so an agent restart does not empty it:
    written (atomically) every `every` seconds and at exit, read once at start. A missing, unreadable or
    malformed file is a fresh start, never an error. The file names the node its samples were taken on; the
    engine starts a window of another node afresh at its first usable desired state (`Engine._own_window`)."""

    def __init__(self, path: Path, tracker: RangeTracker, *, every: float = 300.0,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.tracker = tracker
        self.every = every
        self.clock = clock
        self.monotonic = monotonic
        self._saved = monotonic()

    def load(self) -> int:
        try:
            # O_NONBLOCK: a FIFO in its place cannot block the start (it reads as empty: malformed).
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as f:
                raw = f.read(MAX_RANGES_FILE_BYTES + 1)
            if len(raw) > MAX_RANGES_FILE_BYTES:
                raise ValueError("file too large")
            taken = self.tracker.restore(json.loads(raw), self.clock())
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, RecursionError) as e:
            log.warning("IP range window not restored; starting afresh", path=str(self.path), error=str(e))
            return 0
        log.info("IP range window restored", path=str(self.path), samples=taken, node=self.tracker.node)
        return taken

    def save(self, *, force: bool = False) -> None:
        if not force and self.monotonic() - self._saved < self.every:
            return
        self._saved = self.monotonic()
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            # A fresh file, never followed: whatever was left at the temporary name (a symlink) goes first.
            tmp.unlink(missing_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(self.tracker.snapshot()))
            os.replace(tmp, self.path)
        except OSError as e:
            log.warning("IP range window not saved", path=str(self.path), error=str(e))


# -- the command ------------------------------------------------------------------------------------


def cmd_agent(settings: AgentSettings) -> int:
    if reads_stdin(settings.source):
        print("nodegc: the agent cannot watch a list read from stdin (--pods-from -)\n"
              "hint: give it the API (in-cluster, --kubeconfig) or a snapshot file someone keeps fresh",
              file=sys.stderr)
        return EXIT_USAGE
    denied = require_root("nodegc agent")
    if denied is not None:
        return denied
    malloc = tune_malloc()  # before any thread: a long-running process's allocator settings
    roots = settings.roots
    phases = settings.phases
    engine_settings = agent_engine_settings(settings.safety, phases, watch_pod_dirs=settings.watch_pod_dirs)
    executor = make_executor(roots, dry_run=settings.dry_run, timeout=settings.safety.command_timeout,
                             runtime_endpoint=settings.safety.runtime_endpoint,
                             runtime_timeout=settings.safety.runtime_timeout,
                             iptables_backend=settings.safety.iptables_backend,
                             runtime_state_dir=settings.safety.runtime_state_dir,
                             runc_root=settings.safety.runc_root, cgroup_root=settings.safety.cgroup_root)
    metrics, heartbeat = _health(settings)
    node = settings.source.node_name()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    wakeups = Wakeups()
    with ExitStack() as cleanup:
        try:
            server = _serve(settings.metrics_address, metrics, heartbeat)
            if server is not None:
                cleanup.callback(server.shutdown)
            source, events, conditions = _desired(settings, node, wakeups, cleanup)
            ledger = cleanup.enter_context(open_ledger(settings.safety.ledger_path,
                                                       retention_seconds=settings.ledger_retention_seconds))
        except (HealthServerError, ValueError) as e:
            print(f"nodegc: cannot serve metrics and health on {settings.metrics_address}: {e}", file=sys.stderr)
            return EXIT_USAGE
        except SourceError as e:
            print(f"nodegc: cannot watch the pods of node {node}: {e}", file=sys.stderr)
            return EXIT_SOURCE
        except LedgerLocked as e:
            print(f"nodegc: {e}", file=sys.stderr)
            return EXIT_BLOCKED
        except LedgerError as e:
            print(f"nodegc: {e}", file=sys.stderr)
            return EXIT_ERROR
        engine = Engine(roots=roots, source=source, ledger=ledger, executor=executor, settings=engine_settings,
                        metrics=metrics)
        log.info("agent started", node=node, interval=settings.interval, dry_run=settings.dry_run,
                 ledger=ledger.path, k=phases.consecutive_scans, grace=phases.grace_seconds, source=source.name,
                 iptables=iptables_backend(roots, settings.safety), watch_pod_dirs=settings.watch_pod_dirs,
                 malloc=malloc)
        metrics.pod_dir_watch(pod_dir_watcher(roots.kubelet_root).stats if settings.watch_pod_dirs else None)
        stats = getattr(source, "stats", None)
        if callable(stats):
            metrics.watch_counters(stats)  # the pod watch's lists, relists, watch restarts and events

        window = RangeWindowFile(settings.safety.state_dir / RANGES_FILE, engine.ip_ranges)
        window.load()

        def on_report(report: CycleReport) -> None:
            if events is not None:
                record_events(events, node, report)
            if conditions is not None:
                conditions.update(node_conditions(report.blocked, report.ranges))
            window.save()

        _freeze_startup_objects()
        run_loop(engine, interval=settings.interval, stop=stop, wakeups=wakeups, heartbeat=heartbeat,
                 on_report=on_report, max_cycles=settings.max_cycles)
        window.save(force=True)
    log.info("agent stopped")
    return EXIT_CLEAN


def _health(settings: AgentSettings) -> tuple[Metrics, Heartbeat]:
    metrics = Metrics()
    heartbeat = Heartbeat(settings.interval)
    metrics.readiness(heartbeat.ready)
    _check_cgroup_view(settings, metrics, heartbeat)
    return metrics, heartbeat


def _check_cgroup_view(settings: AgentSettings, metrics: Metrics, heartbeat: Heartbeat) -> None:
    """A pod on cgroup v2 sees /sys/fs/cgroup through a cgroup namespace of its own, whose root is its own
    cgroup: no container of the node is in it. Said once at start (log, nodegc_cgroup_view_ok, /readyz's
    reason); each task bundle's step then says "cannot tell" for its container's cgroup and keeps the bundle."""
    root = settings.safety.cgroup_root
    if root is None or settings.safety.runtime_state_dir is None:
        return  # no container cgroup is ever touched
    mounts, problems = read_mounts(settings.roots.proc_root)
    doubt = (cgroup_view_doubt(root, mounts) if mounts
             else f"cannot read the mount table: {problems[0].reason if problems else 'empty'}")
    metrics.cgroup_view(doubt is None)
    if doubt is None:
        return
    log.warning("the cgroup hierarchies nodegc reads are not the node's: the cgroups of reclaimed task bundles"
                " cannot be told gone, and their bundles are kept", cgroup_root=str(root), reason=doubt,
                hint="mount the node's /sys/fs/cgroup (hostPath) and point --cgroup-root at it")
    heartbeat.note(f"container cgroups cannot be told gone: {doubt}")


def _freeze_startup_objects() -> None:
    """Move what start-up made (modules, classes, the wiring: about 46,000 objects) out of the cyclic
    collector's reach. They live as long as the process, yet every full collection walked them again: at
    1,000 pods that was 35 ms of a cycle's CPU, 13 ms after the freeze. Reference counting still frees
    frozen objects; only cycles among them are never collected, and start-up makes none that matter."""
    gc.collect()
    gc.freeze()


def _serve(address: str, metrics: Metrics, heartbeat: Heartbeat) -> HealthServer | None:
    if not address:
        return None
    host, _, port = address.rpartition(":")
    return HealthServer(host or "0.0.0.0", int(port), metrics=metrics,  # noqa: S104 - a node agent's port
                        live=heartbeat.live, ready=heartbeat.ready).start()


def _desired(
    settings: AgentSettings, node: str, wakeups: Wakeups, cleanup: ExitStack
) -> tuple[DesiredSource, EventRecorder | None, NodeConditionWriter | None]:
    """A snapshot file, or a watch on the node's pods plus an Event recorder and the node's conditions
    (ResidueReclaimBlocked, PodIPRangePressure) on the same API; neither in dry run."""
    if settings.source.pods_from is not None:
        return make_source(settings.source), None, None
    hook = deletion_hook(wakeups, consecutive_scans=settings.phases.consecutive_scans,
                         grace=settings.phases.grace_seconds)
    client = make_api_client(settings.source)  # one client: the watch, the live GETs, the Events
    cleanup.callback(client.close)
    reflector = make_reflector(settings.source, on_delete=hook, client=client)
    cleanup.callback(reflector.stop)
    if settings.dry_run:
        return reflector, None, None
    events = make_event_recorder(settings.source, node=node, client=client)
    events.start()
    cleanup.callback(events.stop)
    return reflector, events, make_node_conditions(node=node, client=client)

