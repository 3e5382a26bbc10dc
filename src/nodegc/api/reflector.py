"""A list+watch cache of one resource type: the machinery under the agent's pod watch and the controller's
caches of pods and EndpointSlices.

Listing on every pass costs the API server a full (paged) list each time; a watch costs one long request
plus a relist now and then. The cache must never be trusted blindly, so it is rebuilt by a full relist:
- on 410 Gone (the watch's resourceVersion left the server's history window);
- when the stream is stalled: no event and no bookmark for `idle_timeout_seconds` (bookmarks are
  requested, so a healthy but quiet watch still speaks; httpx's read timeout is the detector);
- on an ERROR event or anything undecodable on the stream;
- on an event at a resourceVersion the view already passed (a lagging watch cache or proxy replaying history),
  or without a numeric one while the view's is (it cannot be placed after the view): not applied, since it
  would take back what the view holds under its proof;
- every resync period, so a missed event cannot hide a residue or protect a dead object forever.
A watch that merely ends (server timeout, dropped connection) is resumed from the last resourceVersion
seen, without a relist, as client-go does.

The view is fresh as of the last successful list, or the last event or bookmark that moved its
resourceVersion forward, so a stalled or failing cache ages and its users refuse to act on it. A bookmark
at the resourceVersion already held proves the connection lives, not that the server's cache is current:
a bookmark carries the watch cache's own resourceVersion, sent on a timer whether or not that cache still
hears from etcd (KEP-956; KEP-3157 describes the timer), so it does not refresh the view. With a
`witness` (the agent's node Lease, `nodegc.api.currency`), every list is proven current the way the
one-shot list is, and dated at the witness's time. A list whose resourceVersion is older
than one already seen (a lagging cache or API server) is not applied; after `max_stale_lists` such answers
in a row it is taken anyway, since resourceVersions can go backwards after an etcd restore.

Freshness is not proof: a watch cache that lags minutes behind its store still advances, so its events
refresh the view while a pod created during the lag is missing from it. `prove()` is the proof for
acting on the watched view, as strong as the list's: the witness read live (one GET), and the view's
resourceVersion must have reached the witness's, which a watch can only do once every change up to that
version has reached the view (events and bookmarks come in resourceVersion order). The view is then
current as of the witness's time, never as of an arrival. A witness the view has not reached yet is kept
(pending): the first event, bookmark or list that reaches it proves the view as of that witness's time,
so the proof costs one GET and no wait. Every proof belongs to one history of resourceVersions: a restart
of the cache or a history that restarted (an etcd restore) drops what was proven and pending. A history
restarted is told by a list older than the view or a witness older than one read before (a lagging API
server's list older than the view looks the same, so it too drops the proof; a row of such lists drops it
once); the view's own resourceVersion then compares with nothing until a list is taken (a witness of the
new history would be "reached" at once by versions the old one already passed).

Ownership: `stop()` then `start()` while a list is in flight (a controller losing and regaining its
leadership) leaves the old thread to finish that request; every run has its own stop flag and generation,
and a thread whose generation is not the cache's current one changes nothing and ends.

Fleet scale: every wait is jittered, so thousands of agents that lost their watches in the same API outage
do not come back in lock-step. Retries back off exponentially with each delay drawn from [0.5, 1.5) of its
nominal value; a relist after a watch that every cache of the fleet loses at once (410 Gone, a stall) first
waits a random share of `relist_spread_seconds`; the resync period is stretched by a random 0 to 20 %.
"""

from __future__ import annotations

import contextlib
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Generic, TypedDict, TypeVar

import httpx2
import lightkube
import msgspec

from nodegc.api import streaming
from nodegc.api.client import make_client
from nodegc.api.currency import MAX_LEASE_AHEAD_SECONDS, NotCurrent, Witness, check_list
from nodegc.api.errors import KubeError
from nodegc.api.objects import resource_version_number
from nodegc.api.reads import WHOLE, decode, list_all
from nodegc.api.streaming import WatchRequests
from nodegc.hostio.clock import utcnow
from nodegc.observe.logs import get_logger

log = get_logger("nodegc.reflector")

T = TypeVar("T")

COUNTERS = ("lists", "watches", "resyncs", "stale_lists", "relists_gone", "relists_stalled", "relists_error",
            "relists_refresh", "relists_replayed", "proofs", "proof_witness_reads", "proofs_refused")
"""`proofs`: calls of `prove()`; `proof_witness_reads`: the witness GETs they made; `proofs_refused`: the
calls that could not prove the view current."""
EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")
"""Watch events are counted by type under `events_<type>` (for metrics)."""
RETRY_JITTER = 0.5
"""A retry delay is drawn from [1 - j, 1 + j) times its nominal value."""
RESYNC_JITTER = 0.2
"""The resync period is stretched by a random share in [0, j)."""
MAX_RELIST_SPREAD_SECONDS = 10.0
MAX_PENDING_WITNESSES = 4
"""Witnesses read and not yet reached by the view that are kept; the newest ones."""
_FLEET_WIDE = frozenset({"gone", "stalled"})
"""Relist causes that hit every watch of the fleet at once; an undecodable event is this cache's own."""


class _Event(TypedDict, total=False):
    """A watch line: its object is decoded once its type says into what (a Status for ERROR)."""

    type: Any
    object: msgspec.Raw


_EVENTS = msgspec.json.Decoder(_Event)


def backoff_delay(failures: int, *, base: float, cap: float, rng: random.Random,
                  jitter: float = RETRY_JITTER) -> float:
    """The wait after `failures` failures in a row: exponential, capped, then jittered."""
    nominal = min(cap, base * 2.0 ** max(0, failures - 1))
    return float(nominal * (1.0 - jitter + 2.0 * jitter * rng.random()))


class CacheUnusable(Exception):
    """The cache has not synced, or holds an object it could not identify: it proves nothing."""


@dataclass(frozen=True)
class _Pending:
    """A witness read while the view was behind it: reached, it proves the view current as of `at`."""

    rv: int
    at: datetime
    read_at: datetime
    history: int


class _Relist(Exception):
    """The watch cannot go on from its resourceVersion: list again."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _lines(chunks: Iterator[bytes], until: float) -> Iterator[str]:
    """The stream's lines as they arrive, until the stream ends or `until` (monotonic) is past, inside a
    line too: `iter_lines()` hands out nothing before a line is whole, so a line that never ends, sent a
    byte at a time (each within the read timeout), would hold the watch past its resync for good. A line is
    one event, one object: past `streaming.MAX_OBJECT_BYTES` without its end it is refused (_Relist) rather
    than held until the agent runs out of memory."""
    limit = streaming.MAX_OBJECT_BYTES
    pending = bytearray()
    for chunk in chunks:
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            if end - start > limit:
                break
            yield pending[start:end].rstrip(b"\r").decode("utf-8", "replace")
            start = end + 1
        del pending[:start]
        if len(pending) > limit:
            raise _Relist("error", f"a watch line is over {limit} bytes ({limit / streaming.MIB:g} MiB), "
                                   "its bound")
        if time.monotonic() >= until:
            return
    if pending:
        yield pending.decode("utf-8", "replace")


class _WatchFailed(Exception):
    """The watch request failed without saying the resourceVersion is gone: retry the watch."""


class _Superseded(Exception):
    """This thread's run was stopped (and maybe another started): it changes nothing more and ends."""


@dataclass(frozen=True)
class _Run:
    """One start() of the cache: its generation and its own stop flag."""

    generation: int
    stopping: threading.Event


@dataclass(frozen=True)
class CacheView(Generic[T]):
    """What the cache holds at one instant."""

    items: tuple[T, ...]
    fresh_at: datetime
    """The last moment the view was known current (a list, an event or a bookmark)."""
    resource_version: int | None
    """The newest resourceVersion the view has applied (list, event or bookmark); None if not numeric."""


class Reflector(Generic[T]):
    """A background list+watch of `resource` (all namespaces) filtered by `fields`.

    `parse(obj)` turns one object into T or raises ValueError: a list or event carrying an object that
    cannot be parsed makes the whole cache untrusted until a relist succeeds; objects are decoded into
    `shape` (`api.reads`: the fields `parse` reads, or the whole object) from lists and events alike.
    `key(item)` is its identity in the cache; `keep(item)` drops what a server that ignored the selector
    sent. `on_delete(item)` runs on the watch thread (a DELETED event, or an item a relist finds gone): it
    must be quick and must not call `stop()`; an exception it raises is logged and ignored.
    """

    def __init__(  # noqa: PLR0915 - one attribute per setting and per piece of state
        self,
        resource: type[Any],
        *,
        what: str,
        noun: str,
        cache_label: str | None = None,
        thread_name: str | None = None,
        parse: Callable[[Mapping[str, Any]], T],
        shape: Any = WHOLE,
        key: Callable[[T], str],
        keep: Callable[[T], bool] = lambda _item: True,
        fields: Mapping[str, str] | None = None,
        client: lightkube.Client | None = None,
        kubeconfig: Path | None = None,
        resync_seconds: float = 300.0,
        watch_timeout_seconds: int = 290,
        idle_timeout_seconds: float = 150.0,
        request_timeout: float = 10.0,
        retry_seconds: float = 1.0,
        max_retry_seconds: float = 30.0,
        relist_spread_seconds: float | None = None,
        max_stale_lists: int = 3,
        clock: Callable[[], datetime] = utcnow,
        on_delete: Callable[[T], None] | None = None,
        rng: random.Random | None = None,
        witness: Callable[[lightkube.Client], Witness] | None = None,
    ) -> None:
        self.what = what
        self.cache_label = cache_label or f"{what} cache"
        self._thread_name = thread_name or f"reflector-{what.replace(' ', '-')}"
        self._resource = resource
        self._noun = noun
        self._parse = parse
        self._shape = shape
        self._key = key
        self._keep = keep
        self._fields = dict(fields or {})
        self._client = client
        self._owns_client = client is None
        self._kubeconfig = kubeconfig
        self._resync = resync_seconds
        self._watch_timeout = watch_timeout_seconds
        self._idle_timeout = idle_timeout_seconds
        self._request_timeout = request_timeout
        self._retry = retry_seconds
        self._max_retry = max_retry_seconds
        self._relist_spread = (min(max_retry_seconds, MAX_RELIST_SPREAD_SECONDS)
                               if relist_spread_seconds is None else relist_spread_seconds)
        self._max_stale_lists = max_stale_lists
        self._clock = clock
        self._on_delete = on_delete
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        self._witness = witness
        """Read live right before every list; the list must not be older (`nodegc.api.currency`)."""

        self._lock = threading.Lock()
        self._items: dict[str, T] = {}
        self._fresh_at: datetime | None = None
        self._invalid: str | None = None
        self._last_error: str | None = None
        self._rv: str | None = None
        self._high_rv: int | None = None
        self._floor_rv: int | None = None
        """The newest resourceVersion seen outside the view (live GETs): no list may be older."""
        self._stale_lists = 0
        self._proven_at: datetime | None = None
        """The view is proven current as of this time (a list checked against the witness, or a witness the
        watch reached); never an arrival time."""
        self._pending: list[_Pending] = []
        self._history = 0
        """Incremented whenever resourceVersions stop being comparable with earlier ones (a restart of the
        cache, a history that restarted): proofs and pending witnesses of another history count for nothing."""
        self._view_history = 0
        """The history the view's resourceVersion belongs to: only a list brings the view into a new one, so
        a witness of a history that restarted (an etcd restored without a revision bump hands out versions
        the view already passed) is never reached by the view of the old one."""
        self._witness_rv: int | None = None
        """The newest witness resourceVersion read: a witness older than it (the Lease only moves forward)
        says the history restarted."""
        self._response: httpx2.Response | None = None
        self._watches: WatchRequests | None = None
        self._counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._synced = threading.Event()
        self._generation = 0
        self._stopping = threading.Event()
        self._relist_wanted = threading.Event()
        self._thread: threading.Thread | None = None

    # lifecycle

    def start(self) -> Reflector[T]:
        """Start the watch thread; KubeError when no client can be built or it cannot watch."""
        if self._thread is not None:
            return self
        self._watch_requests()  # a client that cannot watch fails here, not inside the thread
        with self._lock:  # a restarted cache proves nothing until it has listed again
            self._generation += 1
            run = _Run(generation=self._generation, stopping=threading.Event())
            self._stopping = run.stopping
            self._synced.clear()
            self._items = {}
            self._fresh_at = None
            self._rv = None
            self._high_rv = None
            self._forget_proofs()
            self._relist_wanted.clear()
        self._thread = threading.Thread(target=self._run, args=(run,), name=self._thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._stopping.set()
            self._generation += 1  # whatever the old thread still does is no longer this cache's
            response = self._response
            self._response = None
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

    def request_relist(self, reason: str) -> None:
        """The view was proven out of date (a live GET found what it lacks): list again, now."""
        log.warning("cache proven out of date; relisting", cache=self.what, reason=reason)
        self._relist_now()

    def refresh(self, reason: str) -> None:
        """List again now, in the watch thread, as a resync does: a cycle with something to act on found the
        view proven (or fresh) for less than one more cycle, or not at all. Every list is checked against the
        witness read right before it, so it proves the view as of that read; nothing is weakened, and a list
        that cannot be proven proves nothing. A refresh already wanted is not asked again."""
        if self._relist_wanted.is_set():
            return
        log.info("refreshing the cache by a list", cache=self.what, reason=reason)
        self._count("relists_refresh")
        self._relist_now()

    def _relist_now(self) -> None:
        """Ask the watch thread for a list and cut its open watch short, so that it lists at once."""
        self._relist_wanted.set()
        with self._lock:
            response = self._response
        if response is not None:
            with contextlib.suppress(httpx2.HTTPError, OSError, RuntimeError):
                response.close()

    def note_resource_version(self, rv: int | None) -> None:
        """A resourceVersion read outside the view (a live GET): no later list may be older."""
        if rv is None:
            return
        with self._lock:
            self._floor_rv = rv if self._floor_rv is None else max(self._floor_rv, rv)

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Block until the first list is in (True) or `timeout` passes (False)."""
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def last_fresh(self) -> datetime | None:
        with self._lock:
            return self._fresh_at

    def view(self) -> CacheView[T]:
        """The cached items; never a request. CacheUnusable before the first list or after a bad object."""
        with self._lock:
            return self._view_locked()

    def resource_version(self) -> int | None:
        """The newest resourceVersion the view has applied (never a request)."""
        with self._lock:
            return self._high_rv

    def holds(self, key: str) -> bool:
        """Whether the view holds an item of that key now (never a request)."""
        with self._lock:
            return key in self._items

    def stats(self) -> dict[str, int]:
        """Counters of lists, watches, relists by cause and events by type (for metrics and benchmarks)."""
        with self._lock:
            return dict(self._counters)

    def client(self) -> lightkube.Client:
        return self._require_client()

    # proof for acting

    def prove(self, *, max_age_seconds: float) -> CacheView[T]:
        """The view dated at its proof (`fresh_at` is the time it is proven current as of), when that proof
        is at most `max_age_seconds` old; NotCurrent (why) otherwise, CacheUnusable as `view()`, KubeError
        when the witness cannot be read. Without a witness, the view as it is.

        One witness GET at most per call, and none while the proof is younger than half of
        `max_age_seconds` or a witness read since then (within that half) is still pending: a proof that
        ages is renewed before it expires, and a view that lags is not asked again before it can have
        caught up. The view's resourceVersion is compared with the witness's under the lock after the GET,
        within one history of resourceVersions; a view behind it keeps the witness pending.
        """
        if self._witness is None:
            return self.view()
        self._count("proofs")
        try:
            return self._prove(max_age_seconds, self._witness)
        except CacheUnusable:
            self._count("proofs_refused")  # refused all the same (view_not_current): never counted as proven
            raise

    def _prove(self, max_age_seconds: float, read_witness: Callable[[lightkube.Client], Witness]) -> CacheView[T]:
        renew_after = max_age_seconds / 2.0
        now = self._clock()
        with self._lock:
            self._drop_future(now)
            view = self._view_locked()
            proven, pending = self._proven_at, self._pending[-1] if self._pending else None
            history = self._history
        proven_age = (now - proven).total_seconds() if proven is not None else math.inf
        wanted = proven_age > renew_after and (pending is None or (now - pending.read_at).total_seconds() > renew_after)
        witness_rv: int | None = None
        if wanted:
            self._count("proof_witness_reads")
            try:
                witness = read_witness(self._require_client())
            except KubeError:
                self._count("proofs_refused")
                raise
            read_at = self._clock()
            witness_rv = witness.rv
            with self._lock:
                self._note_witness(witness.rv)
                if self._history == history:
                    self._pending.append(_Pending(rv=witness.rv, at=min(witness.at, read_at), read_at=read_at,
                                                  history=history))
                    del self._pending[:-MAX_PENDING_WITNESSES]
                    self._reach_pending()
        with self._lock:
            view = self._view_locked()
            proven, held = self._proven_at, self._high_rv
            behind = self._pending[-1] if self._pending else None
        age = (self._clock() - proven).total_seconds() if proven is not None else math.inf
        if proven is not None and -MAX_LEASE_AHEAD_SECONDS <= age <= max_age_seconds:
            return CacheView(items=view.items, fresh_at=proven, resource_version=view.resource_version)
        self._count("proofs_refused")
        since = f"last proven current {proven_age:.0f}s ago" if proven is not None else "never proven current"
        if behind is not None:
            lag = f"{behind.rv - held}" if held is not None else "unknown"
            raise NotCurrent(
                f"the {self.cache_label} is at resourceVersion {held}, behind the witness read "
                f"{(self._clock() - behind.read_at).total_seconds():.0f}s ago at {behind.rv} ({lag} behind): a "
                f"watch cache lagging behind its store, or one that hears no progress while nothing it watches "
                f"changes; {since}, more than {max_age_seconds:g}s")
        raise NotCurrent(f"the {self.cache_label} cannot be proven current: {since}, more than {max_age_seconds:g}s"
                         + (f" (witness at {witness_rv})" if witness_rv is not None else ""))

    def _drop_future(self, now: datetime) -> None:
        """A proof or a pending witness dated after this clock (by more than a Lease may be) was dated by a
        clock since stepped back: it proves no age, and must not keep the witness from being read again."""
        ahead = timedelta(seconds=MAX_LEASE_AHEAD_SECONDS)
        if self._proven_at is not None and self._proven_at - now > ahead:
            log.warning("proof dated in the future: the clock stepped back; read again", cache=self.what,
                        proven_at=self._proven_at.isoformat(), now=now.isoformat())
            self._proven_at = None
        self._pending = [p for p in self._pending if p.read_at - now <= ahead]

    def _view_locked(self) -> CacheView[T]:
        if self._invalid is not None:
            raise CacheUnusable(f"{self.cache_label} cannot be trusted: {self._invalid}")
        if not self._synced.is_set() or self._fresh_at is None:
            why = f": {self._last_error}" if self._last_error else ""
            raise CacheUnusable(f"{self.cache_label} has not synced yet{why}")
        return CacheView(items=tuple(self._items.values()), fresh_at=self._fresh_at, resource_version=self._high_rv)

    def _reach_pending(self) -> None:
        """Pending witnesses the view has now reached prove it current as of their time (lock held)."""
        if self._high_rv is None or not self._pending or self._view_history != self._history:
            return
        reached = [p for p in self._pending if p.history == self._history and p.rv <= self._high_rv]
        if not reached:
            return
        at = max(p.at for p in reached)
        self._proven_at = at if self._proven_at is None else max(self._proven_at, at)
        self._pending = [p for p in self._pending if p.history == self._history and p.rv > self._high_rv]

    def _forget_proofs(self) -> None:
        """ResourceVersions from here on compare with nothing before, the view's included until it is listed
        again (lock held)."""
        self._history += 1
        self._proven_at = None
        self._pending = []

    def _forget_proofs_once(self) -> None:
        """`_forget_proofs()` unless it was done since the view was last listed (lock held): until a list
        brings the view into the new history, no proof can be taken (no witness is reached) and a pending
        witness is read after the sign, so a row of refused lists drops what was proven once."""
        if self._view_history == self._history:
            self._forget_proofs()

    def _note_witness(self, rv: int) -> None:
        """A witness read: one older than a witness read before means the history restarted (lock held)."""
        if self._witness_rv is not None and rv < self._witness_rv:
            log.warning("witness older than one read before: resourceVersions restarted; proofs dropped",
                        cache=self.what, witness_rv=rv, before=self._witness_rv)
            self._forget_proofs()
            self._witness_rv = rv
            return
        self._witness_rv = rv if self._witness_rv is None else max(self._witness_rv, rv)

    # the watch thread

    def _run(self, run: _Run) -> None:  # noqa: PLR0915 - one loop, and one place for every way it can fail
        failures = 0
        relists = 0  # relists in a row with no watch that worked in between: backed off after the first
        need_list = True
        next_resync = 0.0
        stopping = run.stopping
        while not stopping.is_set():
            try:
                if self._relist_wanted.is_set():
                    self._relist_wanted.clear()
                    need_list = True
                if need_list:
                    self._relist(run)
                    need_list = False
                    failures = 0
                    next_resync = time.monotonic() + self.resync_delay()
                if time.monotonic() >= next_resync:
                    self._count("resyncs")
                    need_list = True
                    continue
                if self._watch(run, until=next_resync):
                    failures = 0
                    relists = 0
                else:
                    failures += 1  # ended without a single line: do not spin
                    self._backoff(run, failures)
            except _Superseded:
                break
            except _Relist as e:
                self._count(f"relists_{e.reason}")
                log.info("watch needs a relist", cache=self.what, reason=e.reason, detail=str(e))
                need_list = True
                relists += 1
                if relists > 1:
                    # A watch that keeps failing right after each list (410 on every watch, a persistent
                    # ERROR) must not turn into a list loop against the API server.
                    self._backoff(run, relists - 1)
                elif e.reason in _FLEET_WIDE:
                    # Every cache of the fleet may have lost its watch at the same moment (an API server
                    # restart, a compaction, a stalled server): spread the relists.
                    stopping.wait(self._relist_spread * self._rng.random())
            except KubeError as e:
                if stopping.is_set():
                    break
                failures += 1
                self._note_error(str(e))
                log.warning("list failed", cache=self.what, error=str(e), attempt=failures)
                self._backoff(run, failures)
            except (_WatchFailed, httpx2.HTTPError, OSError) as e:
                if stopping.is_set():
                    break
                if self._relist_wanted.is_set():
                    continue  # request_relist closed the stream
                failures += 1
                detail = f"{type(e).__name__}: {e}"
                self._note_error(f"watch failed: {detail}")
                log.info("watch broke; resuming", cache=self.what, error=detail, resource_version=self._rv)
                self._backoff(run, failures)
            except Exception as e:
                if stopping.is_set():
                    break
                # Anything else (a parser's RecursionError on a hostile line, a bug): the thread must not die
                # while `running` says it lives. Relist from scratch, backed off; the view goes stale meanwhile.
                failures += 1
                detail = f"{type(e).__name__}: {e}"
                self._note_error(f"watch or list failed: {detail}")
                log.exception("cache loop failed; relisting", cache=self.what, error=detail)
                need_list = True
                self._backoff(run, failures)

    def _owned(self, run: _Run) -> None:
        """Raise _Superseded unless `run` is the cache's current one (call with the lock held)."""
        if run.generation != self._generation or run.stopping.is_set():
            raise _Superseded

    def resync_delay(self) -> float:
        """Seconds until the next periodic relist: the resync period stretched by a random 0 to 20 %."""
        return self._resync * (1.0 + RESYNC_JITTER * self._rng.random())

    def _backoff(self, run: _Run, failures: int) -> None:
        run.stopping.wait(backoff_delay(failures, base=self._retry, cap=self._max_retry, rng=self._rng))

    def _relist(self, run: _Run) -> None:
        started = self._clock()
        self._count("lists")
        client = self._require_client()
        witness = self._witness(client) if self._witness is not None else None
        objects, rv = list_all(client, self._resource, what=f"listing {self.what}", fields=self._fields,
                               timeout=self._request_timeout, shape=self._shape)
        fresh_at = started if witness is None else self._proven(witness, rv, objects, started)
        items: dict[str, T] = {}
        for index, obj in enumerate(objects):
            try:
                item = self._parse(obj)
            except ValueError as e:
                why = f"{self._noun} #{index} from the API cannot be identified: {e}"
                with self._lock:
                    self._owned(run)
                    self._invalid = why
                raise KubeError(why) from e
            if self._keep(item):
                items[self._key(item)] = item
        number = resource_version_number(rv)
        with self._lock:
            self._owned(run)
            if number is not None and self._high_rv is not None and number < self._high_rv:
                self._stale_lists += 1
                self._counters["stale_lists"] += 1
                # A list older than the view: a lagging server, or a history that restarted (an etcd restore:
                # the view may hold changes the store no longer has, and a witness of the new history would be
                # "reached" at once). The two look the same, so nothing proven stands, though a lagging
                # server's list leaves the proof valid: acting waits for the next list applied.
                self._forget_proofs_once()
                if self._stale_lists <= self._max_stale_lists:
                    raise KubeError(
                        f"the list of {self.what} is at resourceVersion {rv}, "
                        f"older than {self._high_rv} already seen"
                    )
                self._high_rv = None  # the server insists: its history restarted
            self._stale_lists = 0
            gone = [item for k, item in self._items.items() if k not in items]
            self._items = items
            self._rv = rv
            if number is not None:
                self._high_rv = number if self._high_rv is None else max(self._high_rv, number)
            self._fresh_at = fresh_at
            self._view_history = self._history
            if witness is not None:
                # Checked against a witness read right before it: the list is proven as of `fresh_at`.
                self._proven_at = fresh_at
                self._reach_pending()
            self._invalid = None
            self._last_error = None
        self._synced.set()
        for item in gone:
            self._notify_delete(item)

    def _proven(self, witness: Witness, rv: str | None, objects: list[dict[str, Any]], started: datetime) -> datetime:
        """The list checked against the witness read right before it (NotCurrent), and the time it is
        current as of: the witness's, never later than the list."""
        with self._lock:
            self._note_witness(witness.rv)
            # After `max_stale_lists` refusals in a row the server's history may have restarted (an etcd
            # restore): a version seen before no longer bounds it; the witness still does.
            floor = self._floor_rv if self._stale_lists < self._max_stale_lists else None
        try:
            check_list(rv, objects, what=self.what, witness=witness, high_rv=floor)
        except NotCurrent:
            with self._lock:
                self._stale_lists += 1
                self._counters["stale_lists"] += 1
            raise
        if floor is None:
            with self._lock:
                self._floor_rv = None
                if self._stale_lists >= self._max_stale_lists:
                    self._forget_proofs_once()  # a history that restarted: earlier witnesses compare with nothing
        return min(started, witness.at)

    def _watch(self, run: _Run, *, until: float) -> bool:
        """One watch request; True when at least one line arrived. Returns when the stream ends cleanly
        or the resync is due; raises _Relist, _WatchFailed or httpx errors."""
        watches = self._watch_requests()
        server_timeout = max(1, min(self._watch_timeout, math.ceil(until - time.monotonic())))
        params: dict[str, Any] = {
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(server_timeout),
            "resourceVersion": self._rv,
        }
        if self._fields:
            params = {"fieldSelector": ",".join(f"{k}={v}" for k, v in self._fields.items()), **params}
        # The read timeout is the stall detector; near the resync it also ends the watch on time.
        read_timeout = min(self._idle_timeout, max(0.01, until - time.monotonic()))
        self._count("watches")
        try:
            response = watches.open(self._resource, namespace=lightkube.ALL_NS, params=params,
                                    connect_timeout=self._request_timeout, read_timeout=read_timeout)
        except httpx2.ReadTimeout as e:
            if time.monotonic() >= until:
                return True
            raise _Relist("stalled", f"no answer to the watch for {self._idle_timeout:g}s") from e
        with self._lock:
            if run.generation != self._generation or run.stopping.is_set():
                response.close()
                raise _Superseded
            self._response = response
        got_line = False
        try:
            if self._relist_wanted.is_set():
                return True  # asked for while this request was being opened (request_relist found none)
            if response.status_code != 200:
                self._raise_for_watch_status(response)
            for line in _lines(response.iter_bytes(), until):
                if run.stopping.is_set() or self._relist_wanted.is_set():
                    return True
                if not line.strip():
                    continue
                got_line = True
                self._apply(run, line)
                if time.monotonic() >= until:
                    return True
            return got_line or time.monotonic() >= until
        except httpx2.ReadTimeout as e:
            if time.monotonic() >= until:
                return True  # the resync is due (a relist follows either way)
            raise _Relist("stalled", f"no event nor bookmark for {self._idle_timeout:g}s") from e
        finally:
            with self._lock:
                if self._response is response:
                    self._response = None
            response.close()

    def _raise_for_watch_status(self, response: httpx2.Response) -> None:
        # The body is not read: the status line says all that is used, and a body sent a byte at a time
        # (each within the read timeout) would hold the watch thread unbounded. The caller closes the response.
        code = response.status_code
        if code == 410:
            raise _Relist("gone", "watch answered 410 Gone")
        raise _WatchFailed(f"watch answered HTTP {code} {response.reason_phrase}")

    def _apply(self, run: _Run, line: str) -> None:
        try:
            event = _EVENTS.decode(line)
        except ValueError as e:  # not JSON, or not an object
            raise _Relist("error", "a watch line is not a JSON object") from e
        kind, raw = event.get("type"), event.get("object")
        try:
            obj = decode(raw, shape=WHOLE if kind == "ERROR" else self._shape) if raw is not None else None
        except ValueError as e:  # an object that is not an object (null, a string...)
            raise _Relist("error", f"a {kind} watch event without an object") from e
        if not isinstance(obj, Mapping):
            raise _Relist("error", f"a {kind} watch event without an object")
        if kind in EVENT_TYPES:
            self._count(f"events_{kind.lower()}")
        if kind == "ERROR":
            code, reason = obj.get("code"), obj.get("reason")
            if code == 410:
                raise _Relist("gone", f"watch ERROR event: 410 {reason}")
            raise _Relist("error", f"watch ERROR event: {code} {reason}")
        meta = obj.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        if kind == "BOOKMARK":
            self._advance(run, str(rv) if rv is not None else None)
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.info("unknown watch event type ignored", cache=self.what, type=str(kind))
            return
        try:
            item = self._parse(obj)
        except ValueError as e:
            with self._lock:
                self._owned(run)
                self._invalid = f"a {kind} event carries a {self._noun} that cannot be identified: {e}"
            raise _Relist("error", f"unidentifiable {self._noun} in a {kind} event") from e
        deleted: T | None = None
        key = self._key(item)
        number = resource_version_number(rv)
        with self._lock:
            self._owned(run)
            if number is not None and self._high_rv is not None and number <= self._high_rv:
                # History the view already passed (a lagging watch cache or proxy replaying it): applied, it
                # would take back what the view holds (a live pod deleted at an old version) under its proof.
                raise _Relist("replayed", f"a {kind} event at resourceVersion {number} is behind the view's"
                                       f" {self._high_rv}: the watch replays history")
            if number is None and self._high_rv is not None:
                # Not placed in the view's history (a version dropped or made opaque on the way): it may be
                # as old as any replay, and would take back what the view holds under its proof.
                raise _Relist("error", f"a {kind} event without a numeric resourceVersion ({rv!r}) while the"
                                       f" view is at {self._high_rv}")
            if kind == "DELETED":
                self._items.pop(key, None)
                deleted = item
            elif not self._keep(item):
                self._items.pop(key, None)  # a server that ignored the selector
            else:
                self._items[key] = item
        self._advance(run, str(rv) if rv is not None else None)
        if deleted is not None:
            self._notify_delete(deleted)

    def _advance(self, run: _Run, rv: str | None) -> None:
        """The watch moved forward: the view is fresh as of now. Not when it replays history behind a list,
        nor for a bookmark at the resourceVersion already held (or without one): a watch cache cut off
        from its store still sends those, on a timer, so they prove the stream lives, not that the view is
        current."""
        now = self._clock()
        number = resource_version_number(rv)
        with self._lock:
            self._owned(run)
            if rv is not None and (self._high_rv is None or (number is not None and number >= self._high_rv)):
                # Never back to a version the view passed (the next watch would replay from it), nor to one that
                # cannot be placed after it (a bookmark's version a proxy made opaque: every watch refused).
                self._rv = rv
            if number is not None and (self._high_rv is None or number > self._high_rv):
                self._fresh_at = now
                self._high_rv = number
                self._reach_pending()

    def _notify_delete(self, item: T) -> None:
        if self._on_delete is None:
            return
        try:
            self._on_delete(item)
        except Exception as e:  # a callback must never stop the watch
            log.warning("on_delete callback failed", cache=self.what, item=self._key(item), error=repr(e))

    def _watch_requests(self) -> WatchRequests:
        if self._watches is None:
            self._watches = WatchRequests(self._require_client())
        return self._watches

    def _require_client(self) -> lightkube.Client:
        if self._client is None:
            self._client = make_client(self._kubeconfig, timeout=self._request_timeout)
        return self._client

    def _count(self, key: str) -> None:
        with self._lock:
            self._counters[key] = self._counters.get(key, 0) + 1

    def _note_error(self, message: str) -> None:
        with self._lock:
            self._last_error = message

