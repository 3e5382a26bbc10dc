"""A GOAWAY whose last stream id is below the call's, after the runtime already began to answer that call.

RFC 9113 6.8: the streams above a GOAWAY's last stream id were not processed. A runtime (or a proxy) that
sent the reply's headers or part of its message on a stream, and then names a last stream below it, has
processed the request whatever its GOAWAY says: a call that would make a second object (RunPodSandbox and
the like) must not go out again on a new connection. A read may (it is safe to send twice).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nodegc.inventory.cri.client import RuntimeClient, RuntimeUnavailable
from nodegc.inventory.cri.messages import message
from tests.unit.fakecri import FakeRuntime, Peer, Request, version_reply

TIMEOUT = 0.5


def _began_then_goaway(rtref: list[FakeRuntime], *, body: bool) -> Callable[[Peer, Request], None]:
    """The first request gets the reply's headers (and, with `body`, half its message), then a GOAWAY that
    names stream 0 as the last one processed; every later request a version reply."""
    def handler(peer: Peer, request: Request) -> None:
        if len(rtref[0].requests) > 1:
            version_reply(peer, request)
            return
        peer.headers(request.stream_id)
        if body:
            peer.data(request.stream_id, b"\x00\x00\x00\x00\x10abc")
        with peer.lock:
            peer.conn.close_connection(last_stream_id=0)
            peer.flush()
    return handler


@pytest.fixture
def sock_path(tmp_path: Path) -> Path:
    return tmp_path / "cri.sock"


@pytest.mark.parametrize("body", [False, True])
def test_a_create_the_runtime_began_to_answer_is_not_sent_again_whatever_its_goaway_says(
        sock_path: Path, body: bool) -> None:
    rtref: list[FakeRuntime] = []
    with FakeRuntime(sock_path, _began_then_goaway(rtref, body=body)) as rt, \
            RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        rtref.append(rt)
        with pytest.raises(RuntimeUnavailable, match="GOAWAY"):
            client.call("RunPodSandbox", message("RunPodSandboxRequest"), "RunPodSandboxResponse")
        assert len(rt.requests) == 1 and rt.accepted == 1  # sent once: no second sandbox


@pytest.mark.parametrize("body", [False, True])
def test_a_read_the_runtime_began_to_answer_still_goes_once_more(sock_path: Path, body: bool) -> None:
    rtref: list[FakeRuntime] = []
    with FakeRuntime(sock_path, _began_then_goaway(rtref, body=body)) as rt, \
            RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        rtref.append(rt)
        assert client.version().runtime_name == "fake"
        assert len(rt.requests) == 2 and rt.accepted == 2
