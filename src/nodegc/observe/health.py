"""Health and metrics endpoints of the node agent: /metrics, /healthz and /readyz on one port.

The kubelet restarts a container whose /healthz fails and takes it out of rotation while /readyz fails.
They mean different things here: a loop that stopped turning is broken (restart it), but a loop that is
turning on a desired state it cannot read or that is stale is healthy and only not ready: restarting it
would not make the API server answer, and would throw away the in-memory backoff.

Only the standard library serves HTTP (a ThreadingHTTPServer in a daemon thread), so the probes keep
answering while a cycle runs, and a hung cycle shows up as a failing /healthz instead of a hung probe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Check = Callable[[], tuple[bool, str]]


class Metrics(Protocol):
    """What /metrics serves: one registry (the agent's Metrics, the controller's ControllerMetrics)."""

    @property
    def registry(self) -> CollectorRegistry: ...

_TEXT = "text/plain; charset=utf-8"
# Blocks of a cycle that mean the agent does not know the desired state: it must not report ready.
NOT_READY_REASONS = frozenset({"source_unavailable", "stale_source"})


class HealthServerError(Exception):
    """The endpoint could not be bound (address in use, bad host)."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(
        self, address: tuple[str, int], *, metrics: Metrics | None, live: Check, ready: Check
    ) -> None:
        self.metrics = metrics
        self.live = live
        self.ready = ready
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "nodegc"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    _PATHS: ClassVar[frozenset[str]] = frozenset({"/metrics", "/healthz", "/readyz", "/livez"})

    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def _respond(self, *, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path not in self._PATHS:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", _TEXT, head=head)
            return
        if path == "/metrics":
            if self.server.metrics is None:
                self._send(HTTPStatus.NOT_FOUND, b"metrics disabled\n", _TEXT, head=head)
                return
            self._send(HTTPStatus.OK, generate_latest(self.server.metrics.registry), CONTENT_TYPE_LATEST,
                       head=head)
            return
        check = self.server.ready if path == "/readyz" else self.server.live
        ok, reason = _safe(check)
        status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
        body = f"{'ok' if ok else 'not ok'}: {reason}\n".encode("utf-8", "backslashreplace")
        self._send(status, body, _TEXT, head=head)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, *, head: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Probes arrive every few seconds: logging each would drown the transitions that matter."""


def _safe(check: Check) -> tuple[bool, str]:
    """A check that raises is a failing check, never a 500 that a probe would read the same way anyway."""
    try:
        ok, reason = check()
    except Exception as e:  # any failure of a check is "not ok", with its reason
        return False, f"check failed: {type(e).__name__}: {e}"
    return bool(ok), reason


class HealthServer:
    """/metrics, /healthz (alias /livez) and /readyz on one address; port 0 picks a free port."""

    def __init__(
        self, host: str, port: int, *, metrics: Metrics | None, live: Check, ready: Check
    ) -> None:
        self._host = host
        self._requested_port = port
        self._metrics = metrics
        self._live = live
        self._ready = ready
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> HealthServer:
        try:
            server = _Server((self._host, self._requested_port), metrics=self._metrics, live=self._live,
                             ready=self._ready)
        except OSError as e:
            raise HealthServerError(f"cannot serve on {self._host}:{self._requested_port}: {e}") from e
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                  name="nodegc-health", daemon=True)
        thread.start()
        self._server, self._thread = server, thread
        return self

    @property
    def port(self) -> int:
        if self._server is None:
            raise HealthServerError("not started")
        return int(self._server.server_address[1])

    def shutdown(self) -> None:
        """Stop serving and free the port; safe to call twice or before start."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)


class Heartbeat:
    """What the agent loop tells the probes: when a cycle started, and whether the last one knew the pods.

    Live: a cycle started within `stall_intervals` intervals (a cycle that hangs on a mount or a lock
    stops the heartbeat, and the kubelet restarts the container). Before the first cycle the loop is
    live for the same span, so a slow start is not killed.
    Ready: the last finished cycle read a desired state that was neither unavailable nor stale, and it
    finished within `stall_intervals` intervals.
    """

    def __init__(
        self, interval: float, *, stall_intervals: float = 3.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._window = max(interval, 1.0) * stall_intervals
        self._clock = clock
        self._lock = threading.Lock()
        self._born = clock()
        self._started: float | None = None
        self._finished: float | None = None
        self._not_ready: str | None = "no cycle finished yet"
        self._notes: list[str] = []

    def note(self, text: str) -> None:
        """A standing condition the probes' reasons carry without failing them (a clean-up that cannot tell
        what it would remove): the agent still does the rest of its work."""
        with self._lock:
            self._notes.append(text)

    def cycle_started(self) -> None:
        with self._lock:
            self._started = self._clock()

    def cycle_finished(self, blocked: Iterable[str] = (), *, error: str | None = None) -> None:
        """`blocked` are the guard reasons of the cycle; `error` a failure that ended it early."""
        reasons = sorted(set(blocked) & NOT_READY_REASONS)
        with self._lock:
            self._finished = self._clock()
            if error is not None:
                self._not_ready = f"last cycle failed: {error}"
            elif reasons:
                self._not_ready = f"desired state not synced ({', '.join(reasons)})"
            else:
                self._not_ready = None

    def live(self) -> tuple[bool, str]:
        with self._lock:
            now, started = self._clock(), self._started
        if started is None:
            waited = now - self._born
            if waited <= self._window:
                return True, "starting"
            return False, f"no cycle started in {waited:.0f}s"
        age = now - started
        if age <= self._window:
            return True, f"last cycle started {age:.0f}s ago"
        return False, f"last cycle started {age:.0f}s ago (limit {self._window:.0f}s): the loop is stuck"

    def ready(self) -> tuple[bool, str]:
        ok, reason = self._ready()
        with self._lock:
            notes = list(self._notes)
        return ok, "; ".join([reason, *notes])

    def _ready(self) -> tuple[bool, str]:
        with self._lock:
            now, finished, not_ready = self._clock(), self._finished, self._not_ready
        if finished is None:
            return False, not_ready or "no cycle finished yet"
        if not_ready is not None:
            return False, not_ready
        age = now - finished
        if age > self._window:
            return False, f"last cycle finished {age:.0f}s ago (limit {self._window:.0f}s)"
        return True, f"desired state synced; last cycle finished {age:.0f}s ago"
