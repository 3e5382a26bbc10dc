"""The CRI client's answer headers sent a piece at a time. Unlike the API client's transport, the CRI client
reads every frame itself, each read bounded by what is left of the call's one deadline: a runtime (or a
proxy on its socket) that sends its reply's header block in CONTINUATION frames, or `100` informational
HEADERS one after another, each within the timeout, still ends the call at its deadline. These tests keep
that so: nothing needed fixing here."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hpack import Encoder
from hyperframe.frame import ContinuationFrame, HeadersFrame

from nodegc.inventory.cri.client import RuntimeClient, RuntimeUnavailable
from tests.unit.fakecri import FakeRuntime, first_request

TIMEOUT = 1.0
BOUND = 2.5 * TIMEOUT
SERVER_GIVES_UP = 10.0


def _continuations(sock: socket.socket) -> None:
    first_request(sock)
    block = Encoder().encode([(":status", "200"), ("content-type", "application/grpc")])
    sock.sendall(HeadersFrame(1, data=block[:1]).serialize())  # no END_HEADERS: the block goes on
    ends = time.monotonic() + SERVER_GIVES_UP
    i = 1
    while time.monotonic() < ends:
        # the same byte again and again: a header block that never ends
        sock.sendall(ContinuationFrame(1, data=block[i:i + 1] if i < len(block) else b"\x00").serialize())
        i += 1
        time.sleep(TIMEOUT / 8)


def _informational(sock: socket.socket) -> None:
    first_request(sock)
    encoder = Encoder()
    ends = time.monotonic() + SERVER_GIVES_UP
    while time.monotonic() < ends:
        frame = HeadersFrame(1, data=encoder.encode([(":status", "100")]))
        frame.flags.add("END_HEADERS")
        sock.sendall(frame.serialize())
        time.sleep(TIMEOUT / 8)


@pytest.mark.parametrize("peer", [_continuations, _informational], ids=["continuation", "informational"])
def test_a_reply_header_block_that_never_ends_ends_the_call_at_its_deadline(
        tmp_path: Path, peer: Callable[[socket.socket], None]) -> None:
    with FakeRuntime(tmp_path / "cri.sock", raw=peer) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        started = time.monotonic()
        with pytest.raises(RuntimeUnavailable):
            client.version()
        assert time.monotonic() - started < BOUND
