"""Stale EndpointSlice endpoints: an endpoint whose pod is gone, replaced, finished, or moved off the address.

Pure: slices and pods come in as data, findings go out. Every predicate is named so that a missing or
doubtful value keeps the endpoint: an endpoint without a Pod targetRef, in a namespace whose pods were not
listed completely, or whose pod has no address of that family yet (the creation race) is never stale.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodegc.model.endpoints import (
    Endpoint,
    Slice,
    StaleAction,
    StaleEndpoint,
    StaleReason,
)
from nodegc.model.pods import OwnerState, Pod

IP_ADDRESS_TYPES = frozenset({"IPv4", "IPv6"})


# ------------------------------------------------------------------------------------------- pods


@dataclass(frozen=True)
class PodIndex:
    """The pods the planner may trust, and the namespaces in which their absence means something.

    `known_namespaces=None` says the list covers every namespace; `unknown_namespaces` are excluded even
    then (a pod there could not be read). A (namespace, name) listed twice is ambiguous and proves nothing.
    `uids` are every listed pod's: a targetRef whose uid is one of them names a pod that exists.
    """

    pods: Mapping[tuple[str, str], Pod]
    known_namespaces: frozenset[str] | None = None
    unknown_namespaces: frozenset[str] = frozenset()
    ambiguous: frozenset[tuple[str, str]] = field(default_factory=frozenset)
    uids: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def build(
        cls,
        pods: Iterable[Pod],
        *,
        known_namespaces: Collection[str] | None = None,
        unknown_namespaces: Collection[str] = (),
    ) -> PodIndex:
        by_key: dict[tuple[str, str], Pod] = {}
        twice: set[tuple[str, str]] = set()
        uids: set[str] = set()
        for pod in pods:
            key = (pod.namespace, pod.name)
            if key in by_key:
                twice.add(key)
            by_key[key] = pod
            uids.add(pod.uid)
        return cls(
            pods=by_key,
            known_namespaces=None if known_namespaces is None else frozenset(known_namespaces),
            unknown_namespaces=frozenset(unknown_namespaces),
            ambiguous=frozenset(twice),
            uids=frozenset(uids),
        )

    def covers(self, namespace: str) -> bool:
        if namespace in self.unknown_namespaces:
            return False
        return self.known_namespaces is None or namespace in self.known_namespaces


# ------------------------------------------------------------------------------------------- planning


def find_stale(slices: Iterable[Slice], pods: PodIndex) -> tuple[StaleEndpoint, ...]:
    return tuple(stale for s in slices for stale in stale_in_slice(s, pods))


# A pod that is gone or terminal is proof on any slice, and so is a targetRef UID that no longer exists:
# identity is the UID, so a pod of the same name with another UID is another pod, not evidence that the
# endpoint's pod lives (a StatefulSet pod recreated under the same name, with a new IP or the same one).
# An address the pod's status does not show is proof only on a slice nobody manages: other managers
# (multus, for one) publish secondary-network addresses that status.podIPs never lists.
_PROOF_FOR_ANY_MANAGER = frozenset({StaleReason.POD_MISSING, StaleReason.UID_CHANGED, StaleReason.POD_TERMINAL})


def stale_in_slice(slice_: Slice, pods: PodIndex) -> tuple[StaleEndpoint, ...]:
    found: list[StaleEndpoint] = []
    for index, endpoint in enumerate(slice_.endpoints):
        verdict = staleness(endpoint, slice_namespace=slice_.namespace, address_type=slice_.address_type,
                            pods=pods)
        if verdict is None:
            continue
        reason, detail = verdict
        # Nobody manages a slice without the label; an empty one names no manager, which is no proof of none.
        removable = not slice_.controller_managed and (reason in _PROOF_FOR_ANY_MANAGER or slice_.managed_by is None)
        action = StaleAction.REMOVE if removable else StaleAction.REPORT
        found.append(StaleEndpoint(
            slice_namespace=slice_.namespace, slice_name=slice_.name, index=index, endpoint=endpoint,
            reason=reason, detail=detail, action=action, managed_by=slice_.managed_by,
            service_name=slice_.service_name,
        ))
    return tuple(found)


def staleness(
    endpoint: Endpoint, *, slice_namespace: str, address_type: str | None, pods: PodIndex
) -> tuple[StaleReason, str] | None:
    """None keeps the endpoint; a reason is returned only with evidence for it."""
    ref = endpoint.target_ref
    if ref is None or ref.kind != "Pod" or not ref.name:
        return None
    namespace = ref.namespace or slice_namespace
    key = (namespace, ref.name)
    if not pods.covers(namespace) or key in pods.ambiguous:
        return None
    pod = pods.pods.get(key)
    if ref.uid and ref.uid in pods.uids and (pod is None or pod.uid != ref.uid):
        # Identity is the uid: a listed pod holds it under another name or namespace than the ref's (a ref
        # without a namespace is read in the slice's, which need not be its pod's). That pod exists.
        return None
    if pod is None:
        return StaleReason.POD_MISSING, f"pod {namespace}/{ref.name} does not exist"
    if ref.uid and pod.uid != ref.uid:
        # The pods were read after the slice, so the pod the endpoint names existed before this one, which
        # took its name: the endpoint's pod is gone, whatever address the newer one holds (a sticky IP is
        # served by the newer pod, whose readiness the endpoint does not speak for; its own endpoint
        # carries its own uid). Without a uid in the targetRef nothing tells the incarnations apart.
        if pod.static_uid and pod.state is not OwnerState.TERMINAL and (
                pod.host_network or not addresses_not_held(endpoint.addresses, pod)):
            # A mirror pod: deleting it makes the kubelet create another, with a new uid, over the same
            # running static pod. The old uid may be the same pod, on the same address.
            return None
        same = _same_address(endpoint.addresses, pod)
        return StaleReason.UID_CHANGED, (
            f"pod {namespace}/{ref.name} has uid {pod.uid}, the endpoint names uid {ref.uid}"
            + (" (the newer pod holds the same address)" if same else "")
        )
    if pod.state is OwnerState.TERMINAL:
        return StaleReason.POD_TERMINAL, f"pod {namespace}/{ref.name} is {pod.phase}"
    if pod.host_network:
        return None  # its endpoint may use any address of the node, not only the one in status
    if address_type in IP_ADDRESS_TYPES and addresses_not_held(endpoint.addresses, pod):
        return StaleReason.ADDRESS_NOT_HELD, (
            f"pod {namespace}/{ref.name} holds {', '.join(pod.pod_ips)}, "
            f"not {', '.join(endpoint.addresses)}"
        )
    return None


def addresses_not_held(addresses: Sequence[str], pod: Pod) -> bool:
    """True only when the pod's status lists addresses of the endpoint's family and none is the endpoint's.

    A pod without an address of that family yet (pending, or a status not yet written) proves nothing.
    An endpoint address that is not an IP is left to whoever wrote it.
    """
    if not addresses:
        return False
    held = [ip for ip in map(_ip, pod.pod_ips) if ip is not None]
    for raw in addresses:
        address = _ip(raw)
        if address is None:
            return False
        same_family = [ip for ip in held if ip.version == address.version]
        if not same_family or address in same_family:
            return False
    return True


def served_on_node(addresses: Sequence[str], node_addresses: Collection[str]) -> bool:
    """Whether an endpoint's address is one of the node addresses its pod serves on through a hostPort
    (`node_addresses`, normalized): the pod's status does not show it, and it is the pod's all the same."""
    return any((ip := _ip(a)) is not None and str(ip) in node_addresses for a in addresses)


def _same_address(addresses: Sequence[str], pod: Pod) -> bool:
    held = {ip for ip in map(_ip, pod.pod_ips) if ip is not None}
    return any(_ip(a) in held for a in addresses)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def remaining_endpoints(raw_endpoints: Sequence[Any], stale: Iterable[StaleEndpoint]) -> list[Any]:
    """The endpoints as the API sent them (every field kept), less the stale ones of that same list."""
    drop = {s.index for s in stale}
    return [raw for i, raw in enumerate(raw_endpoints) if i not in drop]
