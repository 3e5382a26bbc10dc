"""Desired state from the Kubernetes API: one consistent list of the pods bound to this node.

The list is paged (`limit` + `continue`, done by lightkube) so a node with many pods does not need one
huge response, and it is filtered by the server (`fieldSelector=spec.nodeName=<node>`) so the agent
never pulls the cluster's pods. Any failure, on any page, fails the whole fetch: a partial list would
make the missing pods' resources look like residue.

A list must also prove it is current before it may drive destructive steps (`prove_current`, the
default; `scan` turns it off): a lagging API server, cache or proxy answers with an old photograph that
looks fresh. The proof is the node's own Lease (kube-node-lease/<node>), which its kubelet renews every
10 s: it is read with a live GET right before the list, and
- the list's resourceVersion must not be older than the Lease's (a consistent list taken after the GET
  cannot be), nor older than any resourceVersion this source has seen (earlier lists, live GETs);
- the Lease must have been renewed within `max_lease_age_seconds` (40 s, the kubelet's default lease
  duration) by this node's clock: an old renewal is an old answer, or a kubelet that is not running;
- the photograph is dated at the Lease's renewal, never later than the list, so its age counts from
  the last moment it is known to be current.
A live GET that finds a pod on this node that the list lacks proves the list out of date: the GET
raises, and nothing more proceeds on that list. Any failure of the proof is a SourceError (nothing
destructive happens), with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lightkube
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod as PodResource

from nodegc.api.client import make_client
from nodegc.api.errors import KubeError, call, get_or_none
from nodegc.api.objects import object_resource_version, pod_from_object, resource_version_number
from nodegc.desired.source import SourceError
from nodegc.hostio.clock import utcnow
from nodegc.model.pods import DesiredState, Pod

CHUNK_SIZE = 500
NODE_LEASE_NAMESPACE = "kube-node-lease"
MAX_LEASE_AGE_SECONDS = 40.0
"""The kubelet's default node lease duration; it renews every quarter of it (10 s)."""


class KubeSource:
    """Lists pods through lightkube; the client is built on first use and reused (one connection pool)."""

    def __init__(
        self,
        node: str,
        *,
        kubeconfig: Path | None = None,
        client: lightkube.Client | None = None,
        timeout: float = 10.0,
        clock: Callable[[], datetime] = utcnow,
        prove_current: bool = True,
        max_lease_age_seconds: float = MAX_LEASE_AGE_SECONDS,
    ) -> None:
        if not node:
            raise ValueError("node must be a non-empty node name")
        self.node = node
        self.name = "kube"
        self._kubeconfig = kubeconfig
        self._client = client
        self._owns_client = client is None
        self._timeout = timeout
        self._clock = clock
        self.prove_current = prove_current
        self._max_lease_age = max_lease_age_seconds
        self._high_rv: int | None = None
        """The newest resourceVersion seen (lists, the Lease, live GETs): no later list may be older."""
        self._listed: dict[str, Pod] | None = None
        self._list_rv: int | None = None

    def fetch(self) -> DesiredState:
        client = self._get_client()
        fetched_at = self._clock()
        witness = self._witness(client, fetched_at) if self.prove_current else None
        objects, rv = list_node_pods(client, self.node, timeout=self._timeout)
        pods: list[Pod] = []
        for index, obj in enumerate(objects):
            try:
                pod = pod_from_object(obj)
            except ValueError as e:
                raise SourceError(f"pod #{index} from the API cannot be identified: {e}") from e
            # The server filters by node; keeping only exact matches guards against a server or proxy
            # that ignored the selector, so another node's pods are never taken for this one's.
            if pod.node_name == self.node:
                pods.append(pod)
        if witness is not None:
            lease_rv, renewed_at = witness
            self._check_list(rv, objects, lease_rv)
            fetched_at = min(fetched_at, renewed_at)
            self._listed = {p.uid: p for p in pods}
        return DesiredState(node=self.node, pods=tuple(pods), source=self.name, fetched_at=fetched_at)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """A live GET of one pod: the terminate phase's fresh read, never the list or a cache."""
        client = self._get_client()
        obj = get_pod_object(client, namespace, name)
        if obj is None:
            return None
        what = f"getting pod {namespace}/{name}"
        try:
            pod = pod_from_object(obj)
        except ValueError as e:
            raise SourceError(f"{what}: the pod cannot be identified: {e}") from e
        if self.prove_current:
            self._note_rv(object_resource_version(obj))
            listed = self._listed
            if listed is not None and pod.node_name == self.node and pod.uid not in listed:
                raise SourceError(
                    f"the list of node {self.node}'s pods (resourceVersion {self._list_rv}) is out of date: "
                    f"pod {namespace}/{name} uid {pod.uid} is bound to this node and the list lacks it"
                )
        return pod

    def close(self) -> None:
        if self._client is not None and self._owns_client:
            self._client.close()
            self._client = None

    def __enter__(self) -> KubeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the proof that a list is current ----------------------------------------------------------

    def _witness(self, client: lightkube.Client, now: datetime) -> tuple[int, datetime]:
        """The node Lease's resourceVersion and renewal time, read live right before the list."""
        what = f"getting the node Lease {NODE_LEASE_NAMESPACE}/{self.node}"
        cannot = f"cannot prove the list of node {self.node}'s pods is current"
        try:
            lease = get_or_none(what, lambda: client.get(Lease, name=self.node, namespace=NODE_LEASE_NAMESPACE))
        except KubeError as e:
            raise SourceError(f"{cannot}: {e}") from e.__cause__
        if lease is None:
            raise SourceError(f"{cannot}: the node Lease {NODE_LEASE_NAMESPACE}/{self.node} does not exist")
        rv = resource_version_number(lease.metadata.resourceVersion if lease.metadata else None)
        renewed = lease.spec.renewTime if lease.spec is not None else None
        if rv is None or not isinstance(renewed, datetime):
            raise SourceError(f"{cannot}: the node Lease has no numeric resourceVersion or no renewTime")
        if renewed.tzinfo is None:
            renewed = renewed.replace(tzinfo=UTC)
        age = (now - renewed).total_seconds()
        if age > self._max_lease_age:
            raise SourceError(
                f"{cannot}: the node Lease was renewed {age:.0f}s ago (more than {self._max_lease_age:g}s): "
                "an old answer, or a kubelet that is not running"
            )
        self._note_rv(rv)
        return rv, renewed

    def _check_list(self, rv: str | None, objects: list[dict[str, Any]], lease_rv: int) -> None:
        number = resource_version_number(rv)
        prefix = f"the list of node {self.node}'s pods"
        if number is None:
            raise SourceError(f"{prefix} has no numeric resourceVersion ({rv!r}): it cannot prove it is current")
        if number < lease_rv:
            raise SourceError(
                f"{prefix} is at resourceVersion {number}, older than the node Lease read just before it "
                f"({lease_rv}): a lagging API server, cache or proxy"
            )
        if self._high_rv is not None and number < self._high_rv:
            raise SourceError(
                f"{prefix} is at resourceVersion {number}, older than {self._high_rv} already seen: "
                "a lagging API server, cache or proxy"
            )
        newest = max((n for obj in objects if (n := object_resource_version(obj)) is not None), default=None)
        if newest is not None and newest > number:
            raise SourceError(f"{prefix} at resourceVersion {number} holds a pod at {newest}: inconsistent")
        self._list_rv = number
        self._note_rv(number)

    def _note_rv(self, rv: int | None) -> None:
        if rv is not None:
            self._high_rv = rv if self._high_rv is None else max(self._high_rv, rv)

    def _get_client(self) -> lightkube.Client:
        if self._client is None:
            self._client = build_client(self._kubeconfig, timeout=self._timeout)
        return self._client


def build_client(kubeconfig: Path | None, *, timeout: float) -> lightkube.Client:
    """The process's client factory, with its failure as a SourceError (no desired state without it)."""
    try:
        return make_client(kubeconfig, timeout=timeout)
    except KubeError as e:
        raise SourceError(str(e)) from e


def list_node_pods(
    client: lightkube.Client, node: str, *, timeout: float
) -> tuple[list[dict[str, Any]], str | None]:
    """Every pod bound to `node` (paged), and the resourceVersion of that consistent list.

    No resourceVersion is sent, so the API server answers from a quorum read (never its possibly lagging
    watch cache), and the continue token keeps every page at the first page's resourceVersion. Any failure
    on any page raises: a partial list would make the missing pods' resources look like residue.
    """

    def fetch() -> tuple[list[dict[str, Any]], str | None]:
        items = client.list(
            PodResource,
            namespace=lightkube.ALL_NS,
            chunk_size=CHUNK_SIZE,
            fields={"spec.nodeName": node},
        )
        objects = [item.to_dict() for item in items]
        try:
            rv: str | None = items.resourceVersion
        except lightkube.NotReadyError:
            rv = None  # an empty first page without metadata: a watch then starts from "now"
        return objects, rv

    try:
        return call(f"listing pods of node {node}", fetch, timeout=timeout)
    except KubeError as e:
        raise SourceError(str(e)) from e.__cause__


def get_pod_object(client: lightkube.Client, namespace: str, name: str) -> dict[str, Any] | None:
    """A live GET of one pod as JSON (None on 404): the terminate phase's fresh read, never a cache."""
    what = f"getting pod {namespace}/{name}"
    try:
        obj = get_or_none(what, lambda: client.get(PodResource, name=name, namespace=namespace))
    except KubeError as e:
        raise SourceError(str(e)) from e.__cause__
    return None if obj is None else obj.to_dict()


def get_pod_live(client: lightkube.Client, namespace: str, name: str) -> Pod | None:
    """A live GET of one pod (None on 404): the terminate phase's fresh read, never a cache."""
    obj = get_pod_object(client, namespace, name)
    if obj is None:
        return None
    try:
        return pod_from_object(obj)
    except ValueError as e:
        raise SourceError(f"getting pod {namespace}/{name}: the pod cannot be identified: {e}") from e
