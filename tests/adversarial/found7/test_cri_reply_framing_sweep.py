"""Adversarial sweep of the CRI client's reply framing: one ListPodSandbox reply cut into DATA frames of
random sizes (padded or not), PINGs and SETTINGS between any two frames, the bytes written in random
chunks; then the whole reply, or the same bytes cut short at a random point (the peer then goes silent or
closes). A whole reply reads as exactly the list sent; a cut one never reads as a list."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hyperframe.frame import PingFrame, SettingsFrame

from nodegc.inventory.cri.client import CRIError, RuntimeClient
from nodegc.inventory.cri.messages import message
from tests.unit.fakecri import FakeRuntime, first_request

N = 120


def _reply_body() -> bytes:
    items = [message("PodSandbox", id=f"{i:064x}", state=i % 2,
                     metadata=message("PodSandboxMetadata", name=f"p{i}", uid=f"u{i}", namespace="d"))
             for i in range(N)]
    raw = message("ListPodSandboxResponse", items=items).SerializeToString()
    return bytes(b"\x00" + len(raw).to_bytes(4, "big") + raw)


def _peer(seed: int, cut: bool) -> Callable[[socket.socket], None]:
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    body = _reply_body()

    def raw(sock: socket.socket) -> None:
        try:
            conn = first_request(sock)
        except OSError:
            return
        out = bytearray()

        def noise() -> None:
            roll = rnd.random()
            if roll < 0.2:
                out.extend(PingFrame(0, rnd.randbytes(8)).serialize())
            elif roll < 0.3:
                out.extend(SettingsFrame(0, settings={SettingsFrame.MAX_CONCURRENT_STREAMS: 100}).serialize())

        conn.send_headers(1, [(":status", "200"), ("content-type", "application/grpc")])
        out.extend(conn.data_to_send())
        at = 0
        while at < len(body):
            size = rnd.choice((1, 5, 7, 100, 1000, 4000, 16384))
            noise()
            pad = rnd.choice((None, 0, 17, 255))
            conn.send_data(1, body[at:at + size], pad_length=pad)
            out.extend(conn.data_to_send())
            at += size
        noise()
        conn.send_headers(1, [("grpc-status", "0")], end_stream=True)
        out.extend(conn.data_to_send())
        whole = bytes(out)
        data = whole[:rnd.randrange(1, len(whole))] if cut else whole
        i = 0
        while i < len(data):
            step = rnd.choice((1, 9, 64, 1500, 65536))
            sock.sendall(data[i:i + step])
            i += step
        if cut and rnd.random() < 0.5:
            sock.shutdown(socket.SHUT_RDWR)
            return
        time.sleep(1.5)

    return raw


@pytest.mark.parametrize("seed", range(24))
def test_a_whole_reply_is_the_list_sent(tmp_path: Path, seed: int) -> None:
    with FakeRuntime(tmp_path / "cri.sock", raw=_peer(seed, cut=False)) as rt, \
            RuntimeClient(rt.endpoint, timeout=3.0) as client:
        listed = client.list_sandboxes()
    assert [s.id for s in listed] == [f"{i:064x}" for i in range(N)]


@pytest.mark.parametrize("seed", range(24))
def test_a_reply_cut_short_is_never_a_list(tmp_path: Path, seed: int) -> None:
    with FakeRuntime(tmp_path / "cri.sock", raw=_peer(seed, cut=True)) as rt, \
            RuntimeClient(rt.endpoint, timeout=0.4) as client, pytest.raises(CRIError):
        client.list_sandboxes()
