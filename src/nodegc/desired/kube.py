"""Desired state from the Kubernetes API: one consistent list of the pods bound to this node.

The list is paged (`limit` + `continue`, done by lightkube) so a node with many pods does not need one
huge response, and it is filtered by the server (`fieldSelector=spec.nodeName=<node>`) so the agent
never pulls the cluster's pods. Any failure, on any page, fails the whole fetch: a partial list would
make the missing pods' resources look like residue.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import lightkube
from lightkube.resources.core_v1 import Pod as PodResource

from nodegc.api.client import make_client
from nodegc.api.errors import KubeError, call, get_or_none
from nodegc.api.objects import pod_from_object
from nodegc.desired.source import SourceError
from nodegc.hostio.clock import utcnow
from nodegc.model.pods import DesiredState, Pod

CHUNK_SIZE = 500


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

    def fetch(self) -> DesiredState:
        client = self._get_client()
        fetched_at = self._clock()
        objects = self._list(client)
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
        return DesiredState(node=self.node, pods=tuple(pods), source=self.name, fetched_at=fetched_at)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """A live GET of one pod: the terminate phase's fresh read, never the list or a cache."""
        return get_pod_live(self._get_client(), namespace, name)

    def close(self) -> None:
        if self._client is not None and self._owns_client:
            self._client.close()
            self._client = None

    def __enter__(self) -> KubeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _list(self, client: lightkube.Client) -> list[dict[str, Any]]:
        return list_node_pods(client, self.node, timeout=self._timeout)[0]

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


def get_pod_live(client: lightkube.Client, namespace: str, name: str) -> Pod | None:
    """A live GET of one pod (None on 404): the terminate phase's fresh read, never a cache."""
    what = f"getting pod {namespace}/{name}"
    try:
        obj = get_or_none(what, lambda: client.get(PodResource, name=name, namespace=namespace))
    except KubeError as e:
        raise SourceError(str(e)) from e.__cause__
    if obj is None:
        return None
    try:
        return pod_from_object(obj.to_dict())
    except ValueError as e:
        raise SourceError(f"{what}: the pod cannot be identified: {e}") from e
