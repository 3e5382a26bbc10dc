"""Prometheus metrics of one nodegc process.

Each `Metrics` owns its registry instead of using the process-global one, so tests (and several engines in
one process) can each have their own without "duplicated timeseries" errors.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

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
        self.read_problems = Counter(
            "nodegc_read_problems", "Items the readers could not read, by resource kind.", ["kind"],
            registry=r,
        )
        self.desired_state_age = Gauge(
            "nodegc_desired_state_age_seconds", "Age of the desired state (pods) the last cycle acted on.",
            registry=r,
        )
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
        for kind, n in problems:
            if n > 0:
                self.read_problems.labels(kind).inc(n)

    def blocked(self, reason: str) -> None:
        self.actions_blocked.labels(reason).inc()

    def ledger_error(self) -> None:
        self.ledger_errors.inc()

    def desired_age(self, seconds: float) -> None:
        self.desired_state_age.set(seconds)

    # --- exposition --------------------------------------------------------------------------------

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def serve(self, host: str, port: int) -> MetricsServer:
        """Serve /metrics in a daemon thread; port 0 picks a free port (see `MetricsServer.port`)."""
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        return MetricsServer(server=server, thread=thread)
