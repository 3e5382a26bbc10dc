"""Prometheus metrics of one nodegc process.

Each `Metrics` owns its registry instead of using the process-global one, so tests (and several engines in
one process) can each have their own without "duplicated timeseries" errors.
"""

from __future__ import annotations

import contextlib
import platform
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from nodegc import __version__
from nodegc.model.ipranges import RangeStatus
from nodegc.model.resources import DUMP_BOUND, READ_CAUSES, UNTOLD_PROCESS_CAUSE, Kind

RANGE_LABELS = ("network", "range")
WATCH_EVENT_TYPES = ("added", "modified", "deleted", "bookmark", "error")
RELIST_REASONS = ("gone", "stalled", "error", "refresh", "replayed")
RECLAIM_RESULTS = ("ok", "gone", "changed", "failed", "dry_run")
BLOCK_REASONS = ("source_unavailable", "stale_source", "view_not_current", "blast_radius", "runtime_unavailable",
                 "rate_limit", "reverification")
"""Every reason (and every kind and result of a reclaim) is exported from the start at 0, so rate() and
increase() see the first block or failure."""
STREAK_REASONS = ("view_not_current", "stale_source", "source_unavailable")
"""Why a cycle restarted detected items' scans in a row: its view not proven current, or its desired state
unknown (too old, from the future, unreadable)."""

SCAN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass
class MetricsServer:
    """The HTTP endpoint serving one registry; `shutdown()` stops it and frees the port."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def build_info(registry: CollectorRegistry) -> Gauge:
    """`nodegc_build_info{version, python}` = 1, in every nodegc process that serves metrics."""
    gauge = Gauge("nodegc_build_info", "nodegc version and Python version; always 1.", ["version", "python"],
                  registry=registry)
    gauge.labels(__version__, platform.python_version()).set(1)
    return gauge


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.items_gauge = Gauge(
            "nodegc_items", "Ledger items by kind and phase (active items only).", ["kind", "phase"],
            registry=r,
        )
        self.reclaims = Counter(
            "nodegc_reclaims", "Reclaim attempts by kind and result (ok, gone, changed, failed, dry_run).",
            ["kind", "result"], registry=r,
        )
        self.scan_duration = Histogram(
            "nodegc_scan_duration_seconds", "Wall time of one scan (inventory and correlation).",
            buckets=SCAN_BUCKETS, registry=r,
        )
        self.actions_blocked = Counter(
            "nodegc_actions_blocked", "Cycles in which destructive actions were blocked, by reason.",
            ["reason"], registry=r,
        )
        self.ledger_errors = Counter(
            "nodegc_ledger_errors", "Ledger writes or reads that failed.", registry=r
        )
        self.ledger_takeovers = Counter(
            "nodegc_ledger_taken_over",
            "Ledgers found recorded for another node and taken over for this one: their open items released, the"
            " running orphans' first-seen times forgotten; scans in a row and graces start again.", registry=r)
        self.read_problems = Counter(
            "nodegc_read_problems", "Items the readers could not read, by resource kind.", ["kind"],
            registry=r,
        )
        self.scan_read_problems = Gauge(
            "nodegc_scan_read_problems",
            "Read problems of the last scan, by kind and cause: what each hides is kept unjudged. dump_bound: a"
            " namespace whose netlink dump went past its bound; untold_process: a process whose command line"
            " could not be read in time, so no runtime leftover is judged (both can be held on purpose by a"
            " pod); unreadable: any other.", ["kind", "cause"], registry=r)
        self.streak_restarts = Counter(
            "nodegc_streaks_restarted",
            "Detected items whose scans in a row went back to 0 because a cycle could not act on its desired "
            "state, by reason (view_not_current, stale_source, source_unavailable).", ["reason"], registry=r)
        self.items_marked = Counter(
            "nodegc_items_marked", "Items marked for reclaim (seen orphaned in K scans in a row and for the grace"
            " period), by kind.", ["kind"], registry=r)
        self.desired_state_age = Gauge(
            "nodegc_desired_state_age_seconds", "Age of the desired state (pods) the last cycle acted on.",
            registry=r,
        )
        self.protected_gauge = Gauge(
            "nodegc_protected_resources",
            "Resources kept at the last scan because they are younger than the minimum age or may belong to a "
            "pod still starting (not a refusal: the creation race), by kind.", ["kind"], registry=r,
        )
        self.build_info = build_info(r)
        self.last_success = Gauge(
            "nodegc_last_successful_cycle_timestamp_seconds",
            "Unix time of the last cycle that ran to the end without a refusal (stale or unavailable desired "
            "state, blast radius) or a ledger error.", registry=r,
        )
        self.runtime_up = Gauge("nodegc_runtime_up", "1 when the container runtime answered the last scan, 0 when"
                                " it could not be read; absent without a runtime.", registry=r)
        self.running_orphans = Gauge(
            "nodegc_running_orphan_sandboxes",
            "READY sandboxes whose pod has been absent from the API longer than the long grace (reported, stopped"
            " only with --stop-running-orphans).", registry=r)
        self.orphan_shims = Gauge(
            "nodegc_orphan_shims",
            "containerd shim processes whose id the runtime does not list, at the last scan (stopped only with"
            " --stop-orphan-shims).", registry=r)
        self.ready_gauge = Gauge("nodegc_ready", "1 while /readyz answers ok, else 0.", registry=r)
        self.cgroup_view_gauge = Gauge(
            "nodegc_cgroup_view_ok",
            "1 when the cgroup hierarchies at --cgroup-root are the node's tree, 0 when they may be a cgroup"
            " namespace's view (a container's cgroup is then 'cannot tell', the task bundle kept); absent when"
            " cgroups are not touched.", registry=r)
        self.range_capacity = Gauge("nodegc_ip_range_capacity",
                                    "Addresses host-local can hand out in the range set (the gateway excluded).",
                                    RANGE_LABELS, registry=r)
        self.range_reserved = Gauge("nodegc_ip_range_reserved", "Reserved addresses (host-local files).",
                                    RANGE_LABELS, registry=r)
        self.range_live = Gauge("nodegc_ip_range_live", "Reserved addresses in use by live pods.", RANGE_LABELS,
                                registry=r)
        self.range_leaked = Gauge("nodegc_ip_range_leaked", "Reserved addresses of dead sandboxes (leaked).",
                                  RANGE_LABELS, registry=r)
        self.range_leak_rate = Gauge(
            "nodegc_ip_range_leak_rate", "Net growth of leaked addresses over the forecast window, per second.",
            RANGE_LABELS, registry=r)
        self.range_allocation_rate = Gauge(
            "nodegc_ip_range_allocation_rate", "New reservations over the forecast window, per second.",
            RANGE_LABELS, registry=r)
        self.range_exhaustion = Gauge(
            "nodegc_ip_range_exhaustion_seconds",
            "Forecast seconds until the range set is full (+Inf: not running out).", RANGE_LABELS, registry=r)
        self._range_gauges = (self.range_capacity, self.range_reserved, self.range_live, self.range_leaked,
                              self.range_leak_rate, self.range_allocation_rate, self.range_exhaustion)
        for reason in BLOCK_REASONS:
            self.actions_blocked.labels(reason)
        for reason in STREAK_REASONS:
            self.streak_restarts.labels(reason)
        for kind in Kind:
            self.items_marked.labels(kind.value)
        for kind in Kind:
            for result in RECLAIM_RESULTS:
                self.reclaims.labels(kind.value, result)
        for kind in Kind:
            self.protected_gauge.labels(kind.value).set(0)
        # The causes a pod can bring about on purpose, exported at 0 until they happen.
        self._read_problem_keys: set[tuple[str, str]] = {
            (Kind.NETNS.value, DUMP_BOUND), (Kind.VETH.value, DUMP_BOUND),
            (Kind.RUNTIME_LEFTOVER.value, UNTOLD_PROCESS_CAUSE)}
        for key in self._read_problem_keys:
            self.scan_read_problems.labels(*key).set(0)
        self._range_keys: set[tuple[str, str]] = set()
        self._protected_kinds: set[str] = {k.value for k in Kind}
        self._item_keys: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    # --- what the engine reports -------------------------------------------------------------------

    def items(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the item counts; a (kind, phase) seen before and absent now drops to 0, not stale."""
        with self._lock:
            for key in self._item_keys - counts.keys():
                self.items_gauge.labels(*key).set(0)
            for (kind, phase), n in counts.items():
                self.items_gauge.labels(kind, phase).set(n)
            self._item_keys |= set(counts)

    def reclaimed(self, kind: str, result: str) -> None:
        self.reclaims.labels(kind, result).inc()

    def scanned(self, seconds: float, problems: Iterable[tuple[str, int]] = ()) -> None:
        self.scan_duration.observe(seconds)
        self.problems(problems)

    def problems(self, problems: Iterable[tuple[str, int]]) -> None:
        """Read problems by kind: the scan's own, and those the runtime check adds to it."""
        for kind, n in problems:
            if n > 0:
                self.read_problems.labels(kind).inc(n)

    def scan_problems(self, problems: Iterable[tuple[str, str]]) -> None:
        """The last scan's read problems as (kind, cause); a pair seen before and absent now drops to 0."""
        counts: dict[tuple[str, str], int] = {}
        for kind, cause in problems:
            key = (kind, cause if cause in READ_CAUSES else READ_CAUSES[0])
            counts[key] = counts.get(key, 0) + 1
        with self._lock:
            for key in self._read_problem_keys - counts.keys():
                self.scan_read_problems.labels(*key).set(0)
            for key, n in counts.items():
                self.scan_read_problems.labels(*key).set(n)
            self._read_problem_keys |= set(counts)

    def blocked(self, reason: str) -> None:
        self.actions_blocked.labels(reason).inc()

    def streaks_restarted(self, reason: str, n: int) -> None:
        if n > 0:
            self.streak_restarts.labels(reason).inc(n)

    def marked(self, counts: Mapping[str, int]) -> None:
        for kind, n in counts.items():
            if n > 0:
                self.items_marked.labels(kind).inc(n)

    def ledger_error(self) -> None:
        self.ledger_errors.inc()

    def ledger_taken_over(self) -> None:
        self.ledger_takeovers.inc()

    def desired_age(self, seconds: float) -> None:
        self.desired_state_age.set(seconds)

    def protected(self, counts: Mapping[str, int]) -> None:
        """Protected resources by kind at the last scan; a kind seen before and absent now drops to 0."""
        with self._lock:
            for kind in self._protected_kinds - counts.keys():
                self.protected_gauge.labels(kind).set(0)
            for kind, n in counts.items():
                self.protected_gauge.labels(kind).set(n)
            self._protected_kinds |= set(counts)

    def cycle_succeeded(self, at: float) -> None:
        self.last_success.set(at)

    def runtime(self, reachable: bool | None, running_orphans: int, orphan_shims: int = 0) -> None:
        if reachable is not None:
            self.runtime_up.set(1 if reachable else 0)
        self.running_orphans.set(running_orphans)
        self.orphan_shims.set(orphan_shims)

    def ranges(self, statuses: Iterable[RangeStatus]) -> None:
        """Replace the per-range gauges; a range set no longer seen loses its series."""
        with self._lock:
            current: set[tuple[str, str]] = set()
            for s in statuses:
                u, f = s.usage, s.forecast
                key = u.key
                current.add(key)
                if u.capacity is not None:
                    self.range_capacity.labels(*key).set(u.capacity)
                else:
                    with contextlib.suppress(KeyError):
                        self.range_capacity.remove(*key)  # no configuration describes it any more
                self.range_reserved.labels(*key).set(u.reserved)
                self.range_live.labels(*key).set(u.live)
                self.range_leaked.labels(*key).set(u.leaked)
                self.range_leak_rate.labels(*key).set(f.leak_rate)
                self.range_allocation_rate.labels(*key).set(f.allocation_rate)
                self.range_exhaustion.labels(*key).set(f.seconds_to_exhaustion)
            for key in self._range_keys - current:
                for gauge in self._range_gauges:
                    with contextlib.suppress(KeyError):
                        gauge.remove(*key)
            self._range_keys = current

    def cgroup_view(self, ok: bool) -> None:
        self.cgroup_view_gauge.set(1 if ok else 0)

    def readiness(self, check: Callable[[], tuple[bool, str]]) -> None:
        """Export the readiness check as `nodegc_ready`, evaluated at each scrape."""
        self.ready_gauge.set_function(lambda: 1.0 if check()[0] else 0.0)

    def watch_counters(self, stats: Callable[[], Mapping[str, int]]) -> None:
        """Export the pod watch's counters (PodReflector.stats) at each scrape."""
        self.registry.register(_ReflectorCollector(stats))

    def pod_dir_watch(self, stats: Callable[[], Mapping[str, int]] | None) -> None:
        """Export the pod directory watches' state (PodDirWatcher.stats) at each scrape; None: turned off."""
        self.registry.register(_PodDirWatchCollector(stats))

    # --- exposition --------------------------------------------------------------------------------

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def serve(self, host: str, port: int) -> MetricsServer:
        """Serve /metrics in a daemon thread; port 0 picks a free port (see `MetricsServer.port`)."""
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        return MetricsServer(server=server, thread=thread)


POD_DIR_WATCH_FALLBACKS = ("watch_limit", "inotify_unavailable", "events_unreadable")
"""inventory.pod_dirs.FALLBACK_REASONS (a unit test holds them equal; observe imports no inventory)."""


class _PodDirWatchCollector(Collector):
    def __init__(self, stats: Callable[[], Mapping[str, int]] | None) -> None:
        self.stats = stats

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        stats = self.stats() if self.stats is not None else {}
        active = GaugeMetricFamily("nodegc_pod_dir_watch_active", "1 when the last scan's pod directories were"
                                   " watched with inotify (unchanged ones not walked again), 0 when every one was"
                                   " walked (turned off with --no-watch-pod-dirs, or a fallback).")
        active.add_metric([], stats.get("watching", 0))
        yield active
        fallbacks = CounterMetricFamily("nodegc_pod_dir_watch_fallbacks", "Times the pod directory watches"
                                        " gave way to walking every pod directory, by reason: watch_limit"
                                        " (fs.inotify.max_user_watches hit), inotify_unavailable (no instance),"
                                        " events_unreadable.", labels=["reason"])
        for reason in POD_DIR_WATCH_FALLBACKS:
            fallbacks.add_metric([reason], stats.get(f"fallbacks_{reason}", 0))
        yield fallbacks


class _ReflectorCollector(Collector):
    def __init__(self, stats: Callable[[], Mapping[str, int]]) -> None:
        self.stats = stats

    def describe(self) -> Iterator[Metric]:
        return iter(())  # unchecked: the families are only known at collect time

    def collect(self) -> Iterator[Metric]:
        stats = self.stats()
        lists = CounterMetricFamily("nodegc_reflector_lists", "Full lists of the node's pods (the first and "
                                    "every relist).")
        lists.add_metric([], stats.get("lists", 0))
        yield lists
        watches = CounterMetricFamily("nodegc_reflector_watches", "Watch requests started (each one after "
                                      "the first is a watch restart).")
        watches.add_metric([], stats.get("watches", 0))
        yield watches
        relists = CounterMetricFamily("nodegc_reflector_relists", "Relists by cause: gone (410), stalled (no "
                                      "event or bookmark in time), error, refresh (a cycle with something to act "
                                      "on found its view about to be too old to prove), replayed (an event at or "
                                      "behind the view's resourceVersion: a watch replaying history), resync "
                                      "(periodic).",
                                      labels=["reason"])
        for reason in RELIST_REASONS:
            relists.add_metric([reason], stats.get(f"relists_{reason}", 0))
        relists.add_metric(["resync"], stats.get("resyncs", 0))
        yield relists
        events = CounterMetricFamily("nodegc_reflector_events", "Watch events received, by type.",
                                     labels=["type"])
        for kind in WATCH_EVENT_TYPES:
            events.add_metric([kind], stats.get(f"events_{kind}", 0))
        yield events
        proofs = CounterMetricFamily("nodegc_reflector_proofs", "Proofs that the watched view is current, taken by "
                                     "cycles with something to act on, by result: proven, or refused "
                                     "(view_not_current).", labels=["result"])
        refused = stats.get("proofs_refused", 0)
        proofs.add_metric(["proven"], stats.get("proofs", 0) - refused)
        proofs.add_metric(["refused"], refused)
        yield proofs
        reads = CounterMetricFamily("nodegc_reflector_proof_lease_reads", "Node Lease GETs made by those proofs "
                                    "(the lists' own Lease GETs are not counted).")
        reads.add_metric([], stats.get("proof_witness_reads", 0))
        yield reads
