"""A test API server whose answers a test may rewrite on the wire: `Tamper.lists(fn)` hands each list
reply's JSON to `fn`, which returns the JSON (or raw bytes) to send instead. The fake server is rewritten,
never the client."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lightkube
import pytest

from nodegc.api.client import make_client
from tests.api import fakeapi
from tests.api.fakeapi import FakeKubeAPI, Reply

Rewrite = Callable[[dict[str, Any], dict[str, str]], "dict[str, Any] | bytes | Reply"]


class RawBody(dict):  # type: ignore[type-arg]
    """A reply body sent as these bytes, not as JSON."""

    def __init__(self, data: bytes, content_type: str = "application/json", *, trickle: float = 0.0) -> None:
        super().__init__()
        self.data = data
        self.content_type = content_type
        self.trickle = trickle
        """Seconds between the body's bytes (a server or proxy that sends it a byte at a time)."""


class Tamper:
    def __init__(self, api: FakeKubeAPI) -> None:
        self.api = api
        self._lists: Rewrite | None = None
        self._gets: Rewrite | None = None
        self._leases: Rewrite | None = None
        self.calls = 0

    def lists(self, fn: Rewrite) -> None:
        """Every list reply of pods goes through fn(body, query): the JSON to send, raw bytes, or a Reply."""
        self._lists = fn

    def gets(self, fn: Rewrite) -> None:
        """Every GET of one pod goes through fn(body, query)."""
        self._gets = fn

    def leases(self, fn: Rewrite) -> None:
        """Every GET of one node Lease goes through fn(body, query)."""
        self._leases = fn

    def wrap(self, method: str, raw_path: str, headers: Any, raw_body: bytes = b"") -> Any:
        reply = FakeKubeAPI.handle(self.api, method, raw_path, headers, raw_body)
        if isinstance(reply, Reply) and method == "GET" and "/kube-node-lease/leases/" in raw_path and self._leases:
            self.calls += 1
            out = self._leases(json.loads(json.dumps(reply.body)), {})
            return out if isinstance(out, Reply) else Reply(reply.code, RawBody(out) if isinstance(out, bytes) else out)
        if not isinstance(reply, Reply) or method != "GET" or "/pods" not in raw_path:
            return reply
        from urllib.parse import parse_qs, urlsplit

        parts = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if query.get("watch") in ("true", "1"):
            return reply
        fn = self._lists if parts.path.endswith("/pods") else self._gets
        if fn is None:
            return reply
        self.calls += 1
        out = fn(json.loads(json.dumps(reply.body)), query)
        if isinstance(out, Reply):
            return out
        return Reply(reply.code, RawBody(out) if isinstance(out, bytes) else out)


def send_raw_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the test API server send a `RawBody` as its bytes (a byte at a time when it trickles)."""
    original = fakeapi._RequestHandler._send_json

    def send(self: Any, code: int, payload: Any) -> None:
        if not isinstance(payload, RawBody):
            original(self, code, payload)
            return
        try:
            self.send_response(code)
            self.send_header("Content-Type", payload.content_type)
            self.send_header("Content-Length", str(len(payload.data)))
            self.end_headers()
            if not payload.trickle:
                self.wfile.write(payload.data)
                return
            for i in range(len(payload.data)):
                self.wfile.write(payload.data[i : i + 1])
                self.wfile.flush()
                time.sleep(payload.trickle)
        except (BrokenPipeError, ConnectionResetError):
            pass

    monkeypatch.setattr(fakeapi._RequestHandler, "_send_json", send)


@pytest.fixture
def tamper(api: FakeKubeAPI, monkeypatch: pytest.MonkeyPatch) -> Tamper:
    t = Tamper(api)
    monkeypatch.setattr(api, "handle", t.wrap)
    send_raw_bodies(monkeypatch)
    return t


@pytest.fixture
def client(kubeconfig: Path) -> Iterator[lightkube.Client]:
    c = make_client(kubeconfig, field_manager="nodegc-test")
    yield c
    c.close()


def pod(name: str, *, node: str = "n1", uid: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}}
