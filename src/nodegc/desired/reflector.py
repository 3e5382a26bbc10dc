"""Desired state from a list+watch cache of the pods bound to this node (one watch per node).

The machinery (list, watch with bookmarks, relist on 410, ERROR, stall and every resync, resourceVersion
checks, jittered retries) is `nodegc.api.reflector.Reflector`; this is its pod-of-one-node flavour and the
`DesiredSource` the engine reads. `fetch()` reports `fetched_at` = the last time the view was known fresh
(a successful list, or an event or bookmark that moved its resourceVersion forward), so a stalled or
failing reflector ages and the engine's `stale_source` guard blocks reclaim. A pod that cannot be
identified makes the whole view untrusted until a relist succeeds.

The proof of currency is the one-shot list's (`desired.kube`, `nodegc.api.currency`): every list is
checked against the node Lease read live right before it and dated at the Lease's renewal. `fetch()`'s
date is the view's freshness, not a proof: a watch cache that lags behind its store still advances. Before
the engine acts on the view it asks `proven()`: the view dated at its last proof (a list, or a node Lease
whose resourceVersion the watch has reached), read again (one Lease GET) when that proof ages; a view
behind the Lease is not current for acting (SourceError, with the resourceVersions). A live GET
(terminate's fresh read) that finds a pod bound to this node that the view lacks proves the view out of
date: it raises (nothing more proceeds on that view) and the cache relists. Live GETs' resourceVersions
also bound the lists that follow.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import lightkube
from lightkube.resources.core_v1 import Pod as PodResource

from nodegc.api.currency import MAX_LEASE_AGE_SECONDS, NotCurrent, Witness, node_lease_witness
from nodegc.api.errors import KubeError
from nodegc.api.objects import POD_FIELDS, object_resource_version, pod_from_object
from nodegc.api.reflector import COUNTERS, CacheUnusable, Reflector
from nodegc.desired.kube import check_listed, get_pod_object, parse_live_pod
from nodegc.desired.source import SourceError
from nodegc.hostio.clock import utcnow
from nodegc.model.pods import DesiredState, Pod

__all__ = ["COUNTERS", "PodReflector"]


class PodReflector(Reflector[Pod]):
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
        relist_spread_seconds: float | None = None,
        max_stale_lists: int = 3,
        clock: Callable[[], datetime] = utcnow,
        on_delete: Callable[[Pod], None] | None = None,
        rng: random.Random | None = None,
        prove_current: bool = True,
        max_lease_age_seconds: float = MAX_LEASE_AGE_SECONDS,
    ) -> None:
        if not node:
            raise ValueError("node must be a non-empty node name")

        def lease(client: lightkube.Client) -> Witness:
            return node_lease_witness(client, node, now=clock(), max_age_seconds=max_lease_age_seconds)

        super().__init__(
            PodResource, what=f"pods of node {node}", noun="pod", cache_label=f"pod cache of node {node}",
            thread_name=f"pod-reflector-{node}",
            parse=pod_from_object, shape=POD_FIELDS, key=lambda pod: pod.uid, keep=lambda pod: pod.node_name == node,
            fields={"spec.nodeName": node}, client=client, kubeconfig=kubeconfig,
            resync_seconds=resync_seconds, watch_timeout_seconds=watch_timeout_seconds,
            idle_timeout_seconds=idle_timeout_seconds, request_timeout=request_timeout,
            retry_seconds=retry_seconds, max_retry_seconds=max_retry_seconds,
            relist_spread_seconds=relist_spread_seconds, max_stale_lists=max_stale_lists, clock=clock,
            on_delete=on_delete, rng=rng, witness=lease if prove_current else None,
        )
        self.node = node
        self.prove_current = prove_current
        self.name = "kube"

    def start(self) -> PodReflector:
        try:
            super().start()
        except KubeError as e:
            raise SourceError(str(e)) from e
        return self

    def __enter__(self) -> PodReflector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # DesiredSource

    def fetch(self) -> DesiredState:
        """The cached view; never a request. SourceError before the first list or after a bad pod."""
        try:
            view = self.view()
        except CacheUnusable as e:
            raise SourceError(str(e)) from e
        pods = tuple(sorted(view.items, key=lambda p: (p.namespace, p.name, p.uid)))
        return DesiredState(node=self.node, pods=pods, source=self.name, fetched_at=view.fresh_at)

    def proven(self, *, max_age_seconds: float) -> DesiredState:
        """The view dated at its proof of currency, at most `max_age_seconds` old: what the engine may act
        on (`desired.source.ProvableSource`). SourceError when it cannot be proven (the view behind the node
        Lease, the Lease unreadable, missing, held by another, renewed too long ago or in the future).
        Without `prove_current`, `fetch()`."""
        try:
            view = self.prove(max_age_seconds=max_age_seconds)
        except (CacheUnusable, NotCurrent) as e:
            raise SourceError(str(e)) from e
        except KubeError as e:
            raise SourceError(str(e)) from e.__cause__
        pods = tuple(sorted(view.items, key=lambda p: (p.namespace, p.name, p.uid)))
        return DesiredState(node=self.node, pods=pods, source=self.name, fetched_at=view.fresh_at)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """A live GET (never the cache): the terminate phase's fresh read. A pod bound to this node that the
        view lacks proves the view out of date: SourceError, and the cache relists."""
        try:
            client = self.client()
        except KubeError as e:
            raise SourceError(str(e)) from e
        obj = get_pod_object(client, namespace, name)
        if obj is None:
            return None
        pod = parse_live_pod(obj, namespace, name)
        if self.prove_current:
            self.note_resource_version(object_resource_version(obj))
            try:
                check_listed(pod, node=self.node, listed=_Holding(self),
                             what=f"the pod cache of node {self.node}")
            except SourceError as e:
                held, got = self.resource_version(), object_resource_version(obj)
                if held is not None and got is not None and got <= held:
                    # Not a race with an event still on its way: the view passed that version without it.
                    self.request_relist(str(e))
                raise
        return pod


class _Holding:
    """The cache's keys (pod UIDs) as a container, read under its lock at each test."""

    def __init__(self, ref: PodReflector) -> None:
        self._ref = ref

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, str) and self._ref.holds(uid)
