"""An HTTP-level Kubernetes API server for tests: real sockets, real JSON, real query strings.

The client under test (lightkube over httpx) talks to it exactly as it would talk to a cluster, so
tests assert on the requests actually sent (`.requests`) and on the client's handling of pages,
watches, errors and latency. Usage notes: /work/notes/fakeapi.md.

Layout:
- `ResourceType`: what the fake knows about one resource (URL prefix, kind, selectable fields,
  strategic-merge keys). `RESOURCES` holds pods, services, events, endpointslices and leases.
- `Store`: one in-memory store for every resource, one global resourceVersion counter (every change
  bumps it) and a bounded history of changes; watches replay the history, and a resourceVersion older
  than the retained window is answered with 410 Gone.
- `Router`: (method, path pattern) -> handler; handlers return a `Reply`, a `WatchStream` or raise
  `ApiFailure`.
- `FakeKubeAPI`: the server thread, fault injection, request recording and test helpers; node Leases
  in kube-node-lease renewed by simulated kubelets (`kubelets=`, `start_kubelet`, `renew_node_lease`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import dataclasses
import json
import re
import socket
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

JSON = dict[str, Any]

REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_object(code: int, message: str, *, reason: str | None = None,
                  details: JSON | None = None) -> JSON:
    """A meta/v1 Status, the body the API server sends with every error (`details`: the object it is about,
    as the API server names a NotFound's)."""
    status: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(code, "Unknown"),
        "code": code,
    }
    if details is not None:
        status["details"] = details
    return status


class ApiFailure(Exception):
    """Raised by handlers; becomes a Status response with this code."""

    def __init__(self, code: int, message: str, *, reason: str | None = None, details: JSON | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.details = details


@dataclass(frozen=True)
class Reply:
    code: int
    body: JSON


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    """The decoded JSON body (POST/PUT/PATCH), None without one."""
    at: float = 0.0
    """time.monotonic() when the server received it."""

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")

    @property
    def is_list(self) -> bool:
        """A collection GET that is not a watch (the fake knows which paths are collections)."""
        return self.method == "GET" and not self.is_watch and _is_collection_path(self.path)


# ------------------------------------------------------------------------------------ resource types

FieldGetter = Callable[[Mapping[str, Any]], str]


def _dotted(path: str) -> FieldGetter:
    keys = path.split(".")

    def get(obj: Mapping[str, Any]) -> str:
        value: Any = obj
        for key in keys:
            if not isinstance(value, Mapping):
                return ""
            value = value.get(key)
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return get


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for core
    version: str
    plural: str
    kind: str
    fields: tuple[str, ...] = ()
    """Field selector keys besides metadata.name and metadata.namespace."""
    merge_keys: Mapping[str, str] = field(default_factory=dict)
    """Strategic merge: dotted list path -> merge key; other lists are replaced whole."""
    namespaced: bool = True
    """False for cluster-scoped kinds (nodes): stored under the namespace key "default", served without."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def key(self) -> tuple[str, str]:
        return self.api_version, self.plural

    def field_getter(self, name: str) -> FieldGetter | None:
        if name in ("metadata.name", "metadata.namespace") or name in self.fields:
            return _dotted(name)
        return None


PODS = ResourceType(
    "",
    "v1",
    "pods",
    "Pod",
    fields=("spec.nodeName", "status.phase", "status.podIP", "spec.restartPolicy", "spec.schedulerName"),
    merge_keys={
        "spec.containers": "name",
        "spec.initContainers": "name",
        "spec.volumes": "name",
        "status.conditions": "type",
        "status.containerStatuses": "name",
        "metadata.ownerReferences": "uid",
    },
)
SERVICES = ResourceType(
    "", "v1", "services", "Service", fields=("spec.clusterIP", "spec.type"), merge_keys={"spec.ports": "port"}
)
EVENTS = ResourceType(
    "",
    "v1",
    "events",
    "Event",
    fields=(
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
)
ENDPOINTSLICES = ResourceType(
    "discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", fields=("addressType",)
)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease")
NODE_LEASE_NAMESPACE = "kube-node-lease"
NODES = ResourceType(
    "", "v1", "nodes", "Node", fields=("spec.unschedulable",),
    merge_keys={"status.conditions": "type", "status.addresses": "type"}, namespaced=False,
)
CLUSTER_KEY = "default"
"""The namespace key cluster-scoped objects are stored under (never shown in their metadata)."""

RESOURCES: dict[str, ResourceType] = {
    rt.plural: rt for rt in (PODS, SERVICES, EVENTS, ENDPOINTSLICES, LEASES, NODES)
}


def _resource(resource: str | ResourceType) -> ResourceType:
    if isinstance(resource, ResourceType):
        return resource
    try:
        return RESOURCES[resource]
    except KeyError:
        raise ValueError(f"the fake API does not serve {resource!r}; it serves {sorted(RESOURCES)}") from None


def _plural_of(path: str) -> str:
    """The resource a request path names: /api/v1/pods, /apis/g/v/namespaces/ns/leases/x -> pods, leases."""
    parts = [p for p in path.split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        return rest[2]
    return rest[0] if rest else ""


def _is_collection_path(path: str) -> bool:
    for rt in RESOURCES.values():
        if path == f"{rt.prefix}/{rt.plural}":
            return True
        head = f"{rt.prefix}/namespaces/"
        if path.startswith(head) and path.endswith(f"/{rt.plural}") and path[len(head) :].count("/") == 1:
            return True
    return False


# --------------------------------------------------------------------------------------------- store


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _rv_of(obj: Mapping[str, Any]) -> str | None:
    value = (obj.get("metadata") or {}).get("resourceVersion")
    return str(value) if value not in (None, "") else None


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Change:
    """One entry of the watch history: the object after the change and (for updates/deletes) before."""

    rv: int
    resource: tuple[str, str]
    type: str  # ADDED, MODIFIED, DELETED
    obj: JSON
    old: JSON | None
    at: float = field(default_factory=time.monotonic)
    """When it was committed (monotonic): a lagging watch cache sends it only `lag` seconds later."""


class Store:
    """Every object of every served resource, a global resourceVersion and a bounded change history.

    Objects are ordered by (namespace, name) so pages are stable between requests. `history_limit`
    changes are retained; a watch (or continue token) from before the oldest retained change gets 410.
    """

    def __init__(self, *, history_limit: int = 1000) -> None:
        self._cond = threading.Condition()
        self._objects: dict[tuple[str, str], dict[tuple[str, str], JSON]] = {
            rt.key: {} for rt in RESOURCES.values()
        }
        self._rv = 1
        self._history: deque[Change] = deque()
        self.history_limit = history_limit
        self._compacted = 0  # a watch from an rv below this cannot be served

    # reading

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    @property
    def compacted_rv(self) -> int:
        """The oldest resourceVersion a watch may still start from."""
        with self._cond:
            return self._compacted

    def get(self, resource: str | ResourceType, namespace: str, name: str) -> JSON | None:
        rt = _resource(resource)
        with self._cond:
            obj = self._objects[rt.key].get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def snapshot(self, resource: str | ResourceType = PODS) -> tuple[int, list[JSON]]:
        """Current resourceVersion and all objects of one resource, sorted by key."""
        rt = _resource(resource)
        with self._cond:
            objects = self._objects[rt.key]
            return self._rv, [copy.deepcopy(objects[k]) for k in sorted(objects)]

    def snapshot_at(self, resource: str | ResourceType, rv: int) -> list[JSON]:
        """The objects as they were at `rv`, rebuilt from the history (ValueError if it is compacted)."""
        rt = _resource(resource)
        with self._cond:
            if rv < self._compacted:
                raise ValueError(f"resourceVersion {rv} is older than the history ({self._compacted})")
            objects = {k: copy.deepcopy(v) for k, v in self._objects[rt.key].items()}
            for change in reversed(self._history):
                if change.rv <= rv:
                    break
                if change.resource != rt.key:
                    continue
                if change.old is None:
                    objects.pop(_key(change.obj), None)
                else:
                    objects[_key(change.old)] = copy.deepcopy(change.old)
            return [objects[k] for k in sorted(objects)]

    def __len__(self) -> int:
        """Number of pods (what the first tests counted)."""
        with self._cond:
            return len(self._objects[PODS.key])

    def changes_after(
        self, resource: tuple[str, str], rv: int, *, wait: float = 0.0, until: float | None = None,
        own_progress_only: bool = False,
    ) -> tuple[list[Change], int, bool]:
        """(changes of `resource` after `rv`, the rv they bring the caller to, expired?).

        `until`: only changes committed by then (monotonic), as a watch cache lagging behind the store
        knows them; the rv it reaches is the newest it knows. `own_progress_only`: the rv reached is the
        newest change of `resource` itself (a watch cache that hears of no other progress), not the
        store's."""
        with self._cond:
            if rv < self._compacted:
                return [], rv, True
            if self._rv <= rv and wait > 0:
                self._cond.wait(wait)
            if rv < self._compacted:
                return [], rv, True
            known = [c for c in self._history if c.rv > rv and (until is None or c.at <= until)]
            changes = [c for c in known if c.resource == resource]
            if until is None and not own_progress_only:
                position = max(rv, self._rv)
            else:
                position = max([rv, *(c.rv for c in (changes if own_progress_only else known))])
            return [copy.deepcopy(c) for c in changes], position, False

    # writing (test helpers and HTTP handlers)

    def put(
        self, obj: Mapping[str, Any], resource: str | ResourceType = PODS, *, assign: bool = True
    ) -> JSON:
        """Create or replace without checks (a test's way of saying "the cluster now has this").

        `assign=False` stores the object as given (no uid/creationTimestamp), for malformed-object tests."""
        rt = _resource(resource)
        stored = self._prepare(rt, obj, assign=assign)
        with self._cond:
            old = self._objects[rt.key].get(_key(stored))
            if old is not None and assign:
                meta = stored["metadata"]
                meta.setdefault("uid", old["metadata"].get("uid"))
                meta.setdefault("creationTimestamp", old["metadata"].get("creationTimestamp"))
            return self._commit(rt, stored, old)

    def create(self, resource: str | ResourceType, obj: Mapping[str, Any]) -> JSON:
        rt = _resource(resource)
        stored = self._prepare(rt, obj)
        with self._cond:
            if _key(stored) in self._objects[rt.key]:
                raise ApiFailure(
                    409, f'{rt.plural} "{_key(stored)[1]}" already exists', reason="AlreadyExists"
                )
            return self._commit(rt, stored, None)

    def update(self, resource: str | ResourceType, obj: Mapping[str, Any]) -> JSON:
        """PUT: 404 when missing, 409 when the body's resourceVersion is set and is not the current one."""
        rt = _resource(resource)
        stored = self._prepare(rt, obj, generate=False)
        with self._cond:
            old = self._current(rt, *_key(stored))
            sent = _rv_of(obj)
            if sent is not None and sent != old["metadata"].get("resourceVersion"):
                raise _conflict(rt, _key(stored)[1])
            meta = stored["metadata"]
            meta["uid"] = old["metadata"].get("uid")
            meta["creationTimestamp"] = old["metadata"].get("creationTimestamp")
            return self._commit(rt, stored, old)

    def patch(
        self, resource: str | ResourceType, namespace: str, name: str, patch: Any, *, content_type: str,
        status_only: bool = False,
    ) -> JSON:
        """`status_only`: the status subresource; only `status` of the patched object is kept."""
        rt = _resource(resource)
        with self._cond:
            old = self._current(rt, namespace, name)
            if content_type == "application/json-patch+json":
                if not isinstance(patch, list):
                    raise ApiFailure(400, "a JSON patch is a list of operations")
                new = json_patch(old, patch)
                sent = None
            else:
                if not isinstance(patch, Mapping):
                    raise ApiFailure(400, "a merge patch is a JSON object")
                sent = _rv_of(patch)
                if content_type == "application/strategic-merge-patch+json":
                    new = strategic_merge(old, patch, rt.merge_keys)
                elif content_type in ("application/merge-patch+json", "application/apply-patch+yaml"):
                    new = merge_patch(old, patch)
                else:
                    raise ApiFailure(415, f"the fake API does not support {content_type!r} patches")
            if sent is not None and sent != old["metadata"].get("resourceVersion"):
                raise _conflict(rt, name)
            if not isinstance(new, dict):
                raise ApiFailure(422, "the patched object is not an object")
            if status_only:
                new = {**copy.deepcopy(old), "status": new.get("status", {})}
            meta = new.setdefault("metadata", {})
            meta["name"] = name
            if rt.namespaced:
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            meta["uid"] = old["metadata"].get("uid")
            meta["creationTimestamp"] = old["metadata"].get("creationTimestamp")
            new.setdefault("apiVersion", rt.api_version)
            new.setdefault("kind", rt.kind)
            return self._commit(rt, new, old)

    def delete(self, namespace: str, name: str, resource: str | ResourceType = PODS) -> JSON | None:
        rt = _resource(resource)
        with self._cond:
            removed = self._objects[rt.key].pop((namespace, name), None)
            if removed is None:
                return None
            self._rv += 1
            gone = copy.deepcopy(removed)
            gone["metadata"]["resourceVersion"] = str(self._rv)
            self._record(Change(self._rv, rt.key, "DELETED", gone, removed))
            return copy.deepcopy(gone)

    def restore(self, rv: int) -> None:
        """Every object as it was at `rv`, and the resourceVersion back to `rv` (an etcd restored from a
        snapshot without a revision bump): the next writes reuse versions already handed out."""
        with self._cond:
            restored = {rt.key: {_key(o): o for o in self.snapshot_at(rt, rv)} for rt in RESOURCES.values()}
            self._objects = restored
            self._history = deque(c for c in self._history if c.rv <= rv)
            self._rv = rv
            self._cond.notify_all()

    def compact(self) -> int:
        """Forget the whole history now: any watch or continue from an earlier rv gets 410."""
        with self._cond:
            self._history.clear()
            self._compacted = self._rv
            self._cond.notify_all()
            return self._rv

    # internals

    def _prepare(
        self, rt: ResourceType, obj: Mapping[str, Any], *, generate: bool = True, assign: bool = True
    ) -> JSON:
        stored: JSON = json.loads(json.dumps(obj))
        stored.setdefault("apiVersion", rt.api_version)
        stored.setdefault("kind", rt.kind)
        meta = stored.setdefault("metadata", {})
        if not meta.get("name") and generate and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        if not meta.get("name"):
            raise ApiFailure(422, f"a {rt.kind} needs metadata.name or generateName", reason="Invalid")
        if rt.namespaced:
            meta.setdefault("namespace", "default")
        else:
            meta.pop("namespace", None)
        if assign:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now_rfc3339())
        return stored

    def _current(self, rt: ResourceType, namespace: str, name: str) -> JSON:
        old = self._objects[rt.key].get((namespace, name))
        if old is None:
            raise ApiFailure(404, f'{rt.plural} "{name}" not found', details={"name": name, "kind": rt.plural})
        return old

    def _commit(self, rt: ResourceType, stored: JSON, old: JSON | None) -> JSON:
        self._rv += 1
        stored["metadata"]["resourceVersion"] = str(self._rv)
        self._objects[rt.key][_key(stored)] = stored
        self._record(Change(self._rv, rt.key, "ADDED" if old is None else "MODIFIED", stored, old))
        return copy.deepcopy(stored)

    def _record(self, change: Change) -> None:
        self._history.append(copy.deepcopy(change))
        while len(self._history) > self.history_limit:
            dropped = self._history.popleft()
            self._compacted = dropped.rv
        self._cond.notify_all()


def _conflict(rt: ResourceType, name: str) -> ApiFailure:
    return ApiFailure(
        409,
        f'Operation cannot be fulfilled on {rt.plural} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        reason="Conflict",
    )


# ---------------------------------------------------------------------------------------- patching


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: JSON = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(target: Any, patch: Any, merge_keys: Mapping[str, str], path: str = "") -> Any:
    """The part of strategic merge lightkube's callers use: maps merge, lists with a known merge key
    merge by that key (`$patch: delete` removes an entry), other lists are replaced whole."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result: JSON = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        sub = f"{path}.{key}" if path else key
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and sub in merge_keys and isinstance(result.get(key), list):
            result[key] = _merge_list(result[key], value, merge_keys[sub], merge_keys, sub)
        else:
            result[key] = strategic_merge(result.get(key), value, merge_keys, sub)
    return result


def _merge_list(
    current: list[Any], patch: list[Any], merge_key: str, merge_keys: Mapping[str, str], path: str
) -> list[Any]:
    merged = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, Mapping) or merge_key not in item:
            merged.append(copy.deepcopy(item))
            continue
        index = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, Mapping) and old.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del merged[index]
        elif index is None:
            merged.append(copy.deepcopy(dict(item)))
        else:
            merged[index] = strategic_merge(merged[index], item, merge_keys, path)
    return merged


def json_patch(target: JSON, operations: Sequence[Any]) -> JSON:
    """RFC 6902 add/remove/replace/test (enough for the resourceVersion-guarded updates clients send)."""
    doc: Any = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, Mapping) or "path" not in op:
            raise ApiFailure(400, "a JSON patch operation needs op and path")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).split("/")[1:]]
        if not parts:
            raise ApiFailure(422, "the fake API does not patch the root")
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1]
        kind = op.get("op")
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise ApiFailure(422, f"test operation failed at {op['path']}", reason="Invalid")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(index, copy.deepcopy(op.get("value")))
                else:
                    parent[index] = copy.deepcopy(op.get("value"))
            else:
                parent[last] = copy.deepcopy(op.get("value"))
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                parent.pop(last, None)
        else:
            raise ApiFailure(422, f"the fake API does not support JSON patch op {kind!r}")
    return cast(JSON, doc)


# ------------------------------------------------------------------------------------------ selectors

Predicate = Callable[[Mapping[str, Any]], bool]
_FIELD_REQUIREMENT = re.compile(r"^\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*$")
_LABEL_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\((.*)\)\s*$")
_LABEL_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


def _split_selector(selector: str) -> Iterator[str]:
    """Split on commas that are not inside `in (...)` sets."""
    depth, start = 0, 0
    for i, char in enumerate(selector):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            yield selector[start:i]
            start = i + 1
    yield selector[start:]


def field_selector(selector: str, resource: ResourceType = PODS) -> Predicate:
    checks: list[Predicate] = []
    for part in selector.split(","):
        if not part.strip():
            continue
        match = _FIELD_REQUIREMENT.match(part)
        if match is None:
            raise ApiFailure(400, f"unable to parse requirement in fieldSelector: {part!r}")
        key, op, value = match.groups()
        getter = resource.field_getter(key)
        if getter is None:
            raise ApiFailure(400, f'field label not supported: "{key}"')
        checks.append(_compare(getter, op, value))
    return lambda obj: all(check(obj) for check in checks)


def label_selector(selector: str) -> Predicate:
    """k=v, k==v, k!=v, k, !k, k in (a,b), k notin (a,b)."""
    checks: list[Predicate] = []
    for part in _split_selector(selector):
        if not part.strip():
            continue
        if (match := _LABEL_SET.match(part)) is not None:
            key, op, values = match.groups()
            allowed = {v.strip() for v in values.split(",") if v.strip()}
            checks.append(_label_in(key, allowed, negate=op == "notin"))
        elif (match := _FIELD_REQUIREMENT.match(part)) is not None:
            key, op, value = match.groups()
            checks.append(_label_equals(key, value, negate=op == "!="))
        elif (match := _LABEL_EXISTS.match(part)) is not None:
            bang, key = match.groups()
            checks.append(_label_exists(key, negate=bang == "!"))
        else:
            raise ApiFailure(400, f"unable to parse requirement in labelSelector: {part!r}")
    return lambda obj: all(check(obj) for check in checks)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _label_equals(key: str, value: str, *, negate: bool) -> Predicate:
    def check(obj: Mapping[str, Any]) -> bool:
        labels = _labels(obj)
        equal = key in labels and str(labels[key]) == value
        return not equal if negate else equal

    return check


def _label_in(key: str, allowed: set[str], *, negate: bool) -> Predicate:
    def check(obj: Mapping[str, Any]) -> bool:
        labels = _labels(obj)
        if negate:
            return key not in labels or str(labels[key]) not in allowed
        return key in labels and str(labels[key]) in allowed

    return check


def _label_exists(key: str, *, negate: bool) -> Predicate:
    return lambda obj: (key in _labels(obj)) != negate


def _compare(getter: FieldGetter, op: str, value: str) -> Predicate:
    if op == "!=":
        return lambda obj: getter(obj) != value
    return lambda obj: getter(obj) == value


# ----------------------------------------------------------------------------------------- pagination


def encode_continue(resource_version: int, after: tuple[str, str]) -> str:
    raw = json.dumps({"rv": resource_version, "after": list(after)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        after = data["after"]
        return int(data["rv"]), (str(after[0]), str(after[1]))
    except (binascii.Error, ValueError, KeyError, TypeError, IndexError) as e:
        raise ApiFailure(400, "continue key is not valid") from e


def _limit(value: str | None) -> int:
    if value is None or value == "":
        return 0
    try:
        limit = int(value)
    except ValueError as e:
        raise ApiFailure(400, f"limit {value!r} is not an integer") from e
    if limit < 0:
        raise ApiFailure(400, "limit must not be negative")
    return limit


def _parse_rv(value: str | None) -> int | None:
    """None for "unset" and "0" (any version); the number otherwise."""
    if value is None or value in ("", "0"):
        return None
    try:
        return int(value)
    except ValueError as e:
        raise ApiFailure(400, f"resourceVersion {value!r} is not valid") from e


# --------------------------------------------------------------------------------------------- router


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    params: Mapping[str, str]
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: Any


@dataclass(frozen=True)
class WatchStream:
    """A handler's answer to `?watch=true`: the server thread then streams events."""

    resource: ResourceType
    namespace: str | None
    matches: Predicate
    start_rv: int | None  # None: send the current objects as ADDED first
    bookmarks: bool
    timeout_seconds: float | None


Handler = Callable[[Request], "Reply | WatchStream"]


class Router:
    def __init__(self) -> None:
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        """`pattern` uses {name} for one path segment."""
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern)
        self._routes.append((method, re.compile(f"^{regex}$"), handler))

    def dispatch(self, request: Request) -> Reply | WatchStream:
        path_matched = False
        for route_method, regex, handler in self._routes:
            match = regex.match(request.path)
            if match is None:
                continue
            path_matched = True
            if route_method == request.method:
                params = {k: unquote(v) for k, v in match.groupdict().items()}
                return handler(
                    Request(
                        request.method, request.path, params, request.query, request.headers, request.body
                    )
                )
        if path_matched:
            raise ApiFailure(405, f"method {request.method} is not supported on {request.path}")
        raise ApiFailure(404, "the server could not find the requested resource")


@dataclass
class StaleList:
    resource: str | None
    rv: int
    objects: list[JSON] | None
    paged: bool = False
    """Paged like any list, its continue token resuming at the store's current resourceVersion."""


class ResourceAPI:
    """list / watch / get / create / update / patch / delete for one resource type."""

    def __init__(self, api: FakeKubeAPI, resource: ResourceType) -> None:
        self.api = api
        self.store = api.store
        self.rt = resource

    def register(self, router: Router) -> None:
        base = f"{self.rt.prefix}"
        collection = f"{base}/namespaces/{{namespace}}/{self.rt.plural}"
        router.add("GET", f"{base}/{self.rt.plural}", self.list_or_watch)
        router.add("GET", collection, self.list_or_watch)
        router.add("POST", collection, self.create)
        item = f"{collection}/{{name}}"
        router.add("GET", item, self.get)
        router.add("PUT", item, self.update)
        router.add("PATCH", item, self.patch)
        router.add("DELETE", item, self.delete)

    def list_or_watch(self, req: Request) -> Reply | WatchStream:
        namespace = req.params.get("namespace")
        fields = field_selector(req.query.get("fieldSelector", ""), self.rt)
        labels = label_selector(req.query.get("labelSelector", ""))

        def matches(obj: Mapping[str, Any]) -> bool:
            return (namespace is None or _key(obj)[0] == namespace) and fields(obj) and labels(obj)

        if req.query.get("watch") in ("true", "1"):
            timeout = req.query.get("timeoutSeconds")
            return WatchStream(
                resource=self.rt,
                namespace=namespace,
                matches=matches,
                start_rv=_parse_rv(req.query.get("resourceVersion")),
                bookmarks=req.query.get("allowWatchBookmarks") in ("true", "1"),
                timeout_seconds=float(timeout) if timeout else None,
            )
        return self._list(req, matches)

    def _list(self, req: Request, matches: Predicate) -> Reply:
        limit = _limit(req.query.get("limit"))
        stale = self.api._take_stale_list(self.rt)
        after: tuple[str, str] | None = None
        resume_rv: int | None = None
        if stale is not None:
            rv = stale.rv
            objects = stale.objects if stale.objects is not None else self.store.snapshot_at(self.rt, rv)
            if stale.paged:
                resume_rv = self.store.snapshot(self.rt)[0]
            else:
                limit = 0  # a stale answer comes in one page
        elif req.query.get("continue"):
            rv, after = decode_continue(req.query["continue"])
            if rv < self.store.compacted_rv:
                raise ApiFailure(410, "The provided continue parameter is too old", reason="Expired")
            objects = self.store.snapshot(self.rt)[1]
        else:
            rv, objects = self.store.snapshot(self.rt)
            asked = _parse_rv(req.query.get("resourceVersion"))
            exact = req.query.get("resourceVersionMatch") == "Exact"
            if asked is not None and asked < self.store.compacted_rv and (exact or asked != rv):
                raise ApiFailure(410, f"too old resource version: {asked} ({self.store.compacted_rv})")
            if asked is not None and exact and asked != rv:
                objects, rv = self.store.snapshot_at(self.rt, asked), asked
        selected = [obj for obj in objects if (after is None or _key(obj) > after) and matches(obj)]
        metadata: JSON = {"resourceVersion": str(rv)}
        if limit and len(selected) > limit:
            selected = selected[:limit]
            metadata["continue"] = encode_continue(rv if resume_rv is None else resume_rv, _key(selected[-1]))
        items = [{k: v for k, v in obj.items() if k not in ("kind", "apiVersion")} for obj in selected]
        return Reply(
            200,
            {
                "kind": f"{self.rt.kind}List",
                "apiVersion": self.rt.api_version,
                "metadata": metadata,
                "items": items,
            },
        )

    def get(self, req: Request) -> Reply:
        if self.rt is LEASES and req.params["namespace"] == NODE_LEASE_NAMESPACE:
            self.api._kubelet_renews(req.params["name"])
        obj = self.store.get(self.rt, req.params["namespace"], req.params["name"])
        if obj is None:
            raise ApiFailure(404, f'{self.rt.plural} "{req.params["name"]}" not found',
                             details={"name": req.params["name"], "kind": self.rt.plural})
        return Reply(200, obj)

    def create(self, req: Request) -> Reply:
        body = self._body(req)
        meta = body.setdefault("metadata", {})
        if meta.get("namespace") not in (None, req.params["namespace"]):
            raise ApiFailure(400, "the namespace of the object does not match the namespace on the request")
        meta["namespace"] = req.params["namespace"]
        meta.pop("resourceVersion", None)
        return Reply(201, self.store.create(self.rt, body))

    def update(self, req: Request) -> Reply:
        body = self._body(req)
        meta = body.setdefault("metadata", {})
        if meta.get("name") not in (None, req.params["name"]):
            raise ApiFailure(400, "the name of the object does not match the name on the URL")
        meta["name"], meta["namespace"] = req.params["name"], req.params["namespace"]
        return Reply(200, self.store.update(self.rt, body))

    def patch(self, req: Request) -> Reply:
        content_type = req.headers.get("content-type", "").split(";")[0].strip()
        if req.body is None:
            raise ApiFailure(400, "a patch needs a body")
        return Reply(
            200,
            self.store.patch(
                self.rt, req.params["namespace"], req.params["name"], req.body, content_type=content_type
            ),
        )

    def delete(self, req: Request) -> Reply:
        removed = self.store.delete(req.params["namespace"], req.params["name"], self.rt)
        if removed is None:
            raise ApiFailure(404, f'{self.rt.plural} "{req.params["name"]}" not found',
                             details={"name": req.params["name"], "kind": self.rt.plural})
        return Reply(200, removed)

    @staticmethod
    def _body(req: Request) -> JSON:
        if not isinstance(req.body, dict):
            raise ApiFailure(400, "the request body must be a JSON object")
        return cast(JSON, copy.deepcopy(req.body))


class ClusterResourceAPI(ResourceAPI):
    """list / watch / get / patch (and the status subresource) for a cluster-scoped type (nodes)."""

    def register(self, router: Router) -> None:
        base = f"{self.rt.prefix}/{self.rt.plural}"
        router.add("GET", base, self.list_or_watch)
        router.add("GET", f"{base}/{{name}}", self.get)
        router.add("PATCH", f"{base}/{{name}}", self.patch)
        router.add("GET", f"{base}/{{name}}/status", self.get)
        router.add("PATCH", f"{base}/{{name}}/status", self.patch_status)

    def get(self, req: Request) -> Reply:
        return super().get(_in_cluster_key(req))

    def patch(self, req: Request) -> Reply:
        return super().patch(_in_cluster_key(req))

    def patch_status(self, req: Request) -> Reply:
        content_type = req.headers.get("content-type", "").split(";")[0].strip()
        if req.body is None:
            raise ApiFailure(400, "a patch needs a body")
        return Reply(200, self.store.patch(self.rt, CLUSTER_KEY, req.params["name"], req.body,
                                           content_type=content_type, status_only=True))


def _in_cluster_key(req: Request) -> Request:
    return dataclasses.replace(req, params={**req.params, "namespace": CLUSTER_KEY})


# --------------------------------------------------------------------------------------------- server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    api: FakeKubeAPI


class _StreamClosed(Exception):
    pass


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        api = cast(_Server, self.server).api
        headers = {k.lower(): v for k, v in self.headers.items()}
        reply = api.handle(method, self.path, headers, raw)
        if isinstance(reply, WatchStream):
            api._serve_watch(self, reply)
            return
        self._send_json(reply.code, reply.body)

    def _send_json(self, code: int, payload: JSON) -> None:
        body = json.dumps(payload).encode()
        try:
            self.send_response(code)
            # lightkube turns an error into ApiError only when the content type is exactly this.
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test); nothing to tell it

    # streaming (watch): chunked transfer encoding, one JSON event per line

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def send_event(self, event: JSON) -> int:
        data = json.dumps(event).encode() + b"\n"
        try:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        except OSError as e:
            raise _StreamClosed from e
        return len(data)

    def end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def abort_stream(self) -> None:
        """Cut the connection mid-stream, like a restarted API server or a proxy timing out."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class _FailureRule:
    status: int
    count: int
    skip: int
    path_prefix: str | None

    def applies(self, path: str) -> bool:
        return self.path_prefix is None or path.startswith(self.path_prefix)


class FakeKubeAPI:
    """Use as a context manager; the server listens on 127.0.0.1 on a free port until exit.

    `bookmark_interval`: seconds between BOOKMARK events on watches that asked for them.
    `history_limit`: changes retained for watches; older resourceVersions get 410 Gone.
    `progress_notify`: bookmarks carry the store's resourceVersion (the watch cache hears of every change,
    as with etcd progress notifications); False: only the newest change of the watched resource (a watch
    cache on a cluster where nothing it watches changes does not advance, whatever else is written).
    """

    def __init__(
        self,
        *,
        token: str = "fake-token-not-secret",  # noqa: S107
        require_auth: bool = True,
        bookmark_interval: float = 1.0,
        history_limit: int = 1000,
        kubelets: Iterable[str] = (),
        progress_notify: bool = True,
    ) -> None:
        self.token = token
        self.require_auth = require_auth
        self.bookmark_interval = bookmark_interval
        self.progress_notify = progress_notify
        self._watch_lag = 0.0
        self.store = Store(history_limit=history_limit)
        self.router = Router()
        for rt in RESOURCES.values():
            (ResourceAPI if rt.namespaced else ClusterResourceAPI)(self, rt).register(self.router)
        self.requests: list[RecordedRequest] = []
        self.bytes_sent = 0
        self.bytes_by_resource: Counter[str] = Counter()
        """Response bytes by resource (plural), watch streams included."""
        self._lock = threading.Lock()
        self._failures: list[_FailureRule] = []
        self._delay = 0.0
        self._stale: list[StaleList] = []
        self._kubelets: set[str] = set(kubelets)
        self._drop_generation = 0
        self._expire_generation = 0
        self._stall_until = 0.0
        self._stall_generation = 0
        self._stall_seen: dict[int, int] = {}
        """Open stream id -> the stall generation it has observed (so stall_watches can wait for it)."""
        self._open_watches = 0
        self._closing = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # lifecycle

    def start(self) -> FakeKubeAPI:
        server = _Server(("127.0.0.1", 0), _RequestHandler)
        server.api = self
        self._server = server
        self._closing.clear()
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name="fake-kube-api", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeKubeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake API is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # objects (tests)

    def add(self, resource: str, obj: Mapping[str, Any]) -> JSON:
        """Create or replace, no checks; uid/creationTimestamp are assigned when missing."""
        return self.store.put(obj, resource)

    def get(self, resource: str, namespace: str, name: str) -> JSON | None:
        return self.store.get(resource, namespace, name)

    def update(self, resource: str, namespace: str, name: str, patch: Mapping[str, Any]) -> JSON:
        """A JSON merge patch from the test (bumps resourceVersion, emits MODIFIED)."""
        return self.store.patch(resource, namespace, name, patch, content_type="application/merge-patch+json")

    def delete(self, resource: str, namespace: str, name: str) -> JSON | None:
        return self.store.delete(namespace, name, resource)

    def objects(self, resource: str, namespace: str | None = None) -> list[JSON]:
        return [o for o in self.store.snapshot(resource)[1] if namespace is None or _key(o)[0] == namespace]

    def add_pod(self, obj: Mapping[str, Any]) -> JSON:
        """Create or replace a pod exactly as given (nothing assigned: tests of malformed pods use it)."""
        return self.store.put(obj, PODS, assign=False)

    def delete_pod(self, namespace: str, name: str) -> JSON | None:
        return self.store.delete(namespace, name, PODS)

    @property
    def resource_version(self) -> int:
        return self.store.resource_version

    # node leases (what a kubelet writes)

    def renew_node_lease(self, node: str, *, at: datetime | None = None) -> JSON:
        """The kubelet of `node` renews its Lease in kube-node-lease (renewTime `at`, default now)."""
        when = (at or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return self.store.put({
            "metadata": {"name": node, "namespace": NODE_LEASE_NAMESPACE},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": when},
        }, LEASES)

    def start_kubelet(self, node: str) -> None:
        """From now on the Lease of `node` is renewed right before every GET of it, as a kubelet renewing
        every 10 s would have done moments before (`kubelets=` in the constructor does the same)."""
        with self._lock:
            self._kubelets.add(node)

    def stop_kubelet(self, node: str) -> None:
        """The Lease of `node` is no longer renewed (a stopped kubelet, or a node gone)."""
        with self._lock:
            self._kubelets.discard(node)

    def _kubelet_renews(self, node: str) -> None:
        with self._lock:
            running = node in self._kubelets
        if running:
            self.renew_node_lease(node)

    # faults

    def fail_next(
        self, status: int, count: int = 1, *, after: int = 0, path_prefix: str | None = None
    ) -> None:
        """The next `count` requests (whose path starts with `path_prefix`, if given) get a Status with
        this code, after `after` such requests have passed. Rules queue up in call order."""
        with self._lock:
            self._failures.append(_FailureRule(status, count, after, path_prefix))

    def delay(self, seconds: float) -> None:
        """Every following request waits this long before its response (0 turns it off)."""
        with self._lock:
            self._delay = seconds

    def restore_store(self, rv: int) -> None:
        """The cluster's store restored to `rv` (`Store.restore`), and every watch cut (the API servers
        restarted on it)."""
        self.store.restore(rv)
        self.drop_watches()

    def drop_watches(self) -> None:
        """Cut every open watch connection now (no clean end of stream)."""
        with self._lock:
            self._drop_generation += 1

    def expire_watches(self) -> None:
        """Send every open watch an ERROR event with a 410 Status, then end it (as after compaction)."""
        with self._lock:
            self._expire_generation += 1

    def lag_watches(self, seconds: float) -> None:
        """From now on watch streams (open and new) send each change `seconds` after it was committed, and
        their bookmarks carry the resourceVersion the lagging cache has reached: a watch that lags behind
        the store but still advances. Lists and GETs stay current (quorum reads). 0 turns it off."""
        with self._lock:
            self._watch_lag = seconds

    def stall_watches(self, seconds: float, *, settle: float = 30.0) -> None:
        """Keep watch streams (open and new) open but send nothing, bookmarks included, for `seconds`.

        Returns once every open stream has seen the stall (at most `settle` seconds), so a change made
        after this call is never sent on them while it lasts, however loaded the machine is."""
        with self._lock:
            self._stall_until = time.monotonic() + seconds
            self._stall_generation += 1
            generation = self._stall_generation
        if seconds > 0:
            self.wait_for(lambda: all(g >= generation for g in self._stall_seen_now()), timeout=settle)

    def _stall_seen_now(self) -> list[int]:
        with self._lock:
            return list(self._stall_seen.values())

    def compact(self) -> int:
        """Drop the change history: watches/lists/continues from an older resourceVersion get 410."""
        return self.store.compact()

    def serve_stale_list(
        self, objects_or_rv: int | Iterable[Mapping[str, Any]], *, resource: str | None = None,
        resource_version: int | None = None, paged: bool = False,
    ) -> None:
        """The next list (of `resource`, or of any resource) answers with an older snapshot: the state at
        that resourceVersion (rebuilt from the history), or exactly these objects with
        `resource_version` (default: the highest resourceVersion among them, or 1). `paged`: that answer is
        the first page only, and its continue token resumes at the current resourceVersion (a cache that
        answered the first page, the store the rest: pages of one list at two resourceVersions)."""
        if isinstance(objects_or_rv, int):
            stale = StaleList(resource, objects_or_rv, None, paged)
        else:
            objects = [json.loads(json.dumps(o)) for o in objects_or_rv]
            rvs = [int(rv) for o in objects if (rv := _rv_of(o)) is not None and rv.isdigit()]
            stale = StaleList(resource, resource_version or max(rvs, default=1), objects, paged)
        with self._lock:
            self._stale.append(stale)

    @property
    def open_watches(self) -> int:
        with self._lock:
            return self._open_watches

    # requests (tests)

    def clear_requests(self) -> None:
        with self._lock:
            self.requests.clear()
            self.bytes_sent = 0
            self.bytes_by_resource.clear()

    def requests_to(self, path: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def recorded(
        self, *, method: str | None = None, path_prefix: str | None = None, watch: bool | None = None
    ) -> list[RecordedRequest]:
        with self._lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method)
                and (path_prefix is None or r.path.startswith(path_prefix))
                and (watch is None or r.is_watch == watch)
            ]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Poll `predicate` until it holds or `timeout` passes (tests of background threads)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.01)
        return predicate()

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for this server: plain http (lightkube accepts it), a dummy bearer token."""
        return write_kubeconfig(path, self.url, token=self.token)

    # request path (server threads)

    def handle(
        self, method: str, raw_path: str, headers: Mapping[str, str], raw_body: bytes = b""
    ) -> Reply | WatchStream:
        parts = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        body: Any = None
        body_error: str | None = None
        if raw_body:
            try:
                body = json.loads(raw_body)
            except ValueError:
                try:
                    body = yaml.safe_load(raw_body)  # apply patches may be YAML
                except yaml.YAMLError:
                    body_error = "the request body is not JSON"
        with self._lock:
            self.requests.append(RecordedRequest(method, parts.path, query, dict(headers), body, time.monotonic()))
            failure = self._take_failure(parts.path)
            delay = self._delay
        if delay > 0:
            self._closing.wait(delay)
        if failure is not None:
            return self._count(Reply(failure, status_object(failure, f"injected failure {failure}")), parts.path)
        if self.require_auth and headers.get("authorization") != f"Bearer {self.token}":
            return self._count(Reply(401, status_object(401, "Unauthorized")), parts.path)
        try:
            if body_error is not None:
                raise ApiFailure(400, body_error)
            result = self.router.dispatch(Request(method, parts.path, {}, query, headers, body))
        except ApiFailure as e:
            result = Reply(e.code, status_object(e.code, e.message, reason=e.reason, details=e.details))
        return self._count(result, parts.path) if isinstance(result, Reply) else result

    def _count(self, reply: Reply, path: str) -> Reply:
        size = len(json.dumps(reply.body))
        with self._lock:
            self.bytes_sent += size
            self.bytes_by_resource[_plural_of(path)] += size
        return reply

    def _take_failure(self, path: str) -> int | None:
        for rule in self._failures:
            if not rule.applies(path):
                continue
            if rule.skip > 0:
                rule.skip -= 1
                return None
            rule.count -= 1
            if rule.count <= 0:
                self._failures.remove(rule)
            return rule.status
        return None

    def _take_stale_list(self, rt: ResourceType) -> StaleList | None:
        with self._lock:
            for stale in self._stale:
                if stale.resource is None or stale.resource == rt.plural:
                    self._stale.remove(stale)
                    return stale
        return None

    def _serve_watch(self, handler: _RequestHandler, watch: WatchStream) -> None:
        with self._lock:
            drop_generation, expire_generation = self._drop_generation, self._expire_generation
            self._open_watches += 1
            self._stall_seen[id(handler)] = self._stall_generation
        try:
            handler.start_stream()
            self._stream(handler, watch, drop_generation, expire_generation)
        except _StreamClosed:
            handler.close_connection = True
        except OSError:
            handler.close_connection = True
        finally:
            with self._lock:
                self._open_watches -= 1
                self._stall_seen.pop(id(handler), None)

    def _stream(
        self, handler: _RequestHandler, watch: WatchStream, drop_generation: int, expire_generation: int
    ) -> None:
        rt = watch.resource
        started = time.monotonic()
        deadline = started + watch.timeout_seconds if watch.timeout_seconds else None
        last_bookmark = started

        def send(event_type: str, obj: JSON) -> None:
            sent = handler.send_event({"type": event_type, "object": obj})
            with self._lock:
                self.bytes_sent += sent
                self.bytes_by_resource[rt.plural] += sent

        def gone(message: str) -> None:
            send("ERROR", status_object(410, message, reason="Expired"))
            handler.end_stream()

        if watch.start_rv is None:
            position, objects = self.store.snapshot(rt)
            for obj in objects:
                if watch.matches(obj):
                    send("ADDED", obj)
        else:
            position = watch.start_rv
            if position < self.store.compacted_rv:
                gone(f"too old resource version: {position} ({self.store.compacted_rv})")
                return
        while True:
            with self._lock:
                dropped = self._drop_generation != drop_generation
                expired = self._expire_generation != expire_generation
                stalled = time.monotonic() < self._stall_until
                # Between two passes of this loop nothing is sent: the stall is in force from here on.
                self._stall_seen[id(handler)] = self._stall_generation
            if self._closing.is_set() or dropped:
                handler.abort_stream()
                return
            if expired:
                gone("the watch was expired by the test")
                return
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                handler.end_stream()
                return
            if stalled:
                time.sleep(0.01)
                continue
            with self._lock:
                lag = self._watch_lag
            changes, position, too_old = self.store.changes_after(
                rt.key, position, wait=0.02, until=time.monotonic() - lag if lag > 0 else None,
                own_progress_only=not self.progress_notify)
            if not changes and (lag > 0 or not self.progress_notify):
                time.sleep(0.01)  # what the cache knows may trail the store: do not spin on it
            if too_old:
                gone(f"too old resource version: {position} ({self.store.compacted_rv})")
                return
            for change in changes:
                event = _watch_event(change, watch.matches)
                if event is not None:
                    send(*event)
            if watch.bookmarks and time.monotonic() - last_bookmark >= self.bookmark_interval:
                send(
                    "BOOKMARK",
                    {
                        "kind": rt.kind,
                        "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": str(position)},
                    },
                )
                last_bookmark = time.monotonic()


def _watch_event(change: Change, matches: Predicate) -> tuple[str, JSON] | None:
    """What a watcher with this selection sees: entering the selection is ADDED, leaving it DELETED."""
    now = matches(change.obj) if change.type != "DELETED" else False
    before = change.old is not None and matches(change.old)
    if change.type == "DELETED":
        return ("DELETED", change.obj) if before else None
    if now and not before:
        return "ADDED", change.obj
    if now and before:
        return "MODIFIED", change.obj
    if before and not now:
        return "DELETED", change.obj
    return None


def write_kubeconfig(path: Path, server: str, *, token: str = "t") -> Path:  # noqa: S107 (a dummy token)
    """A kubeconfig naming `server` (TLS not verified) with a dummy bearer token: for the test API server, or
    for a server a test makes of its own (one that never answers, a name that never resolves)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "fake", "user": {"token": token}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": "default"}}],
        "current-context": "fake",
    }
    path.write_text(yaml.safe_dump(config))
    return path
