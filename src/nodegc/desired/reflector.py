"""Desired state from a list+watch cache of the pods bound to this node (one watch per node).

Listing every scan costs the API server a full (paged, filtered) list every 30 s per node; a watch
costs one long request per node plus a relist now and then. The cache must never be trusted blindly,
so it is rebuilt by a full relist:
- on 410 Gone (the watch's resourceVersion left the server's history window);
- when the stream is stalled: no event and no bookmark for `idle_timeout_seconds` (bookmarks are
  requested, so a healthy but quiet watch still speaks; httpx's read timeout is the detector);
- on an ERROR event or anything undecodable on the stream;
- every `resync_seconds`, so a missed event cannot hide a residue or protect a dead pod forever.
A watch that merely ends (server timeout, dropped connection) is resumed from the last resourceVersion
seen, without a relist, as client-go does.

`fetch()` reports `fetched_at` = the last time the view was known fresh (a successful list, or an event
or bookmark received on a live watch), so a stalled or failing reflector ages and the engine's
`stale_source` guard blocks reclaim. A list whose resourceVersion is older than one already seen (a
lagging cache or API server) is not applied; after `max_stale_lists` such answers in a row it is
taken anyway, since resourceVersions can go backwards after an etcd restore.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
import lightkube
from lightkube.resources.core_v1 import Pod as PodResource

from nodegc.api.errors import KubeError
from nodegc.api.objects import pod_from_object, resource_version_number
from nodegc.api.streaming import WatchRequests
from nodegc.desired.kube import build_client, get_pod_live, list_node_pods
from nodegc.desired.source import SourceError
from nodegc.hostio.clock import utcnow
from nodegc.model.pods import DesiredState, Pod
from nodegc.observe.logs import get_logger

log = get_logger("nodegc.reflector")

COUNTERS = ("lists", "watches", "resyncs", "stale_lists", "relists_gone", "relists_stalled", "relists_error")
_EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")
"""Watch events are counted by type under `events_<type>` (for metrics)."""


class _Relist(Exception):
    """The watch cannot go on from its resourceVersion: list again."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class _WatchFailed(Exception):
    """The watch request failed without saying the resourceVersion is gone: retry the watch."""


class PodReflector:
    """A background list+watch of `spec.nodeName=<node>` pods; a `DesiredSource`.

    Thread model: one daemon thread does every list and watch; `fetch()` and `get_pod()` may be called
    from any thread. `on_delete(pod)` runs on the watch thread (for a DELETED event, and for pods a
    relist finds gone): it must be quick and must not call `stop()`; an exception it raises is logged
    and ignored.
    """

    def __init__(
        self,
        node: str,
        *,
        client: lightkube.Client | None = None,
        kubeconfig: Path | None = None,
        resync_seconds: float = 300.0,
        watch_timeout_seconds: int = 290,
        idle_timeout_seconds: float = 150.0,
        request_timeout: float = 10.0,
        retry_seconds: float = 1.0,
        max_retry_seconds: float = 30.0,
        max_stale_lists: int = 3,
        clock: Callable[[], datetime] = utcnow,
        on_delete: Callable[[Pod], None] | None = None,
    ) -> None:
        if not node:
            raise ValueError("node must be a non-empty node name")
        self.node = node
        self.name = "kube"
        self._client = client
        self._owns_client = client is None
        self._kubeconfig = kubeconfig
        self._resync = resync_seconds
        self._watch_timeout = watch_timeout_seconds
        self._idle_timeout = idle_timeout_seconds
        self._request_timeout = request_timeout
        self._retry = retry_seconds
        self._max_retry = max_retry_seconds
        self._max_stale_lists = max_stale_lists
        self._clock = clock
        self._on_delete = on_delete

        self._lock = threading.Lock()
        self._pods: dict[str, Pod] = {}
        self._fresh_at: datetime | None = None
        self._invalid: str | None = None
        self._last_error: str | None = None
        self._rv: str | None = None
        self._high_rv: int | None = None
        self._stale_lists = 0
        self._response: httpx2.Response | None = None
        self._watches: WatchRequests | None = None
        self._counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # lifecycle

    def start(self) -> PodReflector:
        if self._thread is not None:
            return self
        self._watch_requests()  # a client that cannot watch fails here, not inside the thread
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name=f"pod-reflector-{self.node}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        with self._lock:
            response = self._response
        if response is not None:
            # the watch thread may be reading it; it sees the stop flag next
            with contextlib.suppress(httpx2.HTTPError, OSError, RuntimeError):
                response.close()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self._client is not None and self._owns_client:
            self._client.close()
            self._client = None
            self._watches = None

    def __enter__(self) -> PodReflector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Block until the first list is in (True) or `timeout` passes (False)."""
        return self._synced.wait(timeout)

    # DesiredSource

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def last_fresh(self) -> datetime | None:
        with self._lock:
            return self._fresh_at

    def fetch(self) -> DesiredState:
        """The cached view; never a request. SourceError before the first list or after a bad pod."""
        with self._lock:
            if self._invalid is not None:
                raise SourceError(f"pod cache of node {self.node} cannot be trusted: {self._invalid}")
            if not self._synced.is_set() or self._fresh_at is None:
                why = f": {self._last_error}" if self._last_error else ""
                raise SourceError(f"pod cache of node {self.node} has not synced yet{why}")
            pods = tuple(sorted(self._pods.values(), key=lambda p: (p.namespace, p.name, p.uid)))
            return DesiredState(node=self.node, pods=pods, source=self.name, fetched_at=self._fresh_at)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """A live GET (never the cache): the terminate phase's fresh read."""
        client = self._client
        if client is None:
            client = self._client = build_client(self._kubeconfig, timeout=self._request_timeout)
        return get_pod_live(client, namespace, name)

    def stats(self) -> dict[str, int]:
        """Counters of lists, watches and relists by cause (for metrics and benchmarks)."""
        with self._lock:
            return dict(self._counters)

    # the watch thread

    def _run(self) -> None:
        failures = 0
        relists = 0  # relists in a row with no watch that worked in between: backed off after the first
        need_list = True
        next_resync = 0.0
        while not self._stopping.is_set():
            try:
                if need_list:
                    self._relist()
                    need_list = False
                    failures = 0
                    next_resync = time.monotonic() + self._resync
                if time.monotonic() >= next_resync:
                    self._count("resyncs")
                    need_list = True
                    continue
                if self._watch(until=next_resync):
                    failures = 0
                    relists = 0
                else:
                    failures += 1  # ended without a single line: do not spin
                    self._backoff(failures)
            except _Relist as e:
                self._count(f"relists_{e.reason}")
                log.info("pod watch needs a relist", node=self.node, reason=e.reason, detail=str(e))
                need_list = True
                relists += 1
                if relists > 1:
                    # A watch that keeps failing right after each list (410 on every watch, a persistent
                    # ERROR) must not turn into a list loop against the API server.
                    self._backoff(relists - 1)
            except SourceError as e:
                failures += 1
                self._note_error(str(e))
                log.warning("pod list failed", node=self.node, error=str(e), attempt=failures)
                self._backoff(failures)
            except (_WatchFailed, httpx2.HTTPError, OSError) as e:
                if self._stopping.is_set():
                    break
                failures += 1
                detail = f"{type(e).__name__}: {e}"
                self._note_error(f"watch failed: {detail}")
                log.info("pod watch broke; resuming", node=self.node, error=detail, resource_version=self._rv)
                self._backoff(failures)

    def _backoff(self, failures: int) -> None:
        self._stopping.wait(min(self._max_retry, self._retry * 2 ** max(0, failures - 1)))

    def _relist(self) -> None:
        client = self._require_client()
        started = self._clock()
        self._count("lists")
        objects, rv = list_node_pods(client, self.node, timeout=self._request_timeout)
        pods: dict[str, Pod] = {}
        for index, obj in enumerate(objects):
            try:
                pod = pod_from_object(obj)
            except ValueError as e:
                with self._lock:
                    self._invalid = f"pod #{index} from the API cannot be identified: {e}"
                raise SourceError(f"pod #{index} from the API cannot be identified: {e}") from e
            if pod.node_name == self.node:
                pods[pod.uid] = pod
        number = resource_version_number(rv)
        with self._lock:
            if number is not None and self._high_rv is not None and number < self._high_rv:
                self._stale_lists += 1
                self._counters["stale_lists"] += 1
                if self._stale_lists <= self._max_stale_lists:
                    raise SourceError(
                        f"the list of node {self.node}'s pods is at resourceVersion {rv}, "
                        f"older than {self._high_rv} already seen"
                    )
                self._high_rv = None  # the server insists: its history restarted
            self._stale_lists = 0
            gone = [pod for uid, pod in self._pods.items() if uid not in pods]
            self._pods = pods
            self._rv = rv
            if number is not None:
                self._high_rv = number if self._high_rv is None else max(self._high_rv, number)
            self._fresh_at = started
            self._invalid = None
            self._last_error = None
        self._synced.set()
        for pod in gone:
            self._notify_delete(pod)

    def _watch(self, *, until: float) -> bool:
        """One watch request; True when at least one line arrived. Returns when the stream ends cleanly
        or the resync is due; raises _Relist, _WatchFailed or httpx errors."""
        watches = self._watch_requests()
        server_timeout = max(1, min(self._watch_timeout, math.ceil(until - time.monotonic())))
        params: dict[str, Any] = {
            "fieldSelector": f"spec.nodeName={self.node}",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(server_timeout),
            "resourceVersion": self._rv,
        }
        # The read timeout is the stall detector; near the resync it also ends the watch on time.
        read_timeout = min(self._idle_timeout, max(0.01, until - time.monotonic()))
        self._count("watches")
        try:
            response = watches.open(PodResource, namespace=lightkube.ALL_NS, params=params,
                                    connect_timeout=self._request_timeout, read_timeout=read_timeout)
        except httpx2.ReadTimeout as e:
            if time.monotonic() >= until:
                return True
            raise _Relist("stalled", f"no answer to the watch for {self._idle_timeout:g}s") from e
        with self._lock:
            self._response = response
        got_line = False
        try:
            if response.status_code != 200:
                self._raise_for_watch_status(response)
            for line in response.iter_lines():
                if self._stopping.is_set():
                    return True
                if not line.strip():
                    continue
                got_line = True
                self._apply(line)
                if time.monotonic() >= until:
                    return True
            return got_line
        except httpx2.ReadTimeout as e:
            if time.monotonic() >= until:
                return True  # the resync is due (a relist follows either way)
            raise _Relist("stalled", f"no event nor bookmark for {self._idle_timeout:g}s") from e
        finally:
            with self._lock:
                self._response = None
            response.close()

    def _raise_for_watch_status(self, response: httpx2.Response) -> None:
        response.read()
        code = response.status_code
        if code == 410:
            raise _Relist("gone", "watch answered 410 Gone")
        raise _WatchFailed(f"watch answered HTTP {code} {response.reason_phrase}")

    def _apply(self, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError as e:
            raise _Relist("error", "a watch line is not JSON") from e
        obj = event.get("object") if isinstance(event, Mapping) else None
        kind = event.get("type") if isinstance(event, Mapping) else None
        if not isinstance(obj, Mapping):
            raise _Relist("error", f"a {kind} watch event without an object")
        if kind in _EVENT_TYPES:
            self._count(f"events_{kind.lower()}")
        if kind == "ERROR":
            code, reason = obj.get("code"), obj.get("reason")
            if code == 410:
                raise _Relist("gone", f"watch ERROR event: 410 {reason}")
            raise _Relist("error", f"watch ERROR event: {code} {reason}")
        meta = obj.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        if kind == "BOOKMARK":
            self._advance(str(rv) if rv is not None else None)
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.info("unknown watch event type ignored", node=self.node, type=str(kind))
            return
        try:
            pod = pod_from_object(obj)
        except ValueError as e:
            with self._lock:
                self._invalid = f"a {kind} event carries a pod that cannot be identified: {e}"
            raise _Relist("error", f"unidentifiable pod in a {kind} event") from e
        deleted: Pod | None = None
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(pod.uid, None)
                deleted = pod
            elif pod.node_name != self.node:
                self._pods.pop(pod.uid, None)  # a server that ignored the selector
            else:
                self._pods[pod.uid] = pod
        self._advance(str(rv) if rv is not None else None)
        if deleted is not None:
            self._notify_delete(pod)

    def _advance(self, rv: str | None) -> None:
        """The watch spoke: the view is fresh as of now, unless it is replaying history behind a list."""
        now = self._clock()
        number = resource_version_number(rv)
        with self._lock:
            if rv is not None:
                self._rv = rv
            if number is None or self._high_rv is None or number >= self._high_rv:
                self._fresh_at = now
                if number is not None:
                    self._high_rv = number

    def _notify_delete(self, pod: Pod) -> None:
        if self._on_delete is None:
            return
        try:
            self._on_delete(pod)
        except Exception as e:  # a callback must never stop the watch
            log.warning(
                "on_delete callback failed", node=self.node, pod=f"{pod.namespace}/{pod.name}", error=repr(e)
            )

    def _watch_requests(self) -> WatchRequests:
        if self._watches is None:
            try:
                self._watches = WatchRequests(self._require_client())
            except KubeError as e:
                raise SourceError(str(e)) from e
        return self._watches

    def _require_client(self) -> lightkube.Client:
        if self._client is None:
            self._client = build_client(self._kubeconfig, timeout=self._request_timeout)
        return self._client

    def _count(self, key: str) -> None:
        with self._lock:
            self._counters[key] = self._counters.get(key, 0) + 1

    def _note_error(self, message: str) -> None:
        with self._lock:
            self._last_error = message
