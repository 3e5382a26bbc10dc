"""Connecting to the API server: each read of the TLS handshake was bounded by the connect timeout, the
handshake was not. A server (or a proxy, or a middlebox) that accepts the connection and then sends its
handshake a byte at a time, each byte within the timeout, held a live GET, a list, a write or a watch's
start for as long as it cared to. The whole handshake now ends within the connect timeout (and within the
answer's deadline), and the call fails with the reason. A raw socket server on loopback plays the API
server; the client is the one the agent and the controller build (`make_client`)."""

from __future__ import annotations

import functools
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import lightkube
import pytest
from lightkube.resources.core_v1 import Pod

from nodegc.api.client import make_client
from nodegc.api.errors import KubeError
from nodegc.api.reads import get_live
from tests.adversarial.found11.test_trickled_writes import bounded
from tests.api.fakeapi import write_kubeconfig

TIMEOUT = 1.0
BOUND = 5 * TIMEOUT
"""The handshake within the connect timeout, the whole answer within 3 read timeouts, and some slack."""
SERVER_GIVES_UP = 20.0
"""The test server stops after this long (a client without bounds waited this long)."""


class HandshakeServer:
    """Accepts every connection, reads the ClientHello, then answers with a TLS record header announcing a
    long ServerHello whose bytes come one every TIMEOUT/4 s (`trickle`), or never answers at all."""

    def __init__(self, *, trickle: bool) -> None:
        self.trickle = trickle
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        ends = time.monotonic() + SERVER_GIVES_UP
        with conn:
            try:
                conn.settimeout(SERVER_GIVES_UP)
                conn.recv(65536)  # the ClientHello
                if self.trickle:
                    conn.sendall(b"\x16\x03\x03\x40\x00")  # a handshake record of 16 KiB to come
                while time.monotonic() < ends and not self.stop.is_set():
                    if self.trickle:
                        conn.sendall(b"\x02")
                    time.sleep(TIMEOUT / 4)
            except OSError:
                pass

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def _kubeconfig(path: Path, port: int) -> Path:
    return write_kubeconfig(path, f"https://127.0.0.1:{port}")


@pytest.fixture(params=[True, False], ids=["trickled", "silent"])
def server(request: pytest.FixtureRequest) -> Iterator[HandshakeServer]:
    s = HandshakeServer(trickle=request.param)
    yield s
    s.close()


@pytest.fixture
def client(server: HandshakeServer, tmp_path: Path) -> Iterator[lightkube.Client]:
    c = make_client(_kubeconfig(tmp_path / "kubeconfig", server.port), timeout=TIMEOUT)
    yield c
    c.close()


def test_a_live_get_fails_within_the_bound_when_the_handshake_never_ends(server: HandshakeServer,
                                                                         client: lightkube.Client) -> None:
    took, _, error = bounded(lambda: get_live(client, Pod, namespace="default", name="web", what="live GET"))
    assert server.accepted
    assert isinstance(error, KubeError), error
    assert took < BOUND, f"{took:.1f}s"
    if server.trickle:
        assert "handshake" in str(error), error


def test_a_client_built_outside_make_client_without_timeouts_is_refused(tmp_path: Path) -> None:
    """Every request's bounds (connect, each read, the whole answer: 3 read timeouts) rest on the client's
    timeouts; a lightkube client built elsewhere with none waited on a silent server for as long as it
    stayed silent. Such a client is refused before anything is sent, with the reason."""
    import httpx2

    server = HandshakeServer(trickle=False)
    try:
        config = lightkube.KubeConfig.from_file(_kubeconfig(tmp_path / "kubeconfig", server.port))
        for timeout in (httpx2.Timeout(None), httpx2.Timeout(TIMEOUT, read=None), httpx2.Timeout(TIMEOUT, pool=None)):
            with lightkube.Client(config, timeout=timeout) as client:
                took, _, error = bounded(functools.partial(get_live, client, Pod, namespace="default", name="web",
                                                           what="live GET"))
            assert isinstance(error, KubeError), error
            assert took < BOUND, f"{took:.1f}s"
            assert "timeout" in str(error), error
        assert not server.accepted
    finally:
        server.close()


class _ThroughTLSProxy:
    """The stream httpcore hands out through an HTTPS proxy: its handshake to the API server goes through
    httpcore's own TLS-in-TLS stream, which bounds each read of the handshake, not the handshake (on a plain
    socket CPython bounds the whole handshake by the timeout). Here on a plain connection to the server."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> object:
        from httpcore2._backends.sync import TLSinTLSStream

        return TLSinTLSStream(self.sock, ssl_context, server_hostname, timeout)

    def get_extra_info(self, info: str) -> object:
        return self.sock if info == "socket" else None

    def close(self) -> None:
        self.sock.close()


def test_a_handshake_through_a_tls_proxy_ends_within_the_connect_timeout() -> None:
    import httpcore2

    from nodegc.api.streaming import _BoundedStream

    server = HandshakeServer(trickle=True)
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT)
        stream = _BoundedStream(_ThroughTLSProxy(sock))  # type: ignore[arg-type]
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        took, _, error = bounded(lambda: stream.start_tls(context, "kubernetes", timeout=TIMEOUT))
        assert isinstance(error, httpcore2.ConnectTimeout), error
        assert "handshake" in str(error)
        assert took < BOUND, f"{took:.1f}s"
    finally:
        server.close()
