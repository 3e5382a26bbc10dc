"""Desired state from a list+watch cache of the pods bound to this node (one watch per node).

The machinery (list, watch with bookmarks, relist on 410, ERROR, stall and every resync, resourceVersion
checks, jittered retries) is `nodegc.api.reflector.Reflector`; this is its pod-of-one-node flavour and the
`DesiredSource` the engine reads. `fetch()` reports `fetched_at` = the last time the view was known fresh
(a successful list, or an event or bookmark received on a live watch), so a stalled or failing reflector
ages and the engine's `stale_source` guard blocks reclaim. A pod that cannot be identified makes the
whole view untrusted until a relist succeeds.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import lightkube
from lightkube.resources.core_v1 import Pod as PodResource

from nodegc.api.errors import KubeError
from nodegc.api.objects import pod_from_object
from nodegc.api.reflector import COUNTERS, CacheUnusable, Reflector
from nodegc.desired.kube import get_pod_live
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
    ) -> None:
        if not node:
            raise ValueError("node must be a non-empty node name")
        super().__init__(
            PodResource, what=f"pods of node {node}", noun="pod", cache_label=f"pod cache of node {node}",
            thread_name=f"pod-reflector-{node}",
            parse=pod_from_object, key=lambda pod: pod.uid, keep=lambda pod: pod.node_name == node,
            fields={"spec.nodeName": node}, client=client, kubeconfig=kubeconfig,
            resync_seconds=resync_seconds, watch_timeout_seconds=watch_timeout_seconds,
            idle_timeout_seconds=idle_timeout_seconds, request_timeout=request_timeout,
            retry_seconds=retry_seconds, max_retry_seconds=max_retry_seconds,
            relist_spread_seconds=relist_spread_seconds, max_stale_lists=max_stale_lists, clock=clock,
            on_delete=on_delete, rng=rng,
        )
        self.node = node
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

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """A live GET (never the cache): the terminate phase's fresh read."""
        try:
            client = self.client()
        except KubeError as e:
            raise SourceError(str(e)) from e
        return get_pod_live(client, namespace, name)
