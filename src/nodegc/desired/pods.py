"""Turn a Pod as JSON (API object, kubectl item or lightkube `to_dict()`) into the model's `Pod`.

Every source shares this parser so that the API and a snapshot file can never disagree on what a
pod means. It is strict on identity: a pod without uid or name raises, because a desired state with
a pod we cannot identify cannot prove that anything else is residue.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from nodegc.model.pods import Pod

DEFAULT_NAMESPACE = "default"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
HASH_ANNOTATION = "kubernetes.io/config.hash"


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
        uid=uid,
        namespace=namespace,
        name=name,
        node_name=_opt_str(spec, "spec.nodeName") or None,
        phase=_opt_str(status, "status.phase") or None,
        pod_ips=_pod_ips(status, label),
        host_network=host_network,
        created_at=_timestamp(meta.get("creationTimestamp"), f"pod {label}: metadata.creationTimestamp"),
        deleting=meta.get("deletionTimestamp") is not None,
        static_uid=static_uid if isinstance(static_uid, str) and static_uid and static_uid != uid else None,
    )


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
            seen[str(ipaddress.ip_address(ip.strip()))] = None
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
