"""The node agent's loop: a cycle every interval, extra cycles after a pod deletion, Events, health.

With the API as desired state it watches the node's pods (PodReflector): one watch plus resyncs, and a
live GET per reclaim candidate at terminate; never a list per scan. A deletion event schedules K cycles
spread over the grace period, so the deleted pod's residue is marked (K scans, grace) and reclaimed
within grace plus a few seconds, without waiting for the interval.
"""

from __future__ import annotations

import argparse
import heapq
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field

from nodegc.cli import (
    EXIT_BLOCKED,
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_SOURCE,
    EXIT_USAGE,
    roots_from_args,
    source_from_args,
)
from nodegc.commands import LEDGER_FILE, engine_settings, open_ledger
from nodegc.desired.reflector import PodReflector
from nodegc.desired.source import DesiredSource, SourceError
from nodegc.engine.cycle import CycleReport, Engine
from nodegc.kube.client import make_client
from nodegc.kube.errors import KubeError
from nodegc.kube.events import EventRecorder, EventType, ObjectRef
from nodegc.ledger.store import LedgerError, LedgerLocked
from nodegc.model.findings import Finding
from nodegc.model.pods import OwnerState, Pod
from nodegc.observe.health import HealthServer, HealthServerError, Heartbeat
from nodegc.observe.logs import get_logger
from nodegc.observe.metrics import Metrics
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor, Executor, HostExecutor

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
        except LedgerError as e:
            heartbeat.cycle_finished(error=str(e))
            log.error("ledger error; nothing destructive this cycle", error=str(e))
        cycles += 1
        if max_cycles and cycles >= max_cycles:
            return
        wakeups.wait(max(0.0, interval - (time.monotonic() - started)), stop)


def deletion_hook(wakeups: Wakeups, *, consecutive_scans: int, grace: float) -> Callable[[Pod], None]:
    def on_delete(pod: Pod) -> None:
        log.info("pod deleted; extra cycles scheduled", pod=f"{pod.namespace}/{pod.name}", uid=pod.uid)
        wakeups.after_deletion(consecutive_scans=consecutive_scans, grace=grace)

    return on_delete


# -- the command ------------------------------------------------------------------------------------


def cmd_agent(args: argparse.Namespace) -> int:
    roots = roots_from_args(args)
    phases = PhasePolicy(consecutive_scans=args.consecutive_scans, grace_seconds=args.grace,
                         per_kind=dict(args.mark_rule))
    settings = engine_settings(args, phases)
    executor: Executor = DryRunExecutor() if args.dry_run else HostExecutor(roots, timeout=args.command_timeout)
    metrics = Metrics()
    heartbeat = Heartbeat(args.interval)
    node = args.node or os.environ.get("NODE_NAME") or socket.gethostname()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    wakeups = Wakeups()
    with ExitStack() as cleanup:
        try:
            server = _serve(args.metrics_address, metrics, heartbeat)
            if server is not None:
                cleanup.callback(server.shutdown)
            source, events = _desired(args, node, wakeups, cleanup)
            ledger = cleanup.enter_context(open_ledger(args.state_dir / LEDGER_FILE,
                                                       retention_seconds=args.ledger_retention))
        except (HealthServerError, ValueError) as e:
            print(f"nodegc: cannot serve metrics and health on {args.metrics_address}: {e}", file=sys.stderr)
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
        engine = Engine(roots=roots, source=source, ledger=ledger, executor=executor, settings=settings,
                        metrics=metrics)
        log.info("agent started", node=node, interval=args.interval, dry_run=args.dry_run, ledger=ledger.path,
                 k=args.consecutive_scans, grace=args.grace, source=source.name)
        on_report = (lambda report: record_events(events, node, report)) if events is not None else None
        run_loop(engine, interval=args.interval, stop=stop, wakeups=wakeups, heartbeat=heartbeat,
                 on_report=on_report, max_cycles=args.max_cycles)
    log.info("agent stopped")
    return EXIT_CLEAN


def _serve(address: str, metrics: Metrics, heartbeat: Heartbeat) -> HealthServer | None:
    if not address:
        return None
    host, _, port = address.rpartition(":")
    return HealthServer(host or "0.0.0.0", int(port), metrics=metrics,  # noqa: S104 - a node agent's port
                        live=heartbeat.live, ready=heartbeat.ready).start()


def _desired(
    args: argparse.Namespace, node: str, wakeups: Wakeups, cleanup: ExitStack
) -> tuple[DesiredSource, EventRecorder | None]:
    """A snapshot file, or a watch on the node's pods plus an Event recorder on the same API."""
    if args.pods_from is not None:
        return source_from_args(args), None
    hook = deletion_hook(wakeups, consecutive_scans=args.consecutive_scans, grace=args.grace)
    reflector = PodReflector(node, kubeconfig=args.kubeconfig, on_delete=hook).start()
    cleanup.callback(reflector.stop)
    if args.dry_run:
        return reflector, None
    try:
        events = EventRecorder(make_client(args.kubeconfig), component="nodegc", instance=node, host=node)
    except KubeError as e:
        log.warning("events disabled: no API client", error=str(e))
        return reflector, None
    events.start()
    cleanup.callback(events.stop)
    return reflector, events
