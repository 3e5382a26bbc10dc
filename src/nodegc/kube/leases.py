"""Lease-based leader election (coordination.k8s.io/v1), the way client-go's leaderelection does it.

Only the replica holding the Lease acts. Two rules keep two replicas from acting at once:
- a candidate takes over a Lease held by someone else only after it has seen the same record, unchanged,
  for `lease_duration` seconds of its *own* monotonic clock (never comparing clocks across machines);
- the holder stops acting (`is_leader()` turns False) as soon as one renew fails, or when no renew has
  succeeded for `renew_deadline` seconds, which is shorter than `lease_duration`.
Every write carries the resourceVersion it was computed from, so a write based on a stale read gets a
409 and is recomputed on a fresh read instead of overwriting another replica's claim.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import lightkube
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.types import PatchType

from nodegc import defaults
from nodegc.api.errors import KubeError, call
from nodegc.api.streaming import Requests
from nodegc.hostio.clock import utcnow
from nodegc.observe.logs import get_logger

log = get_logger("nodegc.kube.leases")

MAX_CONFLICT_RETRIES = 2


def micro_time(when: datetime) -> str:
    """meta/v1 MicroTime: the API server parses exactly six fractional digits."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = defaults.LEASE_DURATION_SECONDS
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("the leader election identity must not be empty")
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")


@dataclass(frozen=True)
class LeaseRecord:
    holder: str | None
    lease_duration_seconds: int | None
    acquire_time: str | None
    renew_time: str | None
    transitions: int
    resource_version: str | None

    @property
    def observed_state(self) -> tuple[object, ...]:
        """What must change for a holder to count as alive; the resourceVersion alone is not enough."""
        return (self.holder, self.lease_duration_seconds, self.acquire_time, self.renew_time,
                self.transitions)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> LeaseRecord:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        return cls(
            holder=spec.get("holderIdentity") or None,
            lease_duration_seconds=duration if isinstance(duration, int) else None,
            acquire_time=_text(spec.get("acquireTime")),
            renew_time=_text(spec.get("renewTime")),
            transitions=transitions if isinstance(transitions, int) else 0,
            resource_version=meta.get("resourceVersion"),
        )


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return micro_time(value)
    return str(value)


class LeaderElector:
    """Acquire and renew one Lease; `is_leader()` is the only question callers ask before acting."""

    def __init__(
        self,
        client: lightkube.Client,
        config: LeaseConfig,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = utcnow,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.config = config
        self._client = client
        self._monotonic = monotonic
        self._wall = wall
        self._on_change = on_change
        self._lock = threading.RLock()
        self._leader = False
        self._renewed_at = 0.0
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the question ------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        with self._lock:
            if not self._leader:
                return False
            if self._monotonic() - self._renewed_at >= self.config.renew_deadline:
                self._set_leader(False, "renew deadline passed")
                return False
            return True

    @property
    def observed_holder(self) -> str | None:
        with self._lock:
            return self._observed.holder if self._observed is not None else None

    # --- one round ---------------------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One attempt; any failure drops leadership at once (the next attempt may take it back)."""
        started = self._monotonic()
        try:
            for _ in range(MAX_CONFLICT_RETRIES + 1):
                record = self._read(started)
                if record is None:
                    if self._create(started):
                        return True
                    continue  # someone created it first: read theirs
                if self._held_by_other(record, started):
                    self._lose(f"held by {record.holder}")
                    return False
                if self._update(record, started):
                    return True
            self._lose("conflicting writes")
            return False
        except KubeError as e:
            self._lose(str(e))
            return False

    def release(self) -> None:
        """Give the Lease up so another replica need not wait out the duration; stops acting first."""
        with self._lock:
            was_leader = self._leader
            self._set_leader(False, "released")
        if not was_leader:
            return
        try:
            obj = self._get()
            if obj is None:
                return
            record = LeaseRecord.from_object(obj)
            if record.holder != self.config.identity:
                return
            now = micro_time(self._wall())
            self._patch(record, {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": now})
        except KubeError as e:
            log.warning("lease release failed", lease=self._label, error=str(e))

    # --- the background renewer ------------------------------------------------------------------

    def start(self) -> None:
        """Renew (or try to acquire) every retry period from now on; the first attempt is one period away,
        so callers wanting an answer at once call `try_acquire_or_renew()` first."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nodegc-lease", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.config.renew_deadline + 5)
            self._thread = None
        if release:
            self.release()
        else:
            with self._lock:
                self._set_leader(False, "stopped")

    def _run(self) -> None:
        while not self._stop.wait(self.config.retry_period):
            self.try_acquire_or_renew()

    # --- internals -------------------------------------------------------------------------------

    @property
    def _label(self) -> str:
        return f"{self.config.namespace}/{self.config.name}"

    def _get(self) -> Mapping[str, Any] | None:
        name, namespace = self.config.name, self.config.namespace
        try:
            obj = call(f"getting lease {self._label}",
                       lambda: Requests(self._client).get(Lease, name, namespace=namespace))
        except KubeError as e:
            if e.not_found:
                return None
            raise
        return obj.to_dict()

    def _read(self, now: float) -> LeaseRecord | None:
        obj = self._get()
        if obj is None:
            return None
        record = LeaseRecord.from_object(obj)
        # The record may have been committed right before the GET returned: its age counts from the
        # reply, not from the request, or a slow GET would let a takeover come early.
        seen = max(now, self._monotonic())
        with self._lock:
            if self._observed is None or self._observed.observed_state != record.observed_state:
                self._observed_at = seen
            self._observed = record
        return record

    def _held_by_other(self, record: LeaseRecord, now: float) -> bool:
        if not record.holder or record.holder == self.config.identity:
            return False
        duration = record.lease_duration_seconds or self.config.lease_duration
        with self._lock:
            return now < self._observed_at + duration

    def _spec(self, record: LeaseRecord, when: datetime) -> dict[str, Any]:
        now = micro_time(when)
        mine = record.holder == self.config.identity
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": max(1, round(self.config.lease_duration)),
            "acquireTime": record.acquire_time if mine else now,
            "renewTime": now,
            "leaseTransitions": record.transitions if mine else record.transitions + 1,
        }

    def _create(self, started: float) -> bool:
        when = self._wall()
        if when.microsecond == 0:
            # The model re-encodes the times and drops a zero fraction, which MicroTime does not parse.
            when += timedelta(microseconds=1)
        lease = Lease(
            metadata=ObjectMeta(name=self.config.name, namespace=self.config.namespace),
            spec=LeaseSpec(
                holderIdentity=self.config.identity,
                leaseDurationSeconds=max(1, round(self.config.lease_duration)),
                acquireTime=when,
                renewTime=when,
                leaseTransitions=0,
            ),
        )
        try:
            created = call(f"creating lease {self._label}", lambda: Requests(self._client).create(lease))
        except KubeError as e:
            if e.conflict:
                return False
            raise
        self._won(LeaseRecord.from_object(created.to_dict()), started)
        return True

    def _update(self, record: LeaseRecord, started: float) -> bool:
        try:
            updated = self._patch(record, self._spec(record, self._wall()))
        except KubeError as e:
            if e.conflict:
                return False
            raise
        self._won(updated, started)
        return True

    def _patch(self, record: LeaseRecord, spec: Mapping[str, Any]) -> LeaseRecord:
        body = {"metadata": {"resourceVersion": record.resource_version}, "spec": dict(spec)}
        obj = call(
            f"updating lease {self._label}",
            lambda: Requests(self._client).patch(Lease, self.config.name, body, namespace=self.config.namespace,
                                       patch_type=PatchType.MERGE),
        )
        return LeaseRecord.from_object(obj.to_dict())

    def _won(self, record: LeaseRecord, started: float) -> None:
        with self._lock:
            self._observed = record
            self._observed_at = started
            # Counted from before the request was sent: the server saw the renewal no earlier than that.
            self._renewed_at = started
            self._set_leader(True, "acquired or renewed")

    def _lose(self, why: str) -> None:
        with self._lock:
            self._set_leader(False, why)

    def _set_leader(self, leader: bool, why: str) -> None:
        """Caller holds the lock."""
        if leader == self._leader:
            return
        self._leader = leader
        log.info("leadership changed", lease=self._label, identity=self.config.identity, leader=leader,
                 reason=why)
        if self._on_change is not None:
            self._on_change(leader)
