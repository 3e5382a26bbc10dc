"""An answer's headers sent a line at a time. Lists, GETs, writes and their error answers are read whole
within 3 read timeouts, but only from the first byte of the body on: the headers came through lightkube's
transport, where each read of the socket is bounded and the header block is not. A server or proxy that
sends a header line (or another `100 Continue`) within each read timeout, for as long as it cares to, held
a list, terminate's live GET, a write, or a watch that had not begun past every bound. The whole answer,
headers included, is now bounded the same way (a watch's headers within its read timeout). The test API
server is rewritten on the wire, never the client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightkube
import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod

from nodegc.api.client import make_client
from nodegc.api.errors import KubeError, call
from nodegc.api.streaming import RawReads, Requests, WatchRequests
from nodegc.desired.kube import KubeSource
from nodegc.desired.source import SourceError
from tests.adversarial.found9.conftest import pod
from tests.adversarial.found11.test_trickled_writes import bounded
from tests.api import fakeapi
from tests.api.fakeapi import FakeKubeAPI, Reply

TIMEOUT = 1.0
BOUND = 5 * TIMEOUT
"""3 read timeouts for the whole answer, and some slack on a loaded machine."""
SERVER_GIVES_UP = 20.0
"""The test server stops trickling after this long (the client, unbounded, waited this long)."""


class Headers(dict):  # type: ignore[type-arg]
    """An answer whose status line comes at once and whose header lines come one every TIMEOUT/4 s, never
    ending (`informational`: one `HTTP/1.1 100 Continue` answer after another, each whole)."""

    def __init__(self, *, informational: bool = False) -> None:
        super().__init__()
        self.informational = informational


class Trickle:
    def __init__(self, api: FakeKubeAPI) -> None:
        self.api = api
        self.match: tuple[str, str] | None = None
        self.informational = False
        self.hits = 0
        self.stop = threading.Event()

    def on(self, method: str, part: str, *, informational: bool = False) -> None:
        self.match, self.informational = (method, part), informational

    def wrap(self, method: str, raw_path: str, headers: Any, raw_body: bytes = b"") -> Any:
        if self.match is not None and method == self.match[0] and self.match[1] in raw_path:
            self.hits += 1
            return Reply(200, Headers(informational=self.informational))
        return FakeKubeAPI.handle(self.api, method, raw_path, headers, raw_body)


@pytest.fixture
def trickle(api: FakeKubeAPI, monkeypatch: pytest.MonkeyPatch) -> Iterator[Trickle]:
    t = Trickle(api)
    monkeypatch.setattr(api, "handle", t.wrap)
    original = fakeapi._RequestHandler._send_json

    def send(self: Any, code: int, payload: Any) -> None:
        if not isinstance(payload, Headers):
            original(self, code, payload)
            return
        ends = time.monotonic() + SERVER_GIVES_UP
        try:
            if not payload.informational:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
            n = 0
            while time.monotonic() < ends and not t.stop.is_set():
                n += 1
                line = b"HTTP/1.1 100 Continue\r\n\r\n" if payload.informational else b"X-Pad-%d: x\r\n" % n
                self.wfile.write(line)
                self.wfile.flush()
                time.sleep(TIMEOUT / 4)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    monkeypatch.setattr(fakeapi._RequestHandler, "_send_json", send)
    yield t
    t.stop.set()


@pytest.fixture
def client(kubeconfig: Path) -> Iterator[lightkube.Client]:
    c = make_client(kubeconfig, timeout=TIMEOUT, field_manager="nodegc-test")
    yield c
    c.close()


KINDS = pytest.mark.parametrize("informational", [False, True], ids=["header-lines", "100-continue"])


@KINDS
def test_a_live_gets_headers_sent_a_line_at_a_time_time_out(
        api: FakeKubeAPI, trickle: Trickle, kubeconfig: Path, informational: bool) -> None:
    api.add_pod(pod("web"))
    trickle.on("GET", "/pods/web", informational=informational)
    with KubeSource("n1", kubeconfig=kubeconfig, prove_current=False, timeout=TIMEOUT) as source:
        took, _, error = bounded(lambda: source.get_pod("default", "web"))
    assert trickle.hits and isinstance(error, SourceError), error
    assert took < BOUND


@KINDS
def test_a_lists_headers_sent_a_line_at_a_time_time_out(
        api: FakeKubeAPI, trickle: Trickle, kubeconfig: Path, informational: bool) -> None:
    api.add_pod(pod("web"))
    trickle.on("GET", "/pods?", informational=informational)
    with KubeSource("n1", kubeconfig=kubeconfig, prove_current=False, timeout=TIMEOUT) as source:
        took, _, error = bounded(source.fetch)
    assert trickle.hits and isinstance(error, SourceError), error
    assert took < BOUND


@KINDS
def test_a_writes_headers_sent_a_line_at_a_time_time_out(
        trickle: Trickle, client: lightkube.Client, informational: bool) -> None:
    trickle.on("POST", "/leases", informational=informational)
    lease = Lease(metadata=ObjectMeta(name="l", namespace="default"))
    took, _, error = bounded(lambda: call("creating lease", lambda: Requests(client).create(lease)))
    assert trickle.hits and isinstance(error, KubeError) and error.timed_out, error
    assert took < BOUND


@KINDS
def test_a_raw_gets_headers_sent_a_line_at_a_time_time_out(
        api: FakeKubeAPI, trickle: Trickle, client: lightkube.Client, informational: bool) -> None:
    api.add_pod(pod("web"))
    trickle.on("GET", "/pods/web", informational=informational)
    took, _, error = bounded(lambda: call("get", lambda: RawReads(client).get(Pod, namespace="default",
                                                                               name="web")))
    assert isinstance(error, KubeError) and error.timed_out, error
    assert took < BOUND


@KINDS
def test_a_watchs_headers_sent_a_line_at_a_time_time_out(
        trickle: Trickle, client: lightkube.Client, informational: bool) -> None:
    trickle.on("GET", "watch=true", informational=informational)
    took, _, error = bounded(lambda: WatchRequests(client).open(
        Pod, namespace=lightkube.ALL_NS, params={"watch": "true"}, connect_timeout=TIMEOUT, read_timeout=TIMEOUT))
    assert trickle.hits and error is not None and "ReadTimeout" in type(error).__name__, error
    assert took < BOUND


def test_answers_in_time_and_a_watch_after_its_headers_are_not_cut(
        api: FakeKubeAPI, client: lightkube.Client) -> None:
    """The bound is the answer's, not the connection's: answers in time on one connection pass, and a watch
    whose headers came in time is read as long as its lines keep coming."""
    api.add_pod(pod("web"))
    for _ in range(3):
        assert RawReads(client).get(Pod, namespace="default", name="web")
    response = WatchRequests(client).open(Pod, namespace=lightkube.ALL_NS,
                                          params={"watch": "true", "allowWatchBookmarks": "true",
                                                  "timeoutSeconds": "30"},
                                          connect_timeout=TIMEOUT, read_timeout=TIMEOUT)
    try:
        assert response.status_code == 200
        started = time.monotonic()
        lines = response.iter_lines()
        api.add_pod(pod("db"))
        time.sleep(3.5 * TIMEOUT)
        api.add_pod(pod("cache"))
        seen = 0
        for line in lines:
            seen += '"ADDED"' in line
            if seen >= 3:
                break
        assert time.monotonic() - started > 3 * TIMEOUT and seen >= 3
    finally:
        response.close()
