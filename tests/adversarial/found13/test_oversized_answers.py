"""Answers bounded in bytes. Every answer was bounded in time (3 read timeouts, found9, found11, found13's
trickled headers) but not in size: a server or proxy streaming a list page, a GET's or a write's answer, an
error's Status or a watch line far past any real one, fast enough to end within the deadline (or a watch
line that never ends before the resync), made the agent hold all of it, and past the DaemonSet's memory
limit the kernel kills it. Each is now read up to its bound (`api.streaming.MAX_*_BYTES`) and refused there,
the connection closed: the call fails as a timed-out one does, a watch relists, backed off. The bounds are
set small here (the settings the code reads at each request) and the bodies sent 64 times over them,
streamed without a length; the server counts what it could send before the client hung up. The test API
server is rewritten on the wire, never the client."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lightkube
import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod

from nodegc.api import streaming
from nodegc.api.client import make_client
from nodegc.api.errors import KubeError, call
from nodegc.api.reads import get_live, list_all
from nodegc.api.reflector import _lines, _Relist
from nodegc.api.streaming import Requests
from nodegc.desired.reflector import PodReflector
from tests.adversarial.found9.conftest import pod
from tests.api import fakeapi
from tests.api.fakeapi import FakeKubeAPI, Reply

TIMEOUT = 2.0
BOUND = 5 * TIMEOUT
"""Well under the 3 read timeouts an answer may take: a refused answer fails at its bound, not at its end."""
MIB = 1 << 20
LIMIT = 1 * MIB
"""Every byte bound, set this small for the test."""
SENT = 64 * LIMIT
"""What the server would send: 64 times the bound."""
HELD = 24 * MIB
"""What the server may have written before the client hung up: the bound, what the kernel's socket buffers
on both ends take in (a few MiB each), and slack; a client that read it all took in 64 MiB."""

Match = Callable[[str, str], bool]


class Huge(dict):  # type: ignore[type-arg]
    """An answer that starts with `head` and goes on with `fill` (no newline in it) up to `total` bytes, sent
    without a length (chunked), as fast as the client takes it."""

    def __init__(self, head: bytes, fill: bytes, total: int, *, gzip: bool = False) -> None:
        super().__init__()
        self.head, self.fill, self.total, self.gzip = head, fill, total, gzip
        self.sent = 0
        self.done = threading.Event()


class Server:
    def __init__(self, api: FakeKubeAPI) -> None:
        self.api = api
        self.rules: list[tuple[Match, int, bytes, bytes, bool]] = []
        self.answers: list[Huge] = []

    def on(self, match: Match, *, code: int = 200, head: bytes = b"", fill: bytes = b" " * 65536,
           gzip: bool = False) -> None:
        """`gzip`: the answer sent gzip-compressed (`sent` counts what it inflates to)."""
        self.rules.append((match, code, head, fill, gzip))

    def wrap(self, method: str, raw_path: str, headers: Any, raw_body: bytes = b"") -> Any:
        for match, code, head, fill, gzip in self.rules:
            if match(method, raw_path):
                answer = Huge(head, fill, SENT, gzip=gzip)
                self.answers.append(answer)
                return Reply(code, answer)
        return FakeKubeAPI.handle(self.api, method, raw_path, headers, raw_body)

    def held(self) -> int:
        """The most any answer sent, once every answer's server thread saw the client hang up."""
        assert self.answers
        for answer in self.answers:
            assert answer.done.wait(BOUND), "the server still sends: the client reads on"
        return max(a.sent for a in self.answers)


@pytest.fixture
def server(api: FakeKubeAPI, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    s = Server(api)
    monkeypatch.setattr(api, "handle", s.wrap)
    for name in ("MAX_PAGE_BYTES", "MAX_OBJECT_BYTES", "MAX_ERROR_BYTES"):
        monkeypatch.setattr(streaming, name, LIMIT)
    original = fakeapi._RequestHandler._send_json

    def send(self: Any, code: int, payload: Any) -> None:
        if not isinstance(payload, Huge):
            original(self, code, payload)
            return
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            if payload.gzip:
                self.send_header("Content-Encoding", "gzip")
            self.end_headers()
            packer = zlib.compressobj(wbits=31) if payload.gzip else None
            data = payload.head
            while payload.sent < payload.total:
                payload.sent += len(data)
                if packer is not None:
                    data = packer.compress(data) + (packer.flush() if payload.sent >= payload.total else b"")
                if data:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                data = payload.fill
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self.close_connection = True
            payload.done.set()

    monkeypatch.setattr(fakeapi._RequestHandler, "_send_json", send)
    yield s


@pytest.fixture
def client(kubeconfig: Path) -> Iterator[lightkube.Client]:
    c = make_client(kubeconfig, timeout=TIMEOUT, field_manager="nodegc-test")
    yield c
    c.close()


def refused(fn: Callable[[], object]) -> tuple[float, KubeError]:
    started = time.monotonic()
    with pytest.raises(KubeError) as caught:
        fn()
    return time.monotonic() - started, caught.value


def pods_list(method: str, path: str) -> bool:
    return method == "GET" and path.startswith("/api/v1/pods") and "watch=" not in path


def test_a_list_page_over_its_bound_fails_the_list(server: Server, client: lightkube.Client) -> None:
    one = json.dumps(pod("web")).encode()
    server.on(pods_list, head=b'{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":[' + one,
              fill=(b"," + one) * 64)
    took, error = refused(lambda: list_all(client, Pod, what="listing pods", timeout=TIMEOUT))
    assert "AnswerTooLarge" in str(error) and f"over {LIMIT} bytes" in str(error), error
    assert took < BOUND
    assert server.held() < HELD


def test_a_live_get_over_its_bound_fails(server: Server, client: lightkube.Client) -> None:
    server.on(lambda m, p: m == "GET" and "/pods/web" in p, head=b'{"kind":"Pod","metadata":{"name":"web",'
              b'"annotations":{"a":"', fill=b"x" * 65536)
    took, error = refused(lambda: get_live(client, Pod, namespace="default", name="web", what="reading pod"))
    assert "AnswerTooLarge" in str(error), error
    assert took < BOUND
    assert server.held() < HELD


def test_a_writes_answer_over_its_bound_fails(server: Server, client: lightkube.Client) -> None:
    server.on(lambda m, p: m == "POST" and "/leases" in p, head=b'{"kind":"Lease","metadata":{"name":"l"}',
              fill=b" " * 65536)
    lease = Lease(metadata=ObjectMeta(name="l", namespace="default"))
    took, error = refused(lambda: call("creating lease", lambda: Requests(client).create(lease)))
    assert "AnswerTooLarge" in str(error), error
    assert took < BOUND
    assert server.held() < HELD


@pytest.mark.parametrize("request_kind", ["list", "write"])
def test_an_error_body_over_its_bound_fails_with_the_reason(
        server: Server, client: lightkube.Client, monkeypatch: pytest.MonkeyPatch, request_kind: str) -> None:
    """An error's Status has a bound of its own, far below an object's: a 500 whose body is the size of an
    object is refused."""
    monkeypatch.setattr(streaming, "MAX_OBJECT_BYTES", 8 * LIMIT)
    monkeypatch.setattr(streaming, "MAX_ERROR_BYTES", LIMIT // 16)
    status = b'{"kind":"Status","status":"Failure","code":500,"message":"'
    if request_kind == "list":
        server.on(pods_list, code=500, head=status, fill=b"x" * 65536)
        took, error = refused(lambda: list_all(client, Pod, what="listing pods", timeout=TIMEOUT))
    else:
        server.on(lambda m, p: m == "POST" and "/leases" in p, code=500, head=status, fill=b"x" * 65536)
        lease = Lease(metadata=ObjectMeta(name="l", namespace="default"))
        took, error = refused(lambda: call("creating lease", lambda: Requests(client).create(lease)))
    assert "AnswerTooLarge" in str(error) and f"over {LIMIT // 16} bytes" in str(error), error
    assert took < BOUND
    assert server.held() < HELD


@pytest.mark.parametrize("request_kind", ["get", "error"])
def test_a_small_gzip_body_that_inflates_past_the_bound_fails(
        server: Server, client: lightkube.Client, request_kind: str) -> None:
    """A write's answer and an error's Status were read as sent and inflated afterwards, whole: 64 KiB of gzip
    became 64 MiB. They are now counted as they inflate, in pieces (httpx2 drains its decompressor in bounded
    pieces), and refused at the bound."""
    head = b'{"kind":"Status","status":"Failure","code":500,"message":"' if request_kind == "error" else \
        b'{"kind":"Lease","metadata":{"name":"l"}'
    server.on(lambda m, p: m == "POST" and "/leases" in p, code=500 if request_kind == "error" else 201,
              head=head, fill=b" " * 65536, gzip=True)
    lease = Lease(metadata=ObjectMeta(name="l", namespace="default"))
    tracemalloc.start()
    try:
        _, error = refused(lambda: call("creating lease", lambda: Requests(client).create(lease)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "AnswerTooLarge" in str(error), error
    assert peak < 8 * LIMIT, peak


def test_answers_within_their_bounds_pass(api: FakeKubeAPI, client: lightkube.Client,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounds refuse what is over them, not what is near them: a page and an object just under pass."""
    big = pod("web")
    big["metadata"]["annotations"] = {"a": "x" * (LIMIT // 2)}
    api.add_pod(big)
    monkeypatch.setattr(streaming, "MAX_PAGE_BYTES", LIMIT)
    monkeypatch.setattr(streaming, "MAX_OBJECT_BYTES", LIMIT)
    objects, _ = list_all(client, Pod, what="listing pods")
    assert [o["metadata"]["name"] for o in objects] == ["web"]
    got = get_live(client, Pod, namespace="default", name="web", what="reading pod")
    assert got is not None and len(got["metadata"]["annotations"]["a"]) == LIMIT // 2


def test_a_watch_line_over_its_bound_relists(api: FakeKubeAPI, server: Server, kubeconfig: Path) -> None:
    """A line that never ends, sent as fast as the watch reads it: refused at the bound, long before the
    resync or the stall detector, and the cache relists (backed off), its view left as the last list made
    it."""
    api.add_pod(pod("web", node="node-a"))
    server.on(lambda m, p: m == "GET" and "/pods" in p and "watch=true" in p,
              head=b'{"type":"ADDED","object":{"metadata":{"name":"web","annotations":{"a":"', fill=b"x" * 65536)
    started = time.monotonic()
    with PodReflector("node-a", kubeconfig=kubeconfig, prove_current=False, resync_seconds=600.0,
                      idle_timeout_seconds=60.0, request_timeout=TIMEOUT, retry_seconds=0.05,
                      max_retry_seconds=0.2) as ref:
        deadline = time.monotonic() + BOUND
        while ref.stats()["relists_error"] < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        stats = ref.stats()
        assert stats["relists_error"] >= 2 and stats["lists"] >= 2, stats
        assert "uid-web" in {p.uid for p in ref.fetch().pods}
    assert time.monotonic() - started < BOUND
    assert server.held() < HELD


def test_a_whole_watch_line_over_its_bound_is_refused_and_one_under_it_passes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A line that does end, in one piece, is held to the same bound as one that never does."""
    monkeypatch.setattr(streaming, "MAX_OBJECT_BYTES", LIMIT)
    under = b'{"a":"' + b"x" * (LIMIT - 16) + b'"}'
    lines = _lines(iter([under + b"\n" + b"y" * (LIMIT + 1) + b"\n"]), time.monotonic() + 60)
    assert next(lines) == under.decode()
    with pytest.raises(_Relist, match=f"over {LIMIT} bytes"):
        next(lines)
