"""The controller's watch-backed view of the cluster: every pod and every EndpointSlice.

Listing both every pass costs the API server two cluster-wide (paged) lists every 30 s; two watches cost
two long requests plus a relist of each every resync period (jittered, as every cache's: see
`nodegc.api.reflector`). The cache changes what the sweeper reads, not what it proves:
- a removal still needs a live GET of the endpoint's pod and a patch guarded by the slice's
  resourceVersion (a 409 re-reads the slice);
- a view older than `max_age_seconds` (a stalled or failing watch), not synced yet, or holding a pod
  without a namespace is refused whole: the pass fails and nothing is changed or reported;
- a slice the slice cache saw at a resourceVersion the pod cache has not reached yet waits for the next
  pass: its endpoints may name a pod created just before it that the pod cache has not heard of. In the
  list-per-pass sweeper, listing slices before pods gives the same guarantee.
An object that cannot be read exactly is kept as a problem (its namespace proves no absence, a slice is
skipped whole), as in the list-per-pass sweeper.

Each object is kept as what the controller reads of it, never whole: a pod as `Pod`, a slice as `Slice`
(decoded into `api.objects.SLICE_FIELDS`: identity, resourceVersion, the managed-by and service labels, the
address type, each endpoint's addresses, targetRef and node). A slice's conditions, hints, zones, ports
and managedFields are most of its JSON and never read, so a removal reads the slice whole (a live GET)
before it patches it: the patch carries the remaining endpoints as the API server holds them now.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import lightkube
from lightkube.resources.core_v1 import Pod as PodResource

from nodegc.api.errors import KubeError
from nodegc.api.objects import POD_FIELDS, SLICE_FIELDS, object_resource_version, pod_from_object, slice_from_object
from nodegc.api.reflector import CacheUnusable, CacheView, Reflector
from nodegc.hostio.clock import utcnow
from nodegc.model.endpoints import Slice
from nodegc.model.pods import Pod
from nodegc.planning.endpoints import PodIndex

DEFAULT_MAX_AGE_SECONDS = 120.0
RESYNC_SECONDS = 1800.0
"""A full relist of each cache every 30 min (jittered): at 5,000 nodes one relist of every pod is ~0.4 GB,
so the agent's 5 minutes would cost the API server ~4.6 GB an hour. A missed event cannot make the
controller remove a live endpoint (each removal is confirmed by a live GET), only delay a removal."""


@dataclass(frozen=True, slots=True)
class PodEntry:
    namespace: str
    name: str
    pod: Pod | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class SliceEntry:
    """A slice as the controller reads it, or why it cannot be read exactly (then it is skipped whole)."""

    namespace: str
    name: str
    slice: Slice | None
    resource_version: int | None
    problem: str | None = None


def _identity(obj: Mapping[str, Any], what: str) -> tuple[str, str]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(namespace, str) or not namespace or not isinstance(name, str) or not name:
        raise ValueError(f"a {what} without namespace or name")
    return namespace, name


def parse_pod_entry(obj: Mapping[str, Any]) -> PodEntry:
    """Lenient: a pod that cannot be identified becomes a problem of its namespace, not of the cache."""
    namespace, name = _identity(obj, "pod")
    try:
        return PodEntry(namespace, name, pod_from_object(obj))
    except ValueError as e:
        return PodEntry(namespace, name, None, str(e))


def parse_slice_entry(obj: Mapping[str, Any]) -> SliceEntry:
    """Lenient like `parse_pod_entry`: a slice that cannot be read exactly is a problem of each pass."""
    namespace, name = _identity(obj, "endpointslice")
    version = object_resource_version(obj)
    try:
        return SliceEntry(namespace, name, slice_from_object(obj), version)
    except ValueError as e:
        return SliceEntry(namespace, name, None, version, str(e))


@dataclass
class ClusterSnapshot:
    slices: list[Slice]
    """Read as `SLICE_FIELDS` keeps them: never to be patched back (read the slice whole first)."""
    pods: PodIndex
    problems: list[str]
    waiting: int
    """Slices newer than the pod cache, left for the next pass."""


class ClusterCache:
    """Two reflectors (pods, EndpointSlices, all namespaces) on the controller's one client."""

    def __init__(
        self,
        client: lightkube.Client,
        slice_resource: type[Any],
        *,
        max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        clock: Callable[[], datetime] = utcnow,
        rng: random.Random | None = None,
        resync_seconds: float = RESYNC_SECONDS,
        **reflector_options: Any,
    ) -> None:
        self.max_age_seconds = max_age_seconds
        reflector_options["resync_seconds"] = resync_seconds
        self._clock = clock
        self.slices: Reflector[SliceEntry] = Reflector(
            slice_resource, what="endpointslices", noun="endpointslice", parse=parse_slice_entry, shape=SLICE_FIELDS,
            key=lambda e: f"{e.namespace}/{e.name}", client=client, clock=clock, rng=rng,
            thread_name="reflector-endpointslices", **reflector_options)
        self.pods: Reflector[PodEntry] = Reflector(
            PodResource, what="pods", noun="pod", parse=parse_pod_entry, shape=POD_FIELDS,
            key=lambda e: f"{e.namespace}/{e.name}", client=client, clock=clock, rng=rng,
            thread_name="reflector-pods", **reflector_options)

    @property
    def running(self) -> bool:
        return self.slices.running or self.pods.running

    def start(self, *, sync_timeout: float = 30.0) -> bool:
        """Start both watches (slices first); True once both listed within `sync_timeout`."""
        self.slices.start()
        self.pods.start()
        return self.slices.wait_synced(sync_timeout) and self.pods.wait_synced(sync_timeout)

    def stop(self) -> None:
        self.slices.stop()
        self.pods.stop()

    def stats(self) -> dict[str, dict[str, int]]:
        return {"endpointslices": self.slices.stats(), "pods": self.pods.stats()}

    def snapshot(self) -> ClusterSnapshot:
        """The slices (slice view taken first) and the pods the planner may trust; KubeError when the view
        is not synced, untrusted or older than `max_age_seconds`."""
        slices = self._view(self.slices)
        pods = self._view(self.pods)
        problems: list[str] = []
        unknown: set[str] = set()
        listed: list[Pod] = []
        for entry in pods.items:
            if entry.pod is None:
                unknown.add(entry.namespace)
                problems.append(entry.problem or f"pod {entry.namespace}/{entry.name} cannot be identified")
            else:
                listed.append(entry.pod)
        reached = pods.resource_version
        ready: list[Slice] = []
        waiting = 0
        for s in sorted(slices.items, key=lambda e: (e.namespace, e.name)):
            if s.resource_version is None or reached is None or s.resource_version > reached:
                waiting += 1
                continue
            if s.slice is None:
                problems.append(s.problem or f"endpointslice {s.namespace}/{s.name} cannot be read")
                continue
            ready.append(s.slice)
        return ClusterSnapshot(slices=ready, pods=PodIndex.build(listed, unknown_namespaces=unknown),
                               problems=problems, waiting=waiting)

    def _view(self, reflector: Reflector[Any]) -> CacheView[Any]:
        try:
            view = reflector.view()
        except CacheUnusable as e:
            raise KubeError(str(e)) from e
        age = (self._clock() - view.fresh_at).total_seconds()
        if age > self.max_age_seconds:
            raise KubeError(f"the {reflector.what} cache is {age:.0f}s old (more than {self.max_age_seconds:g}s)")
        return view
