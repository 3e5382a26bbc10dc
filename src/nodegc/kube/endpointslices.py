"""Stale EndpointSlice endpoints, cluster wide: report those a controller owns, remove the others.

One pass: read every slice, then every pod (in that order: an endpoint is written after its pod exists,
so a pod a slice points at is in the later pod read unless it is really gone), plan with
`planning.endpoints`, then act. The read is a list of each (no cache) or the controller's watch-backed
`ClusterCache` (the same order, by resourceVersion); then:
- controller-managed slices are never edited (the controller would put the endpoint back, or fight us):
  the finding is logged, counted and becomes a Warning Event on the Service;
- any other slice loses its stale endpoints through a JSON merge patch that carries the resourceVersion
  the plan was computed from. A 409 means someone else changed the slice: it is read again and the plan is
  recomputed on the fresh copy (bounded). Before each write every endpoint to remove is re-verified with a
  live GET of its pod, and `is_leader()` is asked right before the write itself.
Slices are handled as raw JSON (a generic resource), so endpoint fields this client's models do not know
are sent back untouched. The cache keeps only what is read of each slice, so with it a removal first reads
the slice whole (a live GET) and plans and patches on that copy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import lightkube
from lightkube.generic_resource import GenericNamespacedResource, create_api_info
from lightkube.resources.core_v1 import Pod as PodResource
from lightkube.types import PatchType

from nodegc import defaults
from nodegc.api.errors import KubeError, call
from nodegc.api.objects import POD_FIELDS, host_port_addresses, pod_from_object, slice_from_object
from nodegc.api.reads import CHUNK_SIZE, get_live, list_all
from nodegc.api.streaming import Requests
from nodegc.kube.cache import ClusterCache
from nodegc.kube.events import EventRecorder, EventType, ObjectRef
from nodegc.model.endpoints import Slice, StaleAction, StaleEndpoint, StaleReason
from nodegc.model.pods import Pod
from nodegc.observe.logs import get_logger
from nodegc.planning.endpoints import (
    PodIndex,
    find_stale,
    remaining_endpoints,
    served_on_node,
    stale_in_slice,
    staleness,
)

log = get_logger("nodegc.kube.endpointslices")

REASON_STALE = "StaleEndpoint"
REASON_REMOVED = "StaleEndpointRemoved"
REASON_FAILED = "StaleEndpointRemovalFailed"


class RawEndpointSlice(GenericNamespacedResource):
    """discovery.k8s.io/v1 EndpointSlice as plain JSON; not registered, so lightkube's typed model stays
    the one everybody else in the process gets."""

    _api_info = create_api_info("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices")


@dataclass(frozen=True)
class SweepOptions:
    dry_run: bool = False
    max_patches: int = defaults.MAX_PATCHES_PER_PASS
    max_conflict_retries: int = 3
    chunk_size: int = CHUNK_SIZE


@dataclass
class SweepReport:
    stale: list[StaleEndpoint] = field(default_factory=list)  # what the plan found
    reported: list[StaleEndpoint] = field(default_factory=list)  # controller-managed: told, not touched
    removed: list[StaleEndpoint] = field(default_factory=list)
    would_remove: list[StaleEndpoint] = field(default_factory=list)  # dry run
    kept_on_reverify: int = 0  # a live GET or a fresh slice showed the endpoint is not stale after all
    patches: int = 0
    conflicts: int = 0
    deferred_slices: int = 0  # beyond max_patches, left for the next pass
    failures: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # slices or pods that could not be read exactly
    lost_leadership: bool = False


class EndpointSliceSweeper:
    def __init__(
        self,
        client: lightkube.Client,
        *,
        is_leader: Callable[[], bool],
        events: EventRecorder | None = None,
        options: SweepOptions | None = None,
        cache: ClusterCache | None = None,
    ) -> None:
        self._client = client
        self._is_leader = is_leader
        self._events = events
        self.options = options or SweepOptions()
        self.cache = cache
        """With a cache, a pass reads the watch-backed view instead of listing slices and pods."""

    def sweep(self) -> SweepReport:
        """One pass. Raises KubeError when the slices or the pods cannot be listed, or the cache is not
        usable (not synced, untrusted or stale): nothing is done then."""
        report = SweepReport()
        if not self._is_leader():
            report.lost_leadership = True
            return report
        # Each slice with its JSON as the API sent it, or None where only what is read of it is at hand
        # (the cache's): then a removal reads it whole first.
        parsed: list[tuple[Slice, Mapping[str, Any] | None]] = []
        if self.cache is not None:
            snapshot = self.cache.snapshot()
            pods = snapshot.pods
            parsed = [(s, None) for s in snapshot.slices]
            report.problems.extend(snapshot.problems)
            report.deferred_slices += snapshot.waiting
        else:
            raw_slices = self._list_slices()
            pods = self._pod_index(report)
            for raw in raw_slices:
                try:
                    parsed.append((slice_from_object(raw), raw))
                except ValueError as e:
                    report.problems.append(str(e))
                    log.warning("endpointslice skipped", reason=str(e))
        report.stale = list(find_stale((s for s, _ in parsed), pods))
        by_slice: dict[tuple[str, str], list[StaleEndpoint]] = defaultdict(list)
        for stale in report.stale:
            by_slice[(stale.slice_namespace, stale.slice_name)].append(stale)
        raw_by_key = {(s.namespace, s.name): raw for s, raw in parsed}
        slices_by_key = {(s.namespace, s.name): s for s, _ in parsed}
        patched = 0
        for key, found in by_slice.items():
            slice_ = slices_by_key[key]
            if slice_.controller_managed:
                self._report(slice_, found, report)
                continue
            if patched >= self.options.max_patches:
                report.deferred_slices += 1
                continue
            if not self._is_leader():
                report.lost_leadership = True
                break
            patched += 1
            self._remove(slice_, raw_by_key[key], pods, report)
            if report.lost_leadership:
                break
        return report

    # --- reading ---------------------------------------------------------------------------------

    def _list_slices(self) -> list[Mapping[str, Any]]:
        objects, _rv = list_all(self._client, RawEndpointSlice, what="listing endpointslices",
                                chunk_size=self.options.chunk_size)
        return list(objects)

    def _pod_index(self, report: SweepReport) -> PodIndex:
        """Every pod of the cluster; a namespace holding a pod we cannot identify proves no absence."""
        objects, _rv = list_all(self._client, PodResource, what="listing pods", chunk_size=self.options.chunk_size,
                                shape=POD_FIELDS)
        pods: list[Pod] = []
        unknown: set[str] = set()
        for obj in objects:
            try:
                pods.append(pod_from_object(obj))
            except ValueError as e:
                meta = obj.get("metadata")
                namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
                if not isinstance(namespace, str) or not namespace:
                    raise KubeError(f"listing pods: a pod without namespace cannot be identified: {e}") from e
                unknown.add(namespace)
                report.problems.append(str(e))
        return PodIndex.build(pods, unknown_namespaces=unknown)

    def _get_slice(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return get_live(self._client, RawEndpointSlice, namespace=namespace, name=name,
                        what=f"getting endpointslice {namespace}/{name}")

    def _live_pod(self, namespace: str, name: str) -> tuple[Pod, frozenset[str]] | None:
        """The pod, and the node addresses it serves on through a hostPort (read from the whole object, which
        the caches do not keep)."""
        obj = get_live(self._client, PodResource, namespace=namespace, name=name,
                       what=f"getting pod {namespace}/{name}")
        if obj is None:
            return None
        try:
            return pod_from_object(obj), host_port_addresses(obj)
        except ValueError as e:
            raise KubeError(f"pod {namespace}/{name} cannot be identified: {e}") from e

    # --- acting ----------------------------------------------------------------------------------

    def _report(self, slice_: Slice, found: list[StaleEndpoint], report: SweepReport) -> None:
        for stale in found:
            report.reported.append(stale)
            log.warning("stale endpoint in a controller-managed slice", slice=slice_.label(),
                        address=",".join(stale.endpoint.addresses), pod=stale.pod_label,
                        reason=stale.reason.value, managed_by=slice_.managed_by)
            self._event(slice_, EventType.WARNING, REASON_STALE,
                        f"EndpointSlice {slice_.name} lists {_addresses(stale)} for pod {stale.pod_label}: "
                        f"{stale.detail}; left to {slice_.managed_by}")

    def _remove(self, slice_: Slice, raw: Mapping[str, Any] | None, pods: PodIndex, report: SweepReport) -> None:
        current = slice_
        if raw is None:
            try:
                whole = self._get_slice(slice_.namespace, slice_.name)
                if whole is None:
                    return  # the slice is gone, and its endpoints with it
                current, raw = slice_from_object(whole), whole
            except (KubeError, ValueError) as e:
                self._failed(current, f"reading the slice before the patch failed: {e}", report)
                return
        current_raw: Mapping[str, Any] = raw
        for attempt in range(self.options.max_conflict_retries + 1):
            candidates = [s for s in stale_in_slice(current, pods) if s.action is StaleAction.REMOVE]
            if not candidates:
                return
            try:
                confirmed = self._reverify(current, candidates, report)
            except KubeError as e:
                self._failed(current, f"re-verification failed: {e}", report)
                return
            if not confirmed:
                return
            if self.options.dry_run:
                report.would_remove.extend(confirmed)
                for stale in confirmed:
                    log.info("would remove stale endpoint", slice=current.label(), pod=stale.pod_label,
                             address=",".join(stale.endpoint.addresses), reason=stale.reason.value)
                return
            if not self._is_leader():
                report.lost_leadership = True
                return
            try:
                self._patch(current, current_raw, confirmed)
            except KubeError as e:
                if e.not_found:
                    return  # the slice is gone, and its endpoints with it
                if not e.conflict:
                    self._failed(current, str(e), report)
                    return
                report.conflicts += 1
                log.info("endpointslice changed under us, re-reading", slice=current.label(), attempt=attempt)
                try:
                    fresh = self._get_slice(current.namespace, current.name)
                    if fresh is None:
                        return
                    current, current_raw = slice_from_object(fresh), fresh
                except (KubeError, ValueError) as e2:
                    self._failed(current, f"re-reading after a conflict failed: {e2}", report)
                    return
                continue
            report.patches += 1
            report.removed.extend(confirmed)
            for stale in confirmed:
                log.info("stale endpoint removed", slice=current.label(), pod=stale.pod_label,
                         address=",".join(stale.endpoint.addresses), reason=stale.reason.value)
            self._event(current, EventType.NORMAL, REASON_REMOVED,
                        f"removed {len(confirmed)} stale endpoint(s) from EndpointSlice {current.name}: "
                        + "; ".join(f"{_addresses(s)} ({s.detail})" for s in confirmed))
            return
        attempts = self.options.max_conflict_retries + 1
        self._failed(current, f"still conflicting after {attempts} attempts", report)

    def _reverify(self, slice_: Slice, candidates: Iterable[StaleEndpoint],
                  report: SweepReport) -> list[StaleEndpoint]:
        """A live GET of each endpoint's pod: only what is still stale on fresh data is removed. An address its
        status does not show but the node's that it serves on through a hostPort is the pod's: kept."""
        seen: dict[tuple[str, str], tuple[Pod, frozenset[str]] | None] = {}
        confirmed: list[StaleEndpoint] = []
        for stale in candidates:
            ref = stale.endpoint.target_ref
            if ref is None or not ref.name:
                continue
            key = (ref.namespace or slice_.namespace, ref.name)
            if key not in seen:
                seen[key] = self._live_pod(*key)
            live = seen[key]
            fresh = PodIndex.build([live[0]] if live is not None else [], known_namespaces={key[0]})
            verdict = staleness(stale.endpoint, slice_namespace=slice_.namespace, address_type=slice_.address_type,
                                pods=fresh)
            if verdict is None or (verdict[0] is StaleReason.ADDRESS_NOT_HELD and live is not None
                                   and served_on_node(stale.endpoint.addresses, live[1])):
                report.kept_on_reverify += 1
                continue
            confirmed.append(stale)
        return confirmed

    def _patch(self, slice_: Slice, raw: Mapping[str, Any], stale: list[StaleEndpoint]) -> None:
        endpoints = raw.get("endpoints") or []
        body = {
            "metadata": {"resourceVersion": slice_.resource_version},
            "endpoints": remaining_endpoints(endpoints, stale),
        }
        call(f"patching endpointslice {slice_.label()}", lambda: Requests(self._client).patch(
            RawEndpointSlice, slice_.name, body, namespace=slice_.namespace, patch_type=PatchType.MERGE))

    def _failed(self, slice_: Slice, why: str, report: SweepReport) -> None:
        report.failures.append(f"{slice_.label()}: {why}")
        log.warning("stale endpoint removal failed", slice=slice_.label(), error=why)
        self._event(slice_, EventType.WARNING, REASON_FAILED,
                    f"could not remove stale endpoints from EndpointSlice {slice_.name}: {why}")

    def _event(self, slice_: Slice, type: EventType, reason: str, message: str) -> None:
        if self._events is None:
            return
        ref = (ObjectRef.service(slice_.namespace, slice_.service_name) if slice_.service_name
               else ObjectRef.endpointslice(slice_.namespace, slice_.name, slice_.uid))
        self._events.record(ref, reason=reason, message=message, type=type)


def _addresses(stale: StaleEndpoint) -> str:
    return ",".join(stale.endpoint.addresses) or "(no address)"
