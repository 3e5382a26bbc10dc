"""The CRI client's HTTP/2 and gRPC framing against a scripted peer: bounded in time whatever the peer
does (silence, half a frame, no trailers, a closed window), flow control both ways, the size cap, status
mapping from trailers and trailers-only replies, resets, GOAWAY, reconnects. The good answers of a real
runtime are tested against containerd (tests/host/test_cri_reader.py)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from nodegc.inventory.cri.client import CRIError, RuntimeCallError, RuntimeClient, RuntimeUnavailable
from nodegc.inventory.cri.messages import message, message_class
from tests.unit.fakecri import FakeRuntime, Peer, Request, silent, version_reply

TIMEOUT = 0.5
BOUND = 5.0  # a call that takes this long has hung: the client's deadline is TIMEOUT


@pytest.fixture
def sock_path(tmp_path: Path) -> Path:
    return tmp_path / "cri.sock"


def _fails(client: RuntimeClient, kind: type[CRIError], code: str) -> CRIError:
    start = time.monotonic()
    with pytest.raises(kind) as caught:
        client.version()
    assert time.monotonic() - start < BOUND
    assert caught.value.code == code, caught.value
    return caught.value


def _sandboxes(n: int) -> bytes:
    items = [message("PodSandbox", id=f"{i:064x}", state=0, created_at=i,
                     metadata=message("PodSandboxMetadata", name=f"pod-{i}", uid=f"uid-{i}", namespace="default"),
                     labels={"io.kubernetes.pod.name": f"pod-{i}", "app": "x" * 100})
             for i in range(n)]
    return bytes(message("ListPodSandboxResponse", items=items).SerializeToString())


# --- the request: framing and headers ----------------------------------------------------------------


def test_request_framing_headers_and_one_connection_for_many_calls(sock_path: Path) -> None:
    with FakeRuntime(sock_path) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        for _ in range(3):
            assert client.version().runtime_name == "fake"
        assert rt.accepted == 1 and client.connections == 1
        first = rt.requests[0]
        assert first.headers[":method"] == "POST" and first.headers[":scheme"] == "http"
        assert first.headers[":path"] == "/runtime.v1.RuntimeService/Version"
        assert first.headers[":authority"] == "localhost"
        assert first.headers["content-type"] == "application/grpc" and first.headers["te"] == "trailers"
        assert first.headers["grpc-timeout"].endswith("m") and 0 < int(first.headers["grpc-timeout"][:-1]) <= 500
        body = first.body
        assert body[0] == 0 and int.from_bytes(body[1:5], "big") == len(body) - 5
        assert message_class("VersionRequest").FromString(body[5:]).version == "v1"
        assert [r.stream_id for r in rt.requests] == [1, 3, 5]


def test_a_request_larger_than_the_runtimes_window_waits_for_its_window_updates(sock_path: Path) -> None:
    def echo_size(peer: Peer, request: Request) -> None:
        peer.reply(request.stream_id, message("PodSandboxStatusResponse", info={"size": str(len(request.body))}))

    big = "x" * 200_000
    with FakeRuntime(sock_path, echo_size, window=1000) as rt, RuntimeClient(rt.endpoint, timeout=5.0) as client:
        reply = client.call("PodSandboxStatus", message("PodSandboxStatusRequest", pod_sandbox_id=big),
                            "PodSandboxStatusResponse")
        assert int(reply.info["size"]) > 200_000


def test_a_runtime_that_never_opens_its_window_ends_at_the_deadline(sock_path: Path) -> None:
    def never(peer: Peer, request: Request) -> None:
        return None

    with FakeRuntime(sock_path, never, window=10) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        start = time.monotonic()
        with pytest.raises(RuntimeUnavailable) as caught:
            client.call("PodSandboxStatus", message("PodSandboxStatusRequest", pod_sandbox_id="x" * 1000),
                        "PodSandboxStatusResponse")
        assert time.monotonic() - start < BOUND and caught.value.code == "DEADLINE_EXCEEDED"


# --- bounded in time ---------------------------------------------------------------------------------


def test_a_peer_that_accepts_and_says_nothing_ends_at_the_deadline(sock_path: Path) -> None:
    with FakeRuntime(sock_path, raw=silent) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        _fails(client, RuntimeUnavailable, "DEADLINE_EXCEEDED")


def test_a_runtime_that_takes_the_request_and_never_answers_ends_at_the_deadline(sock_path: Path) -> None:
    def never(peer: Peer, request: Request) -> None:
        return None

    with FakeRuntime(sock_path, never) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        _fails(client, RuntimeUnavailable, "DEADLINE_EXCEEDED")
        assert len(rt.requests) == 1


def test_half_a_frame_ends_at_the_deadline(sock_path: Path) -> None:
    def half(sock: socket.socket) -> None:
        sock.sendall(b"\x00\x00\x06\x04")  # 4 of the 9 bytes of a SETTINGS frame header
        silent(sock)

    with FakeRuntime(sock_path, raw=half) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        _fails(client, RuntimeUnavailable, "DEADLINE_EXCEEDED")


def test_a_reply_without_trailers_ends_at_the_deadline_and_the_next_call_reconnects(sock_path: Path) -> None:
    calls: list[int] = []

    def no_trailers(peer: Peer, request: Request) -> None:
        calls.append(request.stream_id)
        if len(calls) > 1:
            version_reply(peer, request)
            return
        raw = message("VersionResponse", runtime_name="fake").SerializeToString()
        peer.headers(request.stream_id)
        peer.data(request.stream_id, b"\x00" + len(raw).to_bytes(4, "big") + raw)

    with FakeRuntime(sock_path, no_trailers) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        _fails(client, RuntimeUnavailable, "DEADLINE_EXCEEDED")
        assert client.version().runtime_name == "fake"
        assert rt.accepted == 2


def test_a_slow_dribble_cannot_stretch_the_deadline(sock_path: Path) -> None:
    def dribble(sock: socket.socket) -> None:
        sock.settimeout(0.2)
        for _ in range(100):
            sock.sendall(b"\x00")
            time.sleep(0.1)

    with FakeRuntime(sock_path, raw=dribble) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        _fails(client, RuntimeUnavailable, "DEADLINE_EXCEEDED")


def test_calls_from_two_threads_share_the_connection_one_at_a_time(sock_path: Path) -> None:
    import threading

    with FakeRuntime(sock_path) as rt, RuntimeClient(rt.endpoint, timeout=5.0) as client:
        names: list[str] = []
        threads = [threading.Thread(target=lambda: names.append(client.version().runtime_name)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert names == ["fake"] * 8 and rt.accepted == 1


# --- flow control and the size cap -------------------------------------------------------------------


def test_replies_beyond_the_64k_windows_are_acknowledged(sock_path: Path) -> None:
    """1,000 sandboxes are about 240 KB: more than the stream's and the connection's first window, so the
    reply arrives only if the client hands the window back; over several calls the connection's window
    would run dry without it."""
    raw = _sandboxes(1000)
    assert len(raw) > 3 * 65535

    def listing(peer: Peer, request: Request) -> None:
        peer.headers(request.stream_id)
        peer.data(request.stream_id, b"\x00" + len(raw).to_bytes(4, "big") + raw)
        peer.trailers(request.stream_id)

    with FakeRuntime(sock_path, listing) as rt, RuntimeClient(rt.endpoint, timeout=5.0) as client:
        for _ in range(3):
            items = client.list_sandboxes()
            assert len(items) == 1000 and items[999].metadata.uid == "uid-999"
        assert rt.window_updates > 0 and rt.accepted == 1


def test_a_reply_over_the_size_cap_is_refused_clearly(sock_path: Path) -> None:
    raw = _sandboxes(50)

    def listing(peer: Peer, request: Request) -> None:
        peer.headers(request.stream_id)
        peer.data(request.stream_id, b"\x00" + len(raw).to_bytes(4, "big") + raw)
        peer.trailers(request.stream_id)

    with FakeRuntime(sock_path, listing) as rt, \
            RuntimeClient(rt.endpoint, timeout=5.0, max_message=1000) as client:
        with pytest.raises(RuntimeCallError) as caught:
            client.list_sandboxes()
        assert caught.value.code == "RESOURCE_EXHAUSTED"
        assert f"received message larger than max ({len(raw)} vs. 1000)" in str(caught.value)


def test_a_compressed_reply_is_refused_clearly(sock_path: Path) -> None:
    def compressed(peer: Peer, request: Request) -> None:
        peer.reply(request.stream_id, message("VersionResponse", runtime_name="fake"), flag=1)

    with FakeRuntime(sock_path, compressed) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        error = _fails(client, RuntimeCallError, "INTERNAL")
        assert "compressed" in str(error)


def test_a_reply_that_is_not_the_message_or_not_whole_is_an_error(sock_path: Path) -> None:
    def cut(peer: Peer, request: Request) -> None:
        peer.headers(request.stream_id)
        peer.data(request.stream_id, b"\x00\x00\x00\x00\x10abc")  # says 16 bytes, carries 3
        peer.trailers(request.stream_id)

    with FakeRuntime(sock_path, cut) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        assert "not one whole message" in str(_fails(client, RuntimeCallError, "INTERNAL"))

    def garbage(peer: Peer, request: Request) -> None:
        peer.headers(request.stream_id)
        peer.data(request.stream_id, b"\x00\x00\x00\x00\x03\xff\xff\xff")
        peer.trailers(request.stream_id)

    sock_path.unlink()
    with FakeRuntime(sock_path, garbage) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        assert "not a VersionResponse" in str(_fails(client, RuntimeCallError, "INTERNAL"))


# --- statuses ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "kind", "code"), [
    (12, RuntimeCallError, "UNIMPLEMENTED"), (4, RuntimeUnavailable, "DEADLINE_EXCEEDED"),
    (14, RuntimeUnavailable, "UNAVAILABLE"), (1, RuntimeUnavailable, "CANCELLED"),
    (13, RuntimeCallError, "INTERNAL"), (2, RuntimeCallError, "UNKNOWN"), (99, RuntimeCallError, "UNKNOWN"),
])
def test_trailers_only_statuses_map_to_the_callers_errors(sock_path: Path, status: int, kind: type[CRIError],
                                                          code: str) -> None:
    def fail(peer: Peer, request: Request) -> None:
        peer.status_only(request.stream_id, status, "runtime says: 100%25 no")

    with FakeRuntime(sock_path, fail) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        assert "runtime says: 100% no" in str(_fails(client, kind, code))
        _fails(client, kind, code)
        assert rt.accepted == 1  # a status is an answer: the connection stays


def test_not_found_in_trailers_after_headers_is_an_answer(sock_path: Path) -> None:
    def not_found(peer: Peer, request: Request) -> None:
        peer.headers(request.stream_id)
        peer.trailers(request.stream_id, 5, "an error occurred when try to find sandbox")

    with FakeRuntime(sock_path, not_found) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        assert client.sandbox_status("abc") is None
        assert client.stop_sandbox("abc") is False and client.remove_sandbox("abc") is False


def test_trailers_without_a_status_and_http_errors(sock_path: Path) -> None:
    def no_status(peer: Peer, request: Request) -> None:
        peer.headers(request.stream_id)
        peer.conn.send_headers(request.stream_id, [("x-other", "1")], end_stream=True)
        peer.flush()

    with FakeRuntime(sock_path, no_status) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        assert "without a grpc-status" in str(_fails(client, RuntimeCallError, "INTERNAL"))

    def http_404(peer: Peer, request: Request) -> None:
        peer.headers(request.stream_id, status=404, end=True)

    sock_path.unlink()
    with FakeRuntime(sock_path, http_404) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        _fails(client, RuntimeCallError, "UNIMPLEMENTED")


# --- resets, GOAWAY, closed connections --------------------------------------------------------------


@pytest.mark.parametrize(("error", "kind", "code"), [
    (0x7, RuntimeUnavailable, "UNAVAILABLE"), (0x8, RuntimeUnavailable, "CANCELLED"),
    (0x2, RuntimeCallError, "INTERNAL"),
])
def test_rst_stream_fails_the_call_and_keeps_the_connection(sock_path: Path, error: int, kind: type[CRIError],
                                                           code: str) -> None:
    def reset(peer: Peer, request: Request) -> None:
        if request.stream_id == 1:
            with peer.lock:
                peer.conn.reset_stream(request.stream_id, error)
                peer.flush()
        else:
            version_reply(peer, request)

    with FakeRuntime(sock_path, reset) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        _fails(client, kind, code)
        assert client.version().runtime_name == "fake" and rt.accepted == 1


def _goaway_first(rtref: list[FakeRuntime], *, last: Callable[[int], int], times: int = 1) -> Callable[
        [Peer, Request], None]:
    """A handler that answers the first `times` requests with a GOAWAY naming `last(stream id)` as the last
    stream it processed, and every later one with a version reply."""
    def handler(peer: Peer, request: Request) -> None:
        if len(rtref[0].requests) <= times:
            with peer.lock:
                peer.conn.close_connection(last_stream_id=last(request.stream_id))
                peer.flush()
        else:
            version_reply(peer, request)
    return handler


@pytest.mark.parametrize("last", [lambda sid: sid - 1, lambda sid: 0])
def test_a_goaway_below_the_calls_stream_sends_it_once_more_on_a_new_connection(
        sock_path: Path, last: Callable[[int], int]) -> None:
    """The runtime says it did not process the request (its last stream is below ours): sent again."""
    rtref: list[FakeRuntime] = []
    with FakeRuntime(sock_path, _goaway_first(rtref, last=last)) as rt, \
            RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        rtref.append(rt)
        assert client.version().runtime_name == "fake"
        assert rt.accepted == 2 and len(rt.requests) == 2 and client.connections == 2


@pytest.mark.parametrize("last", [lambda sid: sid, lambda sid: sid + 2, lambda sid: 2**31 - 1])
def test_a_goaway_at_or_above_the_calls_stream_resends_only_a_call_safe_to_send_twice(
        sock_path: Path, last: Callable[[int], int]) -> None:
    """The runtime may have acted on the request: a read (or the CRI's idempotent stop/remove) goes once more
    on a new connection; a call that would make a second object (RunPodSandbox) fails, sent once."""
    rtref: list[FakeRuntime] = []
    with FakeRuntime(sock_path, _goaway_first(rtref, last=last)) as rt, \
            RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        rtref.append(rt)
        assert client.version().runtime_name == "fake"
        assert rt.accepted == 2 and len(rt.requests) == 2
    sock_path.unlink()
    rtref.clear()
    with FakeRuntime(sock_path, _goaway_first(rtref, last=last)) as rt, \
            RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        rtref.append(rt)
        with pytest.raises(RuntimeUnavailable, match="GOAWAY") as caught:
            client.call("RunPodSandbox", message("RunPodSandboxRequest"), "RunPodSandboxResponse")
        assert caught.value.code == "UNAVAILABLE"
        assert len(rt.requests) == 1 and rt.accepted == 1
        assert client.version().runtime_name == "fake" and rt.accepted == 2  # the next call reconnects


def test_a_second_goaway_fails_the_call_and_the_next_call_reconnects(sock_path: Path) -> None:
    rtref: list[FakeRuntime] = []
    with FakeRuntime(sock_path, _goaway_first(rtref, last=lambda sid: 0, times=2)) as rt, \
            RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        rtref.append(rt)
        assert "GOAWAY" in str(_fails(client, RuntimeUnavailable, "UNAVAILABLE"))
        assert len(rt.requests) == 2 and rt.accepted == 2
        assert client.version().runtime_name == "fake" and rt.accepted == 3


def test_a_goaway_or_close_while_idle_is_noticed_before_the_next_call(sock_path: Path) -> None:
    """A runtime restarted between two scans: the next call opens a new connection instead of failing."""
    peers: list[Peer] = []

    def remember(peer: Peer, request: Request) -> None:
        peers.append(peer)
        version_reply(peer, request)

    with FakeRuntime(sock_path, remember) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        client.version()
        with peers[-1].lock:
            peers[-1].conn.close_connection()
            peers[-1].flush()
        time.sleep(0.1)
        assert client.version().runtime_name == "fake" and rt.accepted == 2
        peers[-1].sock.shutdown(socket.SHUT_RDWR)
        time.sleep(0.1)
        assert client.version().runtime_name == "fake" and rt.accepted == 3 and client.connections == 3


def test_a_connection_closed_mid_reply_is_unavailable_and_the_next_call_reconnects(sock_path: Path) -> None:
    closed: list[int] = []

    def close(peer: Peer, request: Request) -> None:
        if not closed:
            closed.append(request.stream_id)
            peer.headers(request.stream_id)
            peer.sock.shutdown(socket.SHUT_RDWR)
        else:
            version_reply(peer, request)

    with FakeRuntime(sock_path, close) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        _fails(client, RuntimeUnavailable, "UNAVAILABLE")
        assert client.version().runtime_name == "fake" and rt.accepted == 2


def test_no_socket_and_a_refusing_socket_are_unavailable(sock_path: Path) -> None:
    with RuntimeClient(f"unix://{sock_path}", timeout=TIMEOUT) as client:
        _fails(client, RuntimeUnavailable, "UNAVAILABLE")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    listener.close()  # the file stays, nobody listens
    with RuntimeClient(f"unix://{sock_path}", timeout=TIMEOUT) as client:
        assert "ConnectionRefusedError" in str(_fails(client, RuntimeUnavailable, "UNAVAILABLE"))



def _early_peer(answer: str) -> Callable[[socket.socket], None]:
    """A runtime whose stream window (10 bytes) holds a status request back, and that answers from the
    request's headers alone: a trailers-only NOT_FOUND, a whole OK reply, or an OK message whose trailers
    only come once the window was opened and the whole request received."""
    def early(sock: socket.socket) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 10})
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        sock.settimeout(2)
        ok = message("PodSandboxStatusResponse", info={"early": "yes"}).SerializeToString()
        headers = [(":status", "200"), ("content-type", "application/grpc")]
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.RequestReceived):
                    sid = event.stream_id
                    if answer == "not_found":
                        conn.send_headers(sid, [*headers, ("grpc-status", "5")], end_stream=True)
                    else:
                        conn.send_headers(sid, headers)
                        conn.send_data(sid, b"\x00" + len(ok).to_bytes(4, "big") + ok)
                        if answer == "ok":
                            conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)
                        else:  # the message now, the rest once the request is whole
                            sock.sendall(conn.data_to_send())
                            time.sleep(0.2)
                            conn.increment_flow_control_window(1 << 20, stream_id=sid)
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded) and answer == "message":
                    conn.send_headers(event.stream_id, [("grpc-status", "0")], end_stream=True)
            sock.sendall(conn.data_to_send())

    return early


@pytest.mark.parametrize("answer", ["not_found", "ok", "message"])
def test_an_answer_before_the_whole_request_was_received_is_no_answer(sock_path: Path, answer: str) -> None:
    """HTTP/2 lets a server answer before the request ends, but a unary answer rests on the whole request:
    a NOT_FOUND (or an OK status) given while the request is still held back by the runtime's window is
    not the runtime's word on that sandbox. The call fails at once and the connection is dropped."""
    with FakeRuntime(sock_path, raw=_early_peer(answer)) as rt, RuntimeClient(rt.endpoint, timeout=5.0) as client:
        start = time.monotonic()
        with pytest.raises(RuntimeCallError) as caught:
            client.sandbox_status("x" * 1000)
        assert time.monotonic() - start < 4.0
        assert caught.value.code == "INTERNAL" and "before it received the whole request" in str(caught.value)
        with pytest.raises(RuntimeCallError):
            client.sandbox_status("y" * 1000)
        assert rt.accepted == 2 and client.connections == 2


def test_a_reply_after_the_whole_request_beyond_the_window_is_the_answer(sock_path: Path) -> None:
    """The same small window, answered after the request ended: the answer stands."""
    def status(peer: Peer, request: Request) -> None:
        peer.reply(request.stream_id, message("PodSandboxStatusResponse", info={"size": str(len(request.body))}))

    with FakeRuntime(sock_path, status, window=10) as rt, RuntimeClient(rt.endpoint, timeout=5.0) as client:
        reply = client.sandbox_status("x" * 1000)
        assert reply is not None and int(reply.info["size"]) > 1000 and rt.accepted == 1


# --- a connection the runtime closed while idle ----------------------------------------------------


def test_a_connection_closed_after_the_idle_check_sends_the_unsent_request_once_more(sock_path: Path) -> None:
    """The runtime closes the connection between the idle check and the request (here it shuts its side for
    reading: the client's poll sees nothing pending, and its first send fails with EPIPE before the kernel
    took a byte). The runtime cannot have seen the request: it goes once more on a new connection."""
    peers: list[Peer] = []

    def remember(peer: Peer, request: Request) -> None:
        peers.append(peer)
        version_reply(peer, request)

    with FakeRuntime(sock_path, remember) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        client.version()
        peers[-1].sock.shutdown(socket.SHUT_RD)
        time.sleep(0.05)
        assert client.version().runtime_name == "fake"
        assert rt.accepted == 2 and client.connections == 2 and len(rt.requests) == 2


def test_a_request_the_runtime_may_have_seen_is_never_sent_again(sock_path: Path) -> None:
    """Closed once the request was taken (read whole, then the connection shut): UNAVAILABLE, one request."""
    def close(peer: Peer, request: Request) -> None:
        peer.sock.shutdown(socket.SHUT_RDWR)

    with FakeRuntime(sock_path, close) as rt, RuntimeClient(rt.endpoint, timeout=TIMEOUT) as client:
        _fails(client, RuntimeUnavailable, "UNAVAILABLE")
        time.sleep(0.05)
        assert len(rt.requests) == 1 and rt.accepted == 1
        _fails(client, RuntimeUnavailable, "UNAVAILABLE")  # a new connection (nothing reused), no resend
        assert len(rt.requests) == 2 and rt.accepted == 2


def test_a_request_a_new_connection_cannot_carry_fails_without_a_second_try(sock_path: Path) -> None:
    """A connection this call opened gives no reason to try again: a runtime that takes the preface and
    then shuts its side for reading fails the call as unavailable, one connection later."""
    def shut_after_settings(sock: socket.socket) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        sock.settimeout(2)
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return
            events = conn.receive_data(chunk)
            sock.sendall(conn.data_to_send())
            if any(isinstance(e, h2.events.SettingsAcknowledged) for e in events):
                sock.shutdown(socket.SHUT_RD)
                time.sleep(3)
                return

    with FakeRuntime(sock_path, raw=shut_after_settings) as rt, RuntimeClient(rt.endpoint, timeout=1.0) as client:
        with pytest.raises(RuntimeUnavailable):  # EPIPE, or the deadline when the request went out first
            client.version()
        assert rt.accepted == 1 and client.connections <= 1
