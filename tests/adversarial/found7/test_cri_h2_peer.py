"""The CRI client over h2 against a runtime peer that misbehaves on purpose. A ListPodSandbox or
ListContainers reply that is partial, padded, interleaved, sent under an HTTP error or by a runtime the
socket path no longer leads to must never read as the runtime's complete list (that is how a live
sandbox's leftovers would look dead), and no peer (PING or SETTINGS floods, a header block that never ends,
a huge one) can hold a call past its deadline."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hyperframe.frame import ContinuationFrame, DataFrame, HeadersFrame, PingFrame, SettingsFrame

from nodegc.inventory.cri.client import CRIError, RuntimeCallError, RuntimeClient, RuntimeUnavailable
from nodegc.inventory.cri.messages import message
from tests.unit.fakecri import FakeRuntime, Peer, Request, first_request

TIMEOUT = 0.5
BOUND = 5.0


@pytest.fixture
def sock_path(tmp_path: Path) -> Path:
    return tmp_path / "cri.sock"


def _list(n: int) -> bytes:
    items = [message("PodSandbox", id=f"{i:064x}", state=0,
                     metadata=message("PodSandboxMetadata", name=f"p{i}", uid=f"u{i}", namespace="d"))
             for i in range(n)]
    raw = message("ListPodSandboxResponse", items=items).SerializeToString()
    return bytes(b"\x00" + len(raw).to_bytes(4, "big") + raw)


def _fails(client: RuntimeClient, kind: type[CRIError] = CRIError) -> CRIError:
    start = time.monotonic()
    with pytest.raises(kind) as caught:
        client.list_sandboxes()
    assert time.monotonic() - start < BOUND
    return caught.value


def _flood(frame_bytes: bytes) -> Callable[[socket.socket], None]:
    def raw(sock: socket.socket) -> None:
        first_request(sock)
        sock.settimeout(0.05)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            with contextlib.suppress(TimeoutError):
                sock.sendall(frame_bytes * 64)
            with contextlib.suppress(TimeoutError):
                sock.recv(65536)
    return raw


# --- replies that must not read as a whole list ---------------------------------------------------------


def test_an_http_error_status_with_ok_trailers_is_not_a_list(sock_path: Path) -> None:
    """A 500 (or 503: a proxy, a runtime shutting down) carrying a message and grpc-status 0 is not the
    runtime's answer: gRPC fails any reply whose HTTP status is not 200."""
    def five_hundred(peer: Peer, request: Request) -> None:
        peer.headers(request.stream_id, status=500)
        peer.data(request.stream_id, _list(1))
        peer.trailers(request.stream_id, 0)

    with FakeRuntime(sock_path, five_hundred) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        _fails(client)


def test_an_http_error_status_with_not_found_is_no_word_that_a_sandbox_is_gone(sock_path: Path) -> None:
    """A 503 carrying grpc-status NOT_FOUND (a proxy, a runtime going away) is not the runtime's answer: read
    as one, PodSandboxStatus would say the sandbox does not exist and StopPodSandbox that it is gone."""
    def not_found_under_503(peer: Peer, request: Request) -> None:
        peer.headers(request.stream_id, status=503, extra=(("grpc-status", "5"), ("grpc-message", "not found")),
                     end=True)

    with FakeRuntime(sock_path, not_found_under_503) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        with pytest.raises(RuntimeUnavailable):
            client.sandbox_status("a" * 64)
        with pytest.raises(RuntimeUnavailable):
            client.stop_sandbox("a" * 64)


def test_a_padded_reply_is_whole_and_a_padded_short_one_is_not(sock_path: Path) -> None:
    body = _list(50)

    def padded(short: bool) -> Callable[[socket.socket], None]:
        def raw(sock: socket.socket) -> None:
            conn = first_request(sock)
            conn.send_headers(1, [(":status", "200"), ("content-type", "application/grpc")])
            sock.sendall(conn.data_to_send())
            data = body[:-7] if short else body
            for i in range(0, len(data), 1000):
                frame = DataFrame(1, data[i:i + 1000])
                frame.flags.add("PADDED")
                frame.pad_length = 200
                sock.sendall(frame.serialize())
            conn.send_headers(1, [("grpc-status", "0")], end_stream=True)
            # the state machine has not seen the hand-made frames; its HEADERS frame is what matters
            sock.sendall(conn.data_to_send())
            time.sleep(2)
        return raw

    with FakeRuntime(sock_path, raw=padded(False)) as rt, RuntimeClient(rt.endpoint, timeout=2.0) as client:
        assert len(client.list_sandboxes()) == 50
    sock_path.unlink()
    with FakeRuntime(sock_path, raw=padded(True)) as rt, RuntimeClient(rt.endpoint, timeout=2.0) as client:
        assert "not one whole message" in str(_fails(client, RuntimeCallError))


def test_data_of_a_stream_never_opened_is_not_part_of_the_reply(sock_path: Path) -> None:
    """Half of the list on stream 1, the other half on stream 3 (not the call's): never one list."""
    body = _list(20)

    def raw(sock: socket.socket) -> None:
        conn = first_request(sock)
        conn.send_headers(1, [(":status", "200"), ("content-type", "application/grpc")])
        sock.sendall(conn.data_to_send())
        half = len(body) // 2
        sock.sendall(DataFrame(1, body[:half]).serialize() + DataFrame(3, body[half:]).serialize())
        conn.send_headers(1, [("grpc-status", "0")], end_stream=True)
        sock.sendall(conn.data_to_send())
        time.sleep(2)

    with FakeRuntime(sock_path, raw=raw) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        _fails(client)


def test_a_list_split_over_many_frames_and_interleaved_with_pings_is_whole(sock_path: Path) -> None:
    body = _list(300)

    def raw(sock: socket.socket) -> None:
        conn = first_request(sock)
        conn.send_headers(1, [(":status", "200"), ("content-type", "application/grpc")])
        sock.sendall(conn.data_to_send())
        for i in range(0, len(body), 333):
            sock.sendall(DataFrame(1, body[i:i + 333]).serialize() + PingFrame(0, b"12345678").serialize())
            sock.settimeout(0.01)
            with contextlib.suppress(TimeoutError):
                sock.recv(65536)
        conn.send_headers(1, [("grpc-status", "0")], end_stream=True)
        sock.sendall(conn.data_to_send())
        time.sleep(2)

    with FakeRuntime(sock_path, raw=raw) as rt, RuntimeClient(rt.endpoint, timeout=3.0) as client:
        assert len(client.list_sandboxes()) == 300


# --- peers that must not hold a call past its deadline -------------------------------------------------


def test_a_ping_flood_ends_at_the_deadline(sock_path: Path) -> None:
    with FakeRuntime(sock_path, raw=_flood(PingFrame(0, b"abcdefgh").serialize())) as rt, \
            RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        assert _fails(client, RuntimeUnavailable).code == "DEADLINE_EXCEEDED"


def test_a_settings_flood_ends_at_the_deadline(sock_path: Path) -> None:
    frame = SettingsFrame(0, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 65535}).serialize()
    with FakeRuntime(sock_path, raw=_flood(frame)) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        assert _fails(client, RuntimeUnavailable).code == "DEADLINE_EXCEEDED"


def test_a_header_block_that_never_ends_is_refused_or_ends_at_the_deadline(sock_path: Path) -> None:
    def raw(sock: socket.socket) -> None:
        conn = first_request(sock)
        first = HeadersFrame(1, b"\x88")  # :status 200, no END_HEADERS
        sock.sendall(first.serialize())
        del conn
        sock.settimeout(0.05)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                sock.sendall(ContinuationFrame(1, b"\x40\x01a\x01b").serialize() * 16)
            except (TimeoutError, BrokenPipeError):
                return

    with FakeRuntime(sock_path, raw=raw) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        _fails(client)


def test_a_huge_header_block_is_refused(sock_path: Path) -> None:
    def raw(sock: socket.socket) -> None:
        conn = first_request(sock)
        conn.send_headers(1, [(":status", "200"), ("content-type", "application/grpc"),
                              *((f"x-{i}", "v" * 4000) for i in range(40))])
        sock.sendall(conn.data_to_send())
        time.sleep(2)

    with FakeRuntime(sock_path, raw=raw) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        _fails(client)


def test_a_declared_length_of_4_gib_is_refused_at_once_without_a_buffer(sock_path: Path) -> None:
    def raw(sock: socket.socket) -> None:
        conn = first_request(sock)
        conn.send_headers(1, [(":status", "200"), ("content-type", "application/grpc")])
        sock.sendall(conn.data_to_send() + DataFrame(1, b"\x00\xff\xff\xff\xff" + b"\x0a" * 100).serialize())
        time.sleep(2)

    with FakeRuntime(sock_path, raw=raw) as rt, RuntimeClient(rt.endpoint, timeout=2.0) as client:
        assert _fails(client, RuntimeCallError).code == "RESOURCE_EXHAUSTED"


# --- a runtime restarted on the same socket path ------------------------------------------------------------


def test_a_socket_path_taken_by_a_new_runtime_is_asked_not_the_old_connection(sock_path: Path) -> None:
    """The runtime restarted: a new one bound the socket path while the old process, going away, still
    serves the connection it had. The old one's list lacks every sandbox the new one made; the next call
    must ask whatever the path leads to now."""
    def old(peer: Peer, request: Request) -> None:
        peer.reply(request.stream_id, message("ListPodSandboxResponse"))

    def new(peer: Peer, request: Request) -> None:
        peer.reply(request.stream_id, message("ListPodSandboxResponse", items=[message("PodSandbox", id="a" * 64)]))

    with FakeRuntime(sock_path, old) as before:
        client = RuntimeClient(before.endpoint, timeout=TIMEOUT)
        try:
            assert client.list_sandboxes() == []
            moved = sock_path.with_name("old.sock")
            sock_path.rename(moved)  # the old runtime's socket file is gone from the path
            with FakeRuntime(sock_path, new):
                assert [s.id for s in client.list_sandboxes()] == ["a" * 64]
            moved.unlink()
        finally:
            client.close()
