"""Kubernetes Events (core/v1) for reclaims and failures, aggregated so a storm of residue stays one Event.

`record()` is cheap and does no I/O: it counts an occurrence under the key (involved object, type, reason).
`flush()` writes what changed: the first flush of a key creates one Event, later flushes patch its
`count`, `lastTimestamp` and `message`. Requests are capped at `max_per_minute` over any sliding minute;
what does not fit stays counted and goes out with a later flush, so nothing is lost and the API server
never sees more than the cap. A failed write is logged and retried on the next flush; it never raises.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

import lightkube
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType

from nodegc.api.errors import KubeError, call
from nodegc.api.streaming import Requests
from nodegc.hostio.clock import utcnow
from nodegc.observe.logs import get_logger

log = get_logger("nodegc.kube.events")

CLUSTER_EVENT_NAMESPACE = "default"  # where Events about cluster-scoped objects (a Node) live
MAX_MESSAGE = 1024
WINDOW_SECONDS = 60.0


def rfc3339(when: datetime) -> str:
    """meta/v1 Time: whole seconds."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about."""

    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None
    api_version: str = "v1"

    @classmethod
    def node(cls, name: str, uid: str | None = None) -> ObjectRef:
        """The uid defaults to the node's name, as the kubelet writes it: `kubectl describe node` finds a
        Node's Events by involvedObject.uid equal to the node's UID or to its name."""
        return cls(kind="Node", name=name, uid=uid or name)

    @classmethod
    def pod(cls, namespace: str, name: str, uid: str | None = None) -> ObjectRef:
        return cls(kind="Pod", name=name, namespace=namespace, uid=uid)

    @classmethod
    def service(cls, namespace: str, name: str, uid: str | None = None) -> ObjectRef:
        return cls(kind="Service", name=name, namespace=namespace, uid=uid)

    @classmethod
    def endpointslice(cls, namespace: str, name: str, uid: str | None = None) -> ObjectRef:
        return cls(kind="EndpointSlice", name=name, namespace=namespace, uid=uid,
                   api_version="discovery.k8s.io/v1")

    @property
    def event_namespace(self) -> str:
        return self.namespace or CLUSTER_EVENT_NAMESPACE


@dataclass
class _Series:
    ref: ObjectRef
    type: EventType
    reason: str
    message: str
    first: datetime
    last: datetime
    count: int = 0  # occurrences recorded
    sent: int = 0  # occurrences the server's Event already counts
    name: str | None = None  # the Event's name once created
    written_at: float = float("-inf")  # monotonic time of the last write: the longest-waiting goes first

    @property
    def pending(self) -> bool:
        return self.count > self.sent


@dataclass
class FlushReport:
    created: int = 0
    patched: int = 0
    failed: int = 0
    deferred: int = 0  # keys left for a later flush by the rate cap
    errors: list[str] = field(default_factory=list)


SeriesKey = tuple[ObjectRef, EventType, str]


class EventRecorder:
    """Aggregating Event recorder shared by the agent and the controller (thread-safe)."""

    def __init__(
        self,
        client: lightkube.Client,
        *,
        component: str = "nodegc",
        instance: str | None = None,
        host: str | None = None,
        max_per_minute: int = 30,
        flush_interval: float = 10.0,
        max_series: int = 4096,
        clock: Callable[[], datetime] = utcnow,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_per_minute < 1:
            raise ValueError("max_per_minute must be at least 1")
        self._client = client
        self.component = component
        self.instance = instance
        self.host = host
        self.max_per_minute = max_per_minute
        self.flush_interval = flush_interval
        self.max_series = max_series
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._series: OrderedDict[SeriesKey, _Series] = OrderedDict()
        self._writes: deque[float] = deque()
        self._last_flush: float | None = None
        self._names = 0
        self.dropped = 0  # occurrences not kept because max_series keys were all pending
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- recording (no I/O) ----------------------------------------------------------------------

    def record(self, ref: ObjectRef, *, reason: str, message: str,
               type: EventType = EventType.NORMAL) -> None:
        now = self._clock()
        key: SeriesKey = (ref, type, reason)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                if not self._make_room():
                    self.dropped += 1
                    return
                series = _Series(ref=ref, type=type, reason=reason, message=message, first=now, last=now)
                self._series[key] = series
            series.count += 1
            series.last = now
            series.message = message[:MAX_MESSAGE]
            self._series.move_to_end(key)

    def pending(self) -> int:
        with self._lock:
            return sum(1 for s in self._series.values() if s.pending)

    def _make_room(self) -> bool:
        """Caller holds the lock. Forget the least recently recorded key that has nothing left to send."""
        if len(self._series) < self.max_series:
            return True
        for key, series in self._series.items():
            if not series.pending:
                del self._series[key]
                return True
        return False

    # --- writing ---------------------------------------------------------------------------------

    def maybe_flush(self) -> FlushReport | None:
        """Flush when `flush_interval` has passed since the last flush; the controller calls it every pass."""
        last = self._last_flush
        if last is not None and self._monotonic() - last < self.flush_interval:
            return None
        return self.flush()

    def flush(self) -> FlushReport:
        with self._flush_lock:
            self._last_flush = self._monotonic()
            report = FlushReport()
            with self._lock:
                # Longest unwritten first, so a steady stream of the same keys cannot starve the others.
                todo = sorted(((key, s) for key, s in self._series.items() if s.pending),
                              key=lambda pair: pair[1].written_at)
            for key, series in todo:
                if not self._may_write():
                    report.deferred += 1
                    continue
                with self._lock:
                    snapshot = _Series(**vars(series))
                try:
                    name, created = self._write(snapshot)
                except KubeError as e:
                    report.failed += 1
                    report.errors.append(str(e))
                    log.warning("event write failed", involved=_label(key[0]), reason=key[2], error=str(e))
                    continue
                if created:
                    report.created += 1
                else:
                    report.patched += 1
                with self._lock:
                    series.name = name
                    series.sent = max(series.sent, snapshot.count)
                    series.written_at = self._monotonic()
            return report

    def _may_write(self) -> bool:
        now = self._monotonic()
        while self._writes and now - self._writes[0] >= WINDOW_SECONDS:
            self._writes.popleft()
        if len(self._writes) >= self.max_per_minute:
            return False
        self._writes.append(now)
        return True

    def _create(self, s: _Series) -> str:
        name = self._event_name(s.ref)
        event = Event(
            metadata=ObjectMeta(name=name, namespace=s.ref.event_namespace),
            involvedObject=ObjectReference(
                kind=s.ref.kind, name=s.ref.name, namespace=s.ref.namespace, uid=s.ref.uid,
                apiVersion=s.ref.api_version,
            ),
            reason=s.reason,
            message=s.message,
            type=s.type.value,
            count=s.count,
            firstTimestamp=s.first.astimezone(UTC).replace(microsecond=0),
            lastTimestamp=s.last.astimezone(UTC).replace(microsecond=0),
            source=EventSource(component=self.component, host=self.host),
            reportingComponent=self.component,
            reportingInstance=self.instance,
        )
        call(f"creating event {s.ref.event_namespace}/{name}", lambda: Requests(self._client).create(event))
        return name

    def _write(self, s: _Series) -> tuple[str, bool]:
        """(the Event's name, whether it was created)."""
        if s.name is None:
            return self._create(s), True
        name = s.name
        body = {"count": s.count, "lastTimestamp": rfc3339(s.last), "message": s.message}
        try:
            call(
                f"updating event {s.ref.event_namespace}/{name}",
                lambda: Requests(self._client).patch(Event, name, body, namespace=s.ref.event_namespace,
                                           patch_type=PatchType.MERGE),
            )
        except KubeError as e:
            if not e.not_found:
                raise
            # The Event expired (the API server keeps Events for an hour): start it again.
            return self._create(s), True
        return name, False

    def _event_name(self, ref: ObjectRef) -> str:
        """client-go's scheme: the object's name and a unique hex suffix."""
        with self._lock:
            self._names += 1
            serial = self._names
        stamp = int(self._clock().timestamp() * 1_000_000) * 1000 + serial
        return f"{ref.name[:200]}.{stamp:x}"

    # --- periodic flushing (the agent) ------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nodegc-events", daemon=True)
        self._thread.start()

    def stop(self, *, flush: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if flush:
            self.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval):
            self.flush()


def _label(ref: ObjectRef) -> str:
    return f"{ref.kind} {ref.namespace + '/' if ref.namespace else ''}{ref.name}"
