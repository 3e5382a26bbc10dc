"""Desired state from the Kubernetes API: one consistent list of the pods bound to this node.

The list is paged (`limit` + `continue`, done by lightkube) so a node with many pods does not need one
huge response, and it is filtered by the server (`fieldSelector=spec.nodeName=<node>`) so the agent
never pulls the cluster's pods. Any failure, on any page, fails the whole fetch: a partial list would
make the missing pods' resources look like residue.

A list must also prove it is current before it may drive destructive steps (`prove_current`, the
default; `scan` turns it off): a lagging API server, cache or proxy answers with an old photograph that
looks fresh. The proof (`nodegc.api.currency`) is the node's own Lease, read live right before the list:
the list may not be older than the Lease, nor than any resourceVersion this source has seen (earlier
lists, live GETs), and the photograph is dated at the Lease's renewal. A live GET that finds a pod on this
node that the list lacks proves the list out of date (`check_listed`): the GET raises, and nothing more
proceeds on that list. Any failure of the proof is a SourceError (nothing destructive happens), with the
reason. The agent's pod watch (`desired.reflector`) proves its lists and checks its live GETs the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from datetime import datetime
from pathlib import Path
from typing import Any

import lightkube
from lightkube.resources.core_v1 import Pod as PodResource

from nodegc.api.client import make_client
from nodegc.api.currency import MAX_LEASE_AGE_SECONDS, check_list, node_lease_witness
from nodegc.api.errors import KubeError
from nodegc.api.objects import POD_FIELDS, object_resource_version, pod_from_object
from nodegc.api.reads import get_live, list_all
from nodegc.desired.source import SourceError
from nodegc.hostio.clock import utcnow
from nodegc.model.pods import DesiredState, Pod


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
        witness = None
        if self.prove_current:
            try:
                witness = node_lease_witness(client, self.node, now=fetched_at,
                                             max_age_seconds=self._max_lease_age)
            except KubeError as e:
                raise SourceError(str(e)) from e.__cause__
            self._note_rv(witness.rv)
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
            try:
                self._list_rv = check_list(rv, objects, what=f"node {self.node}'s pods", witness=witness,
                                           high_rv=self._high_rv)
            except KubeError as e:
                raise SourceError(str(e)) from e
            self._note_rv(self._list_rv)
            fetched_at = min(fetched_at, witness.at)
            self._listed = {p.uid: p for p in pods}
        return DesiredState(node=self.node, pods=tuple(pods), source=self.name, fetched_at=fetched_at)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """A live GET of one pod: the terminate phase's fresh read, never the list or a cache."""
        client = self._get_client()
        obj = get_pod_object(client, namespace, name)
        if obj is None:
            return None
        pod = parse_live_pod(obj, namespace, name)
        if self.prove_current:
            self._note_rv(object_resource_version(obj))
            if self._listed is not None:
                check_listed(pod, node=self.node, listed=self._listed,
                             what=f"the list of node {self.node}'s pods (resourceVersion {self._list_rv})")
        return pod

    def close(self) -> None:
        if self._client is not None and self._owns_client:
            self._client.close()
            self._client = None

    def __enter__(self) -> KubeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
    """Every pod bound to `node` (paged, a quorum read), and the resourceVersion of that consistent list;
    any failure on any page raises SourceError."""
    try:
        return list_all(client, PodResource, what=f"listing pods of node {node}", fields={"spec.nodeName": node},
                        timeout=timeout, shape=POD_FIELDS)
    except KubeError as e:
        raise SourceError(str(e)) from e.__cause__


def get_pod_object(client: lightkube.Client, namespace: str, name: str) -> dict[str, Any] | None:
    """A live GET of one pod as JSON (None on 404): the terminate phase's fresh read, never a cache."""
    try:
        return get_live(client, PodResource, namespace=namespace, name=name, what=f"getting pod {namespace}/{name}",
                        shape=POD_FIELDS)
    except KubeError as e:
        raise SourceError(str(e)) from e.__cause__


def parse_live_pod(obj: dict[str, Any], namespace: str, name: str) -> Pod:
    try:
        return pod_from_object(obj)
    except ValueError as e:
        raise SourceError(f"getting pod {namespace}/{name}: the pod cannot be identified: {e}") from e


def check_listed(pod: Pod, *, node: str, listed: Container[str], what: str) -> None:
    """A live GET found `pod`: bound to this node with a UID the list (or cache) lacks, it proves that list
    out of date, whatever else it says (SourceError)."""
    if pod.node_name == node and pod.uid not in listed:
        raise SourceError(f"{what} is out of date: pod {pod.namespace}/{pod.name} uid {pod.uid} is bound to this"
                          " node and the list lacks it")
