"""`nodegc controller`: the cluster-scoped loop (a Deployment) that clears stale EndpointSlice endpoints.

Several replicas may run; a Lease elects the one that acts. Leadership is renewed in a background thread,
and every pass, and every write inside a pass, first asks `is_leader()`, which turns False the moment a
renew fails or the renew deadline passes, so a replica that lost the Lease stops acting at once.
`--dry-run` plans and logs but writes nothing except the Lease (no slice patches, no Events).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

import lightkube
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

from nodegc import defaults
from nodegc.api.client import CONTROLLER_FIELD_MANAGER, make_client
from nodegc.api.errors import KubeError
from nodegc.exitcodes import EXIT_CLEAN, EXIT_SOURCE, EXIT_USAGE
from nodegc.flags import add_controller_parser
from nodegc.hostio.libc import tune_malloc
from nodegc.kube.cache import DEFAULT_MAX_AGE_SECONDS, ClusterCache
from nodegc.kube.endpointslices import EndpointSliceSweeper, RawEndpointSlice, SweepOptions, SweepReport
from nodegc.kube.events import EventRecorder, FlushReport
from nodegc.kube.leases import LeaderElector, LeaseConfig
from nodegc.observe.health import HealthServer, HealthServerError
from nodegc.observe.logs import get_logger
from nodegc.observe.metrics import MetricsServer, build_info

log = get_logger("nodegc.controller")

EXIT_OK = EXIT_CLEAN
__all__ = ["Controller", "ControllerMetrics", "ControllerSettings", "add_controller_parser", "cmd_controller",
           "lease_config"]

DEFAULT_LEASE_NAME = defaults.CONTROLLER_LEASE_NAME
PASS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class ControllerMetrics:
    """The controller's own registry (it runs in its own process, apart from the agent's metrics)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.leader = Gauge("nodegc_controller_leader", "1 while this replica holds the Lease.", registry=r)
        self.build_info = build_info(r)
        self.passes = Counter("nodegc_controller_passes",
                              "Controller passes by result (ok, failed, not_leader).", ["result"], registry=r)
        self.pass_duration = Histogram("nodegc_controller_pass_duration_seconds", "Wall time of one pass.",
                                       buckets=PASS_BUCKETS, registry=r)
        self.stale_endpoints = Counter(
            "nodegc_stale_endpoints",
            "Stale EndpointSlice endpoints found, by reason and action (report, remove).",
            ["reason", "action"], registry=r)
        self.endpoint_removals = Counter(
            "nodegc_endpoint_removals", "Stale endpoints by outcome (removed, dry_run, kept, failed).",
            ["result"], registry=r)
        self.slice_conflicts = Counter(
            "nodegc_endpointslice_conflicts", "Slice patches refused with 409 and redone on fresh data.",
            registry=r)
        self.events = Counter("nodegc_events_written", "Event writes by result (created, patched, failed, "
                              "deferred).", ["result"], registry=r)

    def swept(self, report: SweepReport, seconds: float) -> None:
        self.passes.labels("ok").inc()
        self.pass_duration.observe(seconds)
        for stale in report.stale:
            self.stale_endpoints.labels(stale.reason.value, stale.action.value).inc()
        for result, n in (("removed", len(report.removed)), ("dry_run", len(report.would_remove)),
                          ("kept", report.kept_on_reverify), ("failed", len(report.failures))):
            if n:
                self.endpoint_removals.labels(result).inc(n)
        if report.conflicts:
            self.slice_conflicts.inc(report.conflicts)

    def flushed(self, report: FlushReport) -> None:
        for result, n in (("created", report.created), ("patched", report.patched), ("failed", report.failed),
                          ("deferred", report.deferred)):
            if n:
                self.events.labels(result).inc(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def serve(self, host: str, port: int) -> MetricsServer:
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        return MetricsServer(server=server, thread=thread)


@dataclass(frozen=True)
class ControllerSettings:
    lease: LeaseConfig
    interval: float = defaults.CONTROLLER_INTERVAL_SECONDS
    sweep: SweepOptions = field(default_factory=SweepOptions)
    events_per_minute: int = defaults.CONTROLLER_EVENTS_PER_MINUTE
    event_flush_interval: float = 10.0
    cache: bool = True
    """Read pods and EndpointSlices from watch-backed caches (started while this replica leads) instead of
    listing both every pass."""
    cache_max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS
    """A cache not known current for this long (a stalled or failing watch) blocks the pass."""
    cache_sync_timeout: float = 30.0
    malloc: tuple[str, ...] = ()
    """The allocator settings made at start (`hostio.libc.tune_malloc`), named in the `controller started` log."""


class Controller:
    def __init__(
        self,
        client: lightkube.Client,
        settings: ControllerSettings,
        *,
        metrics: ControllerMetrics | None = None,
        elector: LeaderElector | None = None,
        events: EventRecorder | None = None,
        cache: ClusterCache | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or ControllerMetrics()
        self.elector = elector or LeaderElector(client, settings.lease, on_change=self._leadership)
        if events is None and not settings.sweep.dry_run:
            events = EventRecorder(client, component="nodegc-controller", instance=settings.lease.identity,
                                   max_per_minute=settings.events_per_minute,
                                   flush_interval=settings.event_flush_interval)
        self.events = events
        if cache is None and settings.cache:
            cache = ClusterCache(client, RawEndpointSlice, max_age_seconds=settings.cache_max_age_seconds)
        self.cache = cache
        self.sweeper = EndpointSliceSweeper(client, is_leader=self.elector.is_leader, events=events,
                                            options=settings.sweep, cache=self.cache)
        self._last_pass_failed = False
        self._ticked: float | None = None
        """Monotonic time of the loop's last turn (None before the first): what /healthz reads."""
        self._started = time.monotonic()

    def live(self) -> tuple[bool, str]:
        """The loop turns: a turn within three of its longest waits (or since start, before the first)."""
        window = 3 * max(self.settings.interval, self.settings.lease.retry_period) + 30
        last = self._ticked if self._ticked is not None else self._started
        age = time.monotonic() - last
        return (age < window, f"last loop turn {age:.0f}s ago (limit {window:.0f}s)")

    def ready(self) -> tuple[bool, str]:
        """Ready once the loop turned, unless its last pass as leader could not read the cluster."""
        if self._ticked is None:
            return False, "starting"
        if self._last_pass_failed:
            return False, "the last pass could not read the cluster"
        return True, "leader" if self.elector.is_leader() else "follower"

    def run(self, stop: threading.Event, *, max_passes: int = 0) -> None:
        """Until `stop` is set (or `max_passes` passes): a pass every interval while leader."""
        self.elector.try_acquire_or_renew()  # first answer now, not one retry period later
        self.elector.start()
        log.info("controller started", identity=self.settings.lease.identity, interval=self.settings.interval,
                 lease=f"{self.settings.lease.namespace}/{self.settings.lease.name}",
                 dry_run=self.settings.sweep.dry_run, malloc=list(self.settings.malloc))
        passes = 0
        try:
            while not stop.is_set():
                started = time.monotonic()
                report = self.run_once()
                self._ticked = time.monotonic()
                passes += 1
                if max_passes and passes >= max_passes:
                    break
                # A follower looks again after a retry period, so it acts soon after it takes over; a leader
                # whose pass failed waits the interval: no cluster-wide relists while the API struggles.
                led = report is not None or self._last_pass_failed
                wait = self.settings.interval if led else self.settings.lease.retry_period
                stop.wait(max(0.0, wait - (time.monotonic() - started)))
        finally:
            if self.cache is not None:
                self.cache.stop()
            self.elector.stop(release=True)
            self._flush(final=True)
            log.info("controller stopped", passes=passes)

    def run_once(self) -> SweepReport | None:
        """One pass if this replica leads; None when it does not or the pass could not read the cluster."""
        if not self.elector.is_leader():
            self.metrics.passes.labels("not_leader").inc()
            log.debug("not the leader; waiting", holder=self.elector.observed_holder)
            if self.cache is not None and self.cache.running:
                self.cache.stop()  # a follower does not load the API server with cluster-wide watches
                log.info("caches stopped: not the leader")
            return None
        started = time.monotonic()
        self._last_pass_failed = False
        try:
            if self.cache is not None and not self.cache.running:
                log.info("starting the pod and EndpointSlice caches")
                self.cache.start(sync_timeout=self.settings.cache_sync_timeout)
            report = self.sweeper.sweep()
        except KubeError as e:
            self._last_pass_failed = True
            self.metrics.passes.labels("failed").inc()
            log.error("pass failed; nothing was changed after the failure", error=str(e))
            return None
        self.metrics.swept(report, time.monotonic() - started)
        log.info("pass done", stale=len(report.stale), reported=len(report.reported),
                 removed=len(report.removed),
                 would_remove=len(report.would_remove), conflicts=report.conflicts,
                 failures=len(report.failures), deferred_slices=report.deferred_slices,
                 lost_leadership=report.lost_leadership, seconds=round(time.monotonic() - started, 3))
        self._flush(final=False)
        return report

    def _flush(self, *, final: bool) -> None:
        if self.events is None:
            return
        flushed = self.events.flush() if final else self.events.maybe_flush()
        if flushed is not None:
            self.metrics.flushed(flushed)

    def _leadership(self, leader: bool) -> None:
        self.metrics.leader.set(1 if leader else 0)


# --- command line -------------------------------------------------------------------------------------


def default_identity() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


def lease_config(*, namespace: str, name: str, identity: str, lease_duration: float) -> LeaseConfig:
    """client-go's proportions (15 s / 10 s / 2 s) scaled to the chosen duration."""
    return LeaseConfig(namespace=namespace, name=name, identity=identity, lease_duration=lease_duration,
                       renew_deadline=lease_duration * 2 / 3, retry_period=lease_duration * 2 / 15)


def cmd_controller(args: argparse.Namespace) -> int:
    # Before any thread, as the agent does: a long-running process's allocator settings (the operator's
    # MALLOC_* and GLIBC_TUNABLES win).
    malloc = tune_malloc()
    try:
        lease = lease_config(namespace=args.lease_namespace, name=args.lease_name,
                             identity=args.identity or default_identity(), lease_duration=args.lease_duration)
        if args.max_patches_per_pass < 0 or args.interval <= 0 or args.events_per_minute < 1:
            raise ValueError(
                "--interval must be positive, --max-patches-per-pass >= 0, --events-per-minute >= 1")
    except ValueError as e:
        print(f"nodegc: --lease-duration {args.lease_duration:g} is not usable: {e}", file=sys.stderr)
        return EXIT_USAGE
    settings = ControllerSettings(
        lease=lease, interval=args.interval, events_per_minute=args.events_per_minute,
        sweep=SweepOptions(dry_run=args.dry_run, max_patches=args.max_patches_per_pass), malloc=tuple(malloc),
    )
    try:
        client = make_client(args.kubeconfig, field_manager=CONTROLLER_FIELD_MANAGER)
    except KubeError as e:
        print(f"nodegc: {e}", file=sys.stderr)
        return EXIT_SOURCE
    metrics = ControllerMetrics()
    controller = Controller(client, settings, metrics=metrics)
    server = None
    if args.metrics_address:
        host, _, port = args.metrics_address.rpartition(":")
        try:
            # /metrics, /healthz and /readyz on one port, as the agent serves them.
            server = HealthServer(host or "0.0.0.0", int(port), metrics=metrics,  # noqa: S104 - a pod's port
                                  live=controller.live, ready=controller.ready).start()
        except (HealthServerError, ValueError) as e:
            print(f"nodegc: cannot serve metrics on {args.metrics_address}: {e}", file=sys.stderr)
            client.close()
            return EXIT_USAGE
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    try:
        controller.run(stop, max_passes=args.max_passes)
    finally:
        if server is not None:
            server.shutdown()
        client.close()
    return EXIT_OK
