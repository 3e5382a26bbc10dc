"""A scriptable HTTP/2 peer on a unix socket, for the CRI client's bad cases.

Real answers come from the real containerd of the host tests; this peer plays what a real runtime
rarely does: silence, half frames, missing trailers, resets, GOAWAY, oversized or compressed replies.
A `handler(peer, request)` answers each request; a `raw(sock)` takes over a connection entirely.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings

from nodegc.inventory.cri.messages import message


@dataclass
class Request:
    stream_id: int
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class Peer:
    """One accepted connection, server side."""

    sock: socket.socket
    conn: h2.connection.H2Connection
    windows: threading.Event = field(default_factory=threading.Event)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def headers(self, sid: int, *, status: int = 200, extra: tuple[tuple[str, str], ...] = (),
                end: bool = False) -> None:
        with self.lock:
            self.conn.send_headers(sid, [(":status", str(status)), ("content-type", "application/grpc"), *extra],
                                   end_stream=end)
            self.flush()

    def data(self, sid: int, payload: bytes, *, end: bool = False) -> None:
        """Sends within the client's flow-control windows, waiting for its WINDOW_UPDATEs."""
        view = memoryview(payload)
        while True:
            with self.lock:
                size = min(len(view), self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
                if size or not view:
                    self.conn.send_data(sid, bytes(view[:size]), end_stream=end and size == len(view))
                    view = view[size:]
                    self.flush()
                    if not view:
                        return
                    continue
                self.windows.clear()
            if not self.windows.wait(10):
                raise TimeoutError("the client never opened its window")

    def trailers(self, sid: int, status: int = 0, text: str = "") -> None:
        extra = [("grpc-status", str(status))] + ([("grpc-message", text)] if text else [])
        with self.lock:
            self.conn.send_headers(sid, extra, end_stream=True)
            self.flush()

    def reply(self, sid: int, msg: Any, *, flag: int = 0) -> None:
        """A whole unary reply: headers, one message, trailers with OK."""
        raw = msg.SerializeToString()
        self.headers(sid)
        self.data(sid, bytes([flag]) + len(raw).to_bytes(4, "big") + raw)
        self.trailers(sid)

    def status_only(self, sid: int, status: int, text: str = "") -> None:
        """A trailers-only reply (what a gRPC server sends for an error before any message)."""
        extra = [("grpc-status", str(status))] + ([("grpc-message", text)] if text else [])
        self.headers(sid, extra=tuple(extra), end=True)


Handler = Callable[[Peer, Request], None]


def version_reply(peer: Peer, request: Request) -> None:
    peer.reply(request.stream_id, message("VersionResponse", version="0.1.0", runtime_name="fake",
                                          runtime_version="1", runtime_api_version="v1"))


class FakeRuntime:
    def __init__(self, path: Path, handler: Handler = version_reply,
                 raw: Callable[[socket.socket], None] | None = None,
                 window: int | None = None) -> None:
        self.path = path
        self.endpoint = f"unix://{path}"
        self.handler = handler
        self.raw = raw
        self.window = window
        self.accepted = 0
        self.requests: list[Request] = []
        self.window_updates = 0
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(8)
        self._open: list[socket.socket] = []
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> FakeRuntime:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for s in self._open:
            with contextlib.suppress(OSError):
                s.close()
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._stop:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            self._open.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError, TimeoutError):
            if self.raw is not None:
                self.raw(sock)
                return
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
            if self.window is not None:
                conn.local_settings = h2.settings.Settings(
                    client=False, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self.window})
            conn.initiate_connection()
            peer = Peer(sock, conn)
            peer.flush()
            pending: dict[int, Request] = {}
            while True:
                data = sock.recv(65536)
                if not data:
                    return
                with peer.lock:
                    self._events(peer, conn.receive_data(data), pending)
                    peer.flush()

    def _events(self, peer: Peer, events: list[h2.events.Event], pending: dict[int, Request]) -> None:
        conn = peer.conn
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                pending[event.stream_id] = Request(event.stream_id, {
                    k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
                    for k, v in event.headers})
            elif isinstance(event, h2.events.DataReceived):
                pending[event.stream_id].body += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                request = pending.pop(event.stream_id)
                self.requests.append(request)
                # Answered from another thread, so WINDOW_UPDATEs keep being read meanwhile.
                threading.Thread(target=self._answer, args=(peer, request), daemon=True).start()
            elif isinstance(event, h2.events.WindowUpdated):
                self.window_updates += 1
                peer.windows.set()

    def _answer(self, peer: Peer, request: Request) -> None:
        with contextlib.suppress(OSError, TimeoutError):
            self.handler(peer, request)


def silent(sock: socket.socket) -> None:
    """Accepts and says nothing (reads what comes, so the client's writes never block)."""
    end = time.monotonic() + 30
    sock.settimeout(0.5)
    while time.monotonic() < end:
        try:
            if not sock.recv(65536):
                return
        except TimeoutError:
            continue


def first_request(sock: socket.socket) -> h2.connection.H2Connection:
    """A server connection that has sent its SETTINGS and read the client's preface and first request."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    sock.settimeout(2)
    ended = False
    while not ended:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError("closed")
        ended = any(isinstance(e, h2.events.StreamEnded) for e in conn.receive_data(chunk))
        sock.sendall(conn.data_to_send())
    return conn
