"""Answers sent a byte at a time by the test API server (rewritten on the wire, never the client)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.adversarial.found9.conftest import RawBody
from tests.api import fakeapi
from tests.api.fakeapi import FakeKubeAPI, Reply

NODE = "node-a"
IDLE = 0.5
"""The reflectors' idle (read) timeout: every trickled byte comes well within it."""


class Trickle:
    """`answer(method, raw_path, n)` (n: the how-manyth watch request, from 1) returns the (code, bytes) to
    send a byte every IDLE/5 s, or None for the server's own answer. `watches` counts the watch requests."""

    def __init__(self) -> None:
        self.answer: Callable[[str, str, int], tuple[int, bytes] | None] = lambda _m, _p, _n: None
        self.watches = 0
        self.lists = 0
        self.stop = threading.Event()


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=(NODE,)) as server:
        yield server


@pytest.fixture
def trickle(api: FakeKubeAPI, monkeypatch: pytest.MonkeyPatch) -> Iterator[Trickle]:
    t = Trickle()
    handle = api.handle

    def wrap(method: str, raw_path: str, headers: Any, raw_body: bytes = b"") -> Any:
        watch = method == "GET" and "watch=true" in raw_path
        if watch:
            t.watches += 1
        elif method == "GET" and raw_path.split("?", 1)[0].endswith("/pods"):
            t.lists += 1
        found = t.answer(method, raw_path, t.watches) if watch else None
        if found is not None:
            return Reply(found[0], RawBody(found[1], trickle=IDLE / 5))
        return handle(method, raw_path, headers, raw_body)

    monkeypatch.setattr(api, "handle", wrap)
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
            for i in range(len(payload.data)):
                if t.stop.is_set():
                    return
                self.wfile.write(payload.data[i : i + 1])
                self.wfile.flush()
                time.sleep(payload.trickle)
        except (BrokenPipeError, ConnectionResetError):
            pass

    monkeypatch.setattr(fakeapi._RequestHandler, "_send_json", send)
    yield t
    t.stop.set()
