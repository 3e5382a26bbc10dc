"""The one parser of API objects: a Pod or an EndpointSlice as JSON into the model's dataclasses.

Pure (no I/O): API objects, kubectl items and lightkube `to_dict()` output all come through here, so the
API, a watch event and a snapshot file can never disagree on what an object means. `POD_FIELDS` is the
shape the API's pods are decoded into (`api.reads`, `api.reflector`): only the fields read here, each as
the JSON holds it, so a pod costs what nodegc reads of it rather than the whole object. It is strict on
identity: a pod without uid or name raises, because a desired state with a pod we cannot identify cannot
prove that anything else is residue; a slice we cannot read exactly raises, because removing endpoints
from a list we misread could drop a live one.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypedDict

from nodegc.model.addresses import normalized_ip
from nodegc.model.endpoints import MANAGED_BY_LABEL, SERVICE_NAME_LABEL, Endpoint, Slice, TargetRef
from nodegc.model.pods import Pod

DEFAULT_NAMESPACE = "default"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
HASH_ANNOTATION = "kubernetes.io/config.hash"


# ------------------------------------------------------------------------------------------- pods

_NotAnObject = str | int | float | bool | list[Any] | None
"""What a section may hold instead of an object: decoded as it is, so that `pod_from_object` refuses it
with its own words; the shape selects fields and never validates one."""

_PodAnnotations = TypedDict(
    "_PodAnnotations", {"kubernetes.io/config.mirror": Any, "kubernetes.io/config.hash": Any}, total=False)


class _PodMetadata(TypedDict, total=False):
    uid: Any
    name: Any
    namespace: Any
    resourceVersion: Any
    creationTimestamp: Any
    annotations: _PodAnnotations | _NotAnObject


class _PodSpec(TypedDict, total=False):
    nodeName: Any
    hostNetwork: Any


class _PodStatus(TypedDict, total=False):
    phase: Any
    podIP: Any
    podIPs: Any


class _PodFields(TypedDict, total=False):
    metadata: _PodMetadata | _NotAnObject
    spec: _PodSpec | _NotAnObject
    status: _PodStatus | _NotAnObject


POD_FIELDS: Any = _PodFields
"""The decoding shape (msgspec) of a pod from the API: every field `pod_from_object` and the API layer read
(identity, annotations of static pods, node, phase, IPs, creation time, resourceVersion) and nothing else;
an object at the top (a list item or a GET that is not one is a malformed answer).
Keep it in step with `pod_from_object` (tests/unit/test_pod_fields.py decodes pods both ways)."""


def pod_from_object(obj: Mapping[str, Any]) -> Pod:
    """Raise ValueError on anything that would make the pod's identity or addresses a guess."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"pod is a {type(obj).__name__}, not an object")
    meta = _section(obj, "metadata")
    spec = _section(obj, "spec")
    status = _section(obj, "status")

    uid = _opt_str(meta, "metadata.uid")
    name = _opt_str(meta, "metadata.name")
    if not uid:
        raise ValueError(f"pod {name or '(no name)'} has no metadata.uid")
    if not name:
        raise ValueError(f"pod uid:{uid} has no metadata.name")
    namespace = _opt_str(meta, "metadata.namespace") or DEFAULT_NAMESPACE

    host_network = spec.get("hostNetwork", False)
    if host_network is None:
        host_network = False
    if not isinstance(host_network, bool):
        raise ValueError(f"pod {namespace}/{name}: spec.hostNetwork is not a boolean")

    label = f"{namespace}/{name}"
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise ValueError(f"pod {label}: metadata.annotations is not an object")
    # A static pod's directory and CNI args use the kubelet's config hash, not the mirror pod's uid.
    static_uid = annotations.get(MIRROR_ANNOTATION) or annotations.get(HASH_ANNOTATION)
    if isinstance(static_uid, str):
        static_uid = _text(static_uid, f"pod {label}: the config hash annotation")
    return Pod(
        uid=_shared(uid) or uid,
        namespace=_shared(namespace) or namespace,
        name=_shared(name) or name,  # the name its cache entry's CNI args intern
        node_name=_shared(_opt_str(spec, "spec.nodeName")),
        phase=_shared(_opt_str(status, "status.phase")),
        pod_ips=_pod_ips(status, label),
        host_network=host_network,
        created_at=_timestamp(meta.get("creationTimestamp"), f"pod {label}: metadata.creationTimestamp"),
        static_uid=static_uid if isinstance(static_uid, str) and static_uid and static_uid != uid else None,
    )


def host_port_addresses(obj: Mapping[str, Any]) -> frozenset[str]:
    """The node addresses (status.hostIPs, status.hostIP) a pod with a hostPort serves on, normalized; empty
    for a pod without one. Lenient: a field it cannot read adds nothing (the caller keeps on what it finds)."""
    spec = obj.get("spec")
    status = obj.get("status")
    if not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        return frozenset()
    containers = [c for key in ("containers", "initContainers") if isinstance(spec.get(key), list)
                  for c in spec[key] if isinstance(c, Mapping)]
    if not any(isinstance(port, Mapping) and port.get("hostPort")
               for c in containers if isinstance(c.get("ports"), list) for port in c["ports"]):
        return frozenset()
    entries = status.get("hostIPs")
    raw = [e.get("ip") for e in entries if isinstance(e, Mapping)] if isinstance(entries, list) else []
    raw.append(status.get("hostIP"))
    found: set[str] = set()
    for text in raw:
        if isinstance(text, str):
            try:
                found.add(normalized_ip(text.strip()))
            except ValueError:
                continue
    return frozenset(found)


def _shared(value: str | None) -> str | None:
    """One string object for a value that thousands of kept objects repeat (a pod's namespace, node and phase;
    an endpoint's kind, namespace and node) or that the node's scan names too (a pod's UID: its directory's
    name; its name: its cache entry's CNI args), kept as long as the object is; None for an empty or absent
    one. Equal either way."""
    if not value:
        return None
    return sys.intern(value) if type(value) is str else value


def _section(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"pod {key} is a {type(value).__name__}, not an object")
    return value


def _opt_str(section: Mapping[str, Any], dotted: str) -> str | None:
    value = section.get(dotted.rsplit(".", 1)[-1])
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"pod {dotted} is a {type(value).__name__}, not a string")
    return _text(value, f"pod {dotted}")


def _text(value: str, label: str) -> str:
    """A JSON escape such as "\\ud800" decodes to a lone surrogate, which no ledger, log or terminal can
    carry; such a pod cannot be identified, so it is refused like any other malformed field."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"{label} is not valid Unicode text (a lone surrogate at {e.start})") from e
    return value


def _pod_ips(status: Mapping[str, Any], label: str) -> tuple[str, ...]:
    """podIPs is authoritative (dual stack); podIP is the fallback of older servers and snapshots."""
    raw: list[str] = []
    entries = status.get("podIPs")
    if entries is not None:
        if not isinstance(entries, list):
            raise ValueError(f"pod {label}: status.podIPs is not a list")
        for entry in entries:
            ip = entry.get("ip") if isinstance(entry, Mapping) else None
            if not isinstance(ip, str):
                raise ValueError(f"pod {label}: status.podIPs has an entry without a string ip")
            raw.append(ip)
    if not raw:
        single = _opt_str(status, "status.podIP")
        if single:
            raw.append(single)
    seen: dict[str, None] = {}
    for ip in raw:
        try:
            seen[normalized_ip(ip.strip())] = None
        except ValueError as e:
            raise ValueError(f"pod {label}: {ip!r} is not an IP address") from e
    return tuple(seen)


def _timestamp(value: object, label: str) -> datetime | None:
    """RFC3339 from JSON, or a datetime when a YAML loader already parsed it; naive means UTC."""
    if value is None:
        return None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError as e:
            raise ValueError(f"{label} {value!r} is not an RFC3339 time") from e
    else:
        raise ValueError(f"{label} is a {type(value).__name__}, not a time")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


# ------------------------------------------------------------------------------------------- endpointslices

_SliceLabels = TypedDict(
    "_SliceLabels", {"endpointslice.kubernetes.io/managed-by": Any, "kubernetes.io/service-name": Any}, total=False)


class _SliceMetadata(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    labels: _SliceLabels | _NotAnObject


class _TargetRefFields(TypedDict, total=False):
    kind: Any
    namespace: Any
    name: Any
    uid: Any


class _EndpointFields(TypedDict, total=False):
    addresses: Any
    targetRef: _TargetRefFields | _NotAnObject
    nodeName: Any


class _SliceFields(TypedDict, total=False):
    metadata: _SliceMetadata | _NotAnObject
    addressType: Any
    endpoints: list[_EndpointFields | _NotAnObject] | str | int | float | bool | dict[str, Any] | None


SLICE_FIELDS: Any = _SliceFields
"""The decoding shape (msgspec) of an EndpointSlice the controller's cache keeps: every field
`slice_from_object` and the resourceVersion checks read (identity, the two labels, address type, each
endpoint's addresses, targetRef and node) and nothing else (conditions, hints, zones, ports, managedFields
are never read). A slice decoded into it must not be patched back: the patch would drop the fields it
leaves out, so a removal reads the slice whole first. Keep it in step with `slice_from_object`
(tests/unit/test_slice_fields.py decodes slices both ways)."""


def slice_from_object(obj: Mapping[str, Any]) -> Slice:
    """Raise ValueError when the slice's identity or endpoint list is not what the API defines.

    A slice we cannot read exactly is skipped whole by the caller: removing endpoints from a list we
    misread could drop a live one.
    """
    if not isinstance(obj, Mapping):
        raise ValueError(f"endpointslice is a {type(obj).__name__}, not an object")
    meta = _slice_section(obj, "metadata", "endpointslice")
    name = _slice_str(meta, "name", "endpointslice metadata")
    namespace = _slice_str(meta, "namespace", "endpointslice metadata")
    if not name or not namespace:
        raise ValueError("endpointslice has no metadata.name or metadata.namespace")
    label = f"endpointslice {namespace}/{name}"
    labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise ValueError(f"{label}: metadata.labels is not an object")
    raw_endpoints = obj.get("endpoints")
    if raw_endpoints is None:
        raw_endpoints = []
    if not isinstance(raw_endpoints, list):
        raise ValueError(f"{label}: endpoints is not a list")
    endpoints = tuple(_endpoint(raw, f"{label} endpoint #{i}") for i, raw in enumerate(raw_endpoints))
    managed_by = labels.get(MANAGED_BY_LABEL)
    service = labels.get(SERVICE_NAME_LABEL)
    return Slice(
        namespace=sys.intern(namespace),
        name=name,
        resource_version=_slice_str(meta, "resourceVersion", label) or None,
        address_type=_shared(_slice_str(obj, "addressType", label)),
        endpoints=endpoints,
        managed_by=(_shared(managed_by) or managed_by) if isinstance(managed_by, str) else None,  # "" stays ""
        service_name=service if isinstance(service, str) and service else None,
        uid=_slice_str(meta, "uid", label) or None,
    )


def _endpoint(raw: object, label: str) -> Endpoint:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{label} is not an object")
    addresses = raw.get("addresses") or []
    if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
        raise ValueError(f"{label}: addresses is not a list of strings")
    ref_raw = raw.get("targetRef")
    ref: TargetRef | None = None
    if ref_raw is not None:
        if not isinstance(ref_raw, Mapping):
            raise ValueError(f"{label}: targetRef is not an object")
        ref = TargetRef(
            kind=_shared(_slice_str(ref_raw, "kind", label)),
            namespace=_shared(_slice_str(ref_raw, "namespace", label)),
            name=_slice_str(ref_raw, "name", label) or None,
            uid=_slice_str(ref_raw, "uid", label) or None,
        )
    return Endpoint(addresses=tuple(addresses), target_ref=ref,
                    node_name=_shared(_slice_str(raw, "nodeName", label)))


def _slice_section(obj: Mapping[str, Any], key: str, what: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} {key} is not an object")
    return value


def _slice_str(section: Mapping[str, Any], key: str, what: str) -> str | None:
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{what}: {key} is a {type(value).__name__}, not a string")
    return value


# ------------------------------------------------------------------------------------------- versions


def resource_version_number(rv: object) -> int | None:
    """resourceVersions are opaque, but every real server uses etcd revisions; None when not a number."""
    if not isinstance(rv, str) or not rv.isdigit():
        return None
    return int(rv)


def object_resource_version(obj: Mapping[str, Any]) -> int | None:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return resource_version_number(meta.get("resourceVersion")) if isinstance(meta, Mapping) else None
