"""An HTTP-level Kubernetes API server for tests: real sockets, real JSON, real query strings.

The client under test (lightkube over httpx) talks to it exactly as it would talk to a cluster, so
tests assert on the requests actually sent (`.requests`) and on the client's handling of pages,
errors and latency.

Layout, so it can grow into watch / bookmarks / 410 Gone without a rewrite:
- `PodStore`: the objects and the global resourceVersion counter (every change bumps it). A watch
  would add an event history here (rv -> event) and a compaction point for 410.
- `Router`: (method, path pattern) -> handler; handlers return a `Reply` or raise `ApiFailure`.
- `FakeKubeAPI`: the server thread, fault injection, request recording and test helpers.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
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
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_object(code: int, message: str, *, reason: str | None = None) -> JSON:
    """A meta/v1 Status, the body the API server sends with every error."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(code, "Unknown"),
        "code": code,
    }


class ApiFailure(Exception):
    """Raised by handlers; becomes a Status response with this code."""

    def __init__(self, code: int, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason


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


# ---------------------------------------------------------------------------------------------- store


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


class PodStore:
    """Pods in memory, ordered by (namespace, name) so pages are stable between requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[tuple[str, str], JSON] = {}
        self._rv = 1

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def put(self, obj: Mapping[str, Any]) -> JSON:
        """Create or replace; the stored copy gets the new resourceVersion."""
        stored: JSON = json.loads(json.dumps(obj))
        stored.setdefault("apiVersion", "v1")
        stored.setdefault("kind", "Pod")
        meta = stored.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError("a pod needs metadata.name")
        meta.setdefault("namespace", "default")
        with self._lock:
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            self._pods[_key(stored)] = stored
            return copy.deepcopy(stored)

    def delete(self, namespace: str, name: str) -> JSON | None:
        with self._lock:
            removed = self._pods.pop((namespace, name), None)
            if removed is not None:
                self._rv += 1
            return copy.deepcopy(removed) if removed is not None else None

    def get(self, namespace: str, name: str) -> JSON | None:
        with self._lock:
            obj = self._pods.get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def snapshot(self) -> tuple[int, list[JSON]]:
        """Current resourceVersion and all pods, sorted by key."""
        with self._lock:
            return self._rv, [copy.deepcopy(self._pods[k]) for k in sorted(self._pods)]

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)


# ------------------------------------------------------------------------------------------ selectors

FieldGetter = Callable[[Mapping[str, Any]], str]

POD_FIELDS: dict[str, FieldGetter] = {
    "metadata.name": lambda o: str((o.get("metadata") or {}).get("name") or ""),
    "metadata.namespace": lambda o: str((o.get("metadata") or {}).get("namespace") or ""),
    "spec.nodeName": lambda o: str((o.get("spec") or {}).get("nodeName") or ""),
    "status.phase": lambda o: str((o.get("status") or {}).get("phase") or ""),
}

Predicate = Callable[[Mapping[str, Any]], bool]
_REQUIREMENT = re.compile(r"^\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*$")


def _requirements(selector: str, what: str) -> Iterator[tuple[str, str, str]]:
    for part in selector.split(","):
        if not part.strip():
            continue
        match = _REQUIREMENT.match(part)
        if match is None:
            raise ApiFailure(400, f"unable to parse requirement in {what}: {part!r}")
        key, op, value = match.groups()
        yield key, op, value


def field_selector(selector: str) -> Predicate:
    checks: list[Predicate] = []
    for key, op, value in _requirements(selector, "fieldSelector"):
        getter = POD_FIELDS.get(key)
        if getter is None:
            raise ApiFailure(400, f'field label not supported: "{key}"')
        checks.append(_compare(getter, op, value))
    return lambda obj: all(check(obj) for check in checks)


def label_selector(selector: str) -> Predicate:
    checks: list[Predicate] = []
    for key, op, value in _requirements(selector, "labelSelector"):
        if op == "!=":
            raise ApiFailure(400, "the fake API supports only k=v label selectors")

        checks.append(_label_equals(key, value))
    return lambda obj: all(check(obj) for check in checks)


def _label_equals(key: str, value: str) -> Predicate:
    def check(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return key in labels and str(labels[key]) == value

    return check


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


# --------------------------------------------------------------------------------------------- router

Handler = Callable[[Mapping[str, str], Mapping[str, str]], Reply]
"""(path parameters, query) -> Reply"""


class Router:
    def __init__(self) -> None:
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        """`pattern` uses {name} for one path segment."""
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern)
        self._routes.append((method, re.compile(f"^{regex}$"), handler))

    def dispatch(self, method: str, path: str, query: Mapping[str, str]) -> Reply:
        path_matched = False
        for route_method, regex, handler in self._routes:
            match = regex.match(path)
            if match is None:
                continue
            path_matched = True
            if route_method == method:
                params = {k: unquote(v) for k, v in match.groupdict().items()}
                return handler(params, query)
        if path_matched:
            raise ApiFailure(405, f"method {method} is not supported on {path}")
        raise ApiFailure(404, "the server could not find the requested resource")


class PodsAPI:
    """Handlers for core/v1 pods."""

    def __init__(self, store: PodStore) -> None:
        self.store = store

    def register(self, router: Router) -> None:
        router.add("GET", "/api/v1/pods", self.list_all)
        router.add("GET", "/api/v1/namespaces/{namespace}/pods", self.list_namespaced)
        router.add("GET", "/api/v1/namespaces/{namespace}/pods/{name}", self.get)

    def list_all(self, params: Mapping[str, str], query: Mapping[str, str]) -> Reply:
        return self._list(None, query)

    def list_namespaced(self, params: Mapping[str, str], query: Mapping[str, str]) -> Reply:
        return self._list(params["namespace"], query)

    def get(self, params: Mapping[str, str], query: Mapping[str, str]) -> Reply:
        obj = self.store.get(params["namespace"], params["name"])
        if obj is None:
            raise ApiFailure(404, f'pods "{params["name"]}" not found')
        return Reply(200, obj)

    def _list(self, namespace: str | None, query: Mapping[str, str]) -> Reply:
        fields = field_selector(query.get("fieldSelector", ""))
        labels = label_selector(query.get("labelSelector", ""))
        limit = _limit(query.get("limit"))
        rv, pods = self.store.snapshot()
        after: tuple[str, str] | None = None
        if query.get("continue"):
            rv, after = decode_continue(query["continue"])
        selected = [
            pod
            for pod in pods
            if (namespace is None or _key(pod)[0] == namespace)
            and (after is None or _key(pod) > after)
            and fields(pod)
            and labels(pod)
        ]
        metadata: JSON = {"resourceVersion": str(rv)}
        if limit and len(selected) > limit:
            selected = selected[:limit]
            metadata["continue"] = encode_continue(rv, _key(selected[-1]))
        items = [{k: v for k, v in pod.items() if k not in ("kind", "apiVersion")} for pod in selected]
        return Reply(200, {"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": items})


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


# --------------------------------------------------------------------------------------------- server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    api: FakeKubeAPI


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
        if length:
            self.rfile.read(length)
        api = cast(_Server, self.server).api
        reply = api.handle(method, self.path, {k.lower(): v for k, v in self.headers.items()})
        body = json.dumps(reply.body).encode()
        try:
            self.send_response(reply.code)
            # lightkube turns an error into ApiError only when the content type is exactly this.
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test); nothing to tell it

    def log_message(self, format: str, *args: Any) -> None:
        pass


class FakeKubeAPI:
    """Use as a context manager; the server listens on 127.0.0.1 on a free port until exit."""

    def __init__(self, *, token: str = "fake-token-not-secret", require_auth: bool = True) -> None:  # noqa: S107
        self.token = token
        self.require_auth = require_auth
        self.store = PodStore()
        self.router = Router()
        PodsAPI(self.store).register(self.router)
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._failures: list[int | None] = []
        self._delay = 0.0
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

    # helpers for tests

    def add_pod(self, obj: Mapping[str, Any]) -> JSON:
        return self.store.put(obj)

    def delete_pod(self, namespace: str, name: str) -> JSON | None:
        return self.store.delete(namespace, name)

    def fail_next(self, status: int, count: int = 1, *, after: int = 0) -> None:
        """The next `count` requests (any path) get a Status with this code, `after` requests from now."""
        with self._lock:
            self._failures.extend([None] * after + [status] * count)

    def delay(self, seconds: float) -> None:
        """Every following request waits this long before its response (0 turns it off)."""
        with self._lock:
            self._delay = seconds

    def clear_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def requests_to(self, path: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for this server: plain http (lightkube accepts it), a dummy bearer token."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "fake", "user": {"token": self.token}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": "default"}}
            ],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # request path (server threads)

    def handle(self, method: str, raw_path: str, headers: Mapping[str, str]) -> Reply:
        parts = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        with self._lock:
            self.requests.append(RecordedRequest(method, parts.path, query, dict(headers)))
            failure = self._failures.pop(0) if self._failures else None
            delay = self._delay
        if delay > 0:
            self._closing.wait(delay)
        if failure is not None:
            return Reply(failure, status_object(failure, f"injected failure {failure}"))
        if self.require_auth and headers.get("authorization") != f"Bearer {self.token}":
            return Reply(401, status_object(401, "Unauthorized"))
        try:
            return self.router.dispatch(method, parts.path, query)
        except ApiFailure as e:
            return Reply(e.code, status_object(e.code, e.message, reason=e.reason))
