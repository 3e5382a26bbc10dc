"""A bounded unary gRPC client for the CRI RuntimeService on the runtime's unix socket.

gRPC over HTTP/2 is spoken directly with the `h2` state machine on a blocking unix socket: one
connection per client, reused by its calls (one at a time), with a request of one length-prefixed
message (`content-type: application/grpc`, `te: trailers`, `grpc-timeout`) and a reply of one message
and its trailers (or trailers only). Every call has one deadline (the client's timeout) over connect,
send and receive: a peer that accepts and says nothing, stops in the middle of a frame or never sends
its trailers ends the call at the deadline, never later.

Failures split in two: the runtime could not be asked (no socket, refused, reset, closed, GOAWAY before
the reply, deadline, UNAVAILABLE) is `RuntimeUnavailable`, which callers treat as "the runtime's word is
missing"; any other status (or a reply that breaks the protocol) is `RuntimeCallError`. NOT_FOUND on a
status, stop or remove is an answer, not a failure. After any failure but a status the connection is
dropped and the next call opens a new one; so it is when the socket path no longer leads to the socket file
it was opened through (a runtime restarted on the path, while the old process still serves what it had).

Between calls nobody reads the connection: before a call sends anything, what the runtime sent meanwhile
(PINGs, SETTINGS, GOAWAY, EOF) is processed, and a connection found closed is replaced. When the runtime
closes it after that check but before the kernel took any byte of the request (the first send fails with
EPIPE), the request is sent once more on a new connection: the runtime cannot have seen it. Once a byte went
out, a closed connection fails the call (UNAVAILABLE), never sends the request again, with one exception,
GOAWAY (h2 reads nothing on a connection after it): a call whose stream is above the GOAWAY's last stream id
(the runtime did not process it, RFC 9113 6.8; unless it had begun to answer it), or at or below it when the
call is a read or the CRI's idempotent stop or remove, is sent once more on a new connection within the same
deadline; a second GOAWAY, or one that may have acted on any other call, fails it (UNAVAILABLE). A reply that
ends or carries a message while part of the request is still held back by the runtime's flow-control window is
no answer to that request: the call fails (INTERNAL) and the connection is dropped.

h2 is imported when the first client is made, not with this module: the endpoint helpers and the error
types are all a node without a runtime socket needs.
"""

from __future__ import annotations

import os
import select
import socket
import stat
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

from nodegc.inventory.cri.messages import SERVICE, message, message_class

if TYPE_CHECKING:
    import h2.connection

DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
CRIO_ENDPOINT = "unix:///var/run/crio/crio.sock"
DEFAULT_TIMEOUT = 10.0
MAX_MESSAGE = 16 * 1024 * 1024  # what the kubelet allows a reply to be
_AUTHORITY = "localhost"  # what grpc-go and the kubelet send on a unix socket
_READ = 64 * 1024

# grpc status codes (https://grpc.github.io/grpc/core/md_doc_statuscodes.html), by number.
STATUS_NAMES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
    "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
)
# An HTTP status other than 200 without a grpc-status, as gRPC maps it (doc/http-grpc-status-mapping.md).
_HTTP_STATUS = {400: "INTERNAL", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "UNIMPLEMENTED",
                429: "UNAVAILABLE", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "UNAVAILABLE"}
# RST_STREAM error codes (RFC 9113 section 7), as gRPC maps them; any other is INTERNAL.
_RESET = {0x7: "UNAVAILABLE", 0x8: "CANCELLED", 0xB: "RESOURCE_EXHAUSTED", 0xC: "PERMISSION_DENIED"}


class CRIError(Exception):
    """Base of the runtime client's errors; keeps the gRPC code name when there is one."""

    def __init__(self, message_: str, *, code: str | None = None) -> None:
        super().__init__(message_)
        self.code = code


class RuntimeUnavailable(CRIError):
    """The runtime could not be asked: no answer is no evidence."""


class RuntimeCallError(CRIError):
    """The runtime answered with an error."""


class EndpointError(ValueError):
    """A runtime endpoint nodegc cannot use."""


def socket_path(endpoint: str) -> Path:
    """The socket of `unix:///path` (the crictl/kubelet form) or of a bare absolute path."""
    if endpoint.startswith("unix://"):
        path = endpoint[len("unix://"):]
    elif endpoint.startswith("/"):
        path = endpoint
    else:
        raise EndpointError(f"runtime endpoint {endpoint!r}: only unix sockets are supported (unix:///path)")
    if not path.startswith("/") or "\0" in path:
        raise EndpointError(f"runtime endpoint {endpoint!r}: the socket path must be absolute")
    return Path(path)


def socket_exists(endpoint: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(socket_path(endpoint)).st_mode)
    except (OSError, EndpointError):
        return False


_UNAVAILABLE = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"})
"""grpc status code names that mean the runtime could not be asked."""


class _Failure(Exception):
    """A call ended without a status from the runtime (the connection is no longer trusted)."""

    def __init__(self, code: str, text: str) -> None:
        super().__init__(text)
        self.code = code


def _timeout_header(seconds: float) -> str:
    """grpc-timeout: at most 8 digits and a unit."""
    ms = max(1, int(seconds * 1000))
    return f"{ms}m" if ms < 10**8 else f"{min(10**8 - 1, int(seconds))}S"


def _error_name(code: Any) -> str:
    """An HTTP/2 error code as RFC 9113 names it (NO_ERROR, PROTOCOL_ERROR...), or its number."""
    return str(getattr(code, "name", code))


def _decode_message(raw: bytes) -> str:
    """grpc-message is percent-encoded UTF-8; shown at most 200 characters, never raising."""
    from urllib.parse import unquote_to_bytes

    return unquote_to_bytes(raw).decode("utf-8", "replace")[:200]


class _GoAway(_Failure):
    """The runtime sent GOAWAY before the reply ended; `processed`: its last stream id is at or above the
    call's, so it may have acted on the request (RFC 9113 6.8: a stream above it was not processed), or it
    had already begun to answer the call (headers or message bytes), which it cannot have done unprocessed."""

    def __init__(self, text: str, *, processed: bool) -> None:
        super().__init__("UNAVAILABLE", text)
        self.processed = processed


_SAFE_AGAIN = frozenset({"Version", "ListPodSandbox", "ListContainers", "PodSandboxStatus", "ContainerStatus",
                         "StopPodSandbox", "RemovePodSandbox"})
"""Calls that can be sent again after the runtime may have acted on them: reads, and the CRI's idempotent
stop and remove (a second one answers for a sandbox already stopped or gone). RunPodSandbox,
CreateContainer and the like are not: a second one would make a second object."""


class _Unsent(Exception):
    """The connection was found closed before any byte of the request was taken by the kernel."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Reply:
    """What one stream received: headers, the message bytes, the trailers, how it ended."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.headers: dict[bytes, bytes] | None = None
        self.trailers: dict[bytes, bytes] | None = None
        self.body = bytearray()
        self.ended = False
        self.reset: int | None = None
        self.window_opened = False

    def add(self, data: bytes) -> None:
        self.body += data
        if len(self.body) >= 5:
            if self.body[0] != 0:
                raise _Failure("INTERNAL", f"the reply has the compressed flag {self.body[0]}: "
                                           "compression was not asked for and is not supported")
            size = int.from_bytes(self.body[1:5], "big")
            if size > self.limit:
                raise _Failure("RESOURCE_EXHAUSTED",
                               f"received message larger than max ({size} vs. {self.limit})")
            if len(self.body) > 5 + size:
                raise _Failure("INTERNAL", "more than one message in a unary reply")


class RuntimeClient:
    """One HTTP/2 connection to the runtime, opened on the first call; a context manager or close().

    Calls from several threads are served one at a time (waiting for the connection counts against the
    waiting call's deadline)."""

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, *, timeout: float = DEFAULT_TIMEOUT,
                 max_message: int = MAX_MESSAGE) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.max_message = max_message
        self._path = str(socket_path(endpoint))
        import h2.config
        import h2.connection
        import h2.events
        import h2.exceptions
        import h2.settings

        self._h2 = h2
        self._sock: socket.socket | None = None
        self._conn: h2.connection.H2Connection | None = None
        self._bound: tuple[int, int] | None = None
        """(device, inode) of the socket file the path led to when the connection was opened."""
        self._lock = threading.Lock()
        self.connections = 0
        """Connections opened so far (one per client while the runtime stays up)."""

    def close(self) -> None:
        with self._lock:
            self._drop()

    def __enter__(self) -> RuntimeClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def call(self, method: str, request: Any, response: str, *, timeout: float | None = None) -> Any:
        """One unary call, bounded by the client's timeout; errors become the client's own."""
        seconds = self.timeout if timeout is None else timeout
        if not seconds > 0:  # nan too: a socket given 0 turns non-blocking, a negative one is a ValueError
            raise RuntimeUnavailable(f"{method} on {self.endpoint}: DEADLINE_EXCEEDED: no time left (timeout "
                                     f"{seconds:g} s): not sent", code="DEADLINE_EXCEEDED")
        deadline = time.monotonic() + seconds
        payload = request.SerializeToString()
        if not self._lock.acquire(timeout=seconds):
            raise RuntimeUnavailable(f"{method} on {self.endpoint}: DEADLINE_EXCEEDED: another call held the "
                                     f"connection for {seconds:g} s", code="DEADLINE_EXCEEDED")
        try:
            try:
                reply = self._unary(f"{SERVICE}/{method}", payload, deadline)
            except _Failure as e:
                self._drop()
                self._raise(method, e.code, str(e), e)
            except self._h2.exceptions.H2Error as e:
                self._drop()
                self._raise(method, "INTERNAL", f"HTTP/2 protocol error: {e!r}", e)
            except TimeoutError as e:
                self._drop()
                self._raise(method, "DEADLINE_EXCEEDED", f"no reply within {seconds:g} s", e)
            except OSError as e:
                self._drop()
                self._raise(method, "UNAVAILABLE", f"{type(e).__name__}: {e}", e)
        finally:
            self._lock.release()
        code, text, body = self._status(reply)
        if code != "OK":
            self._raise(method, code, text, None)
        if body is None:
            self._raise(method, "INTERNAL", "the reply carries no message", None)
        try:
            return message_class(response).FromString(bytes(body))
        except Exception as e:  # protobuf's DecodeError (or a message it cannot build)
            self._raise(method, "INTERNAL", f"the reply is not a {response}: {e}", e)

    def _raise(self, method: str, code: str, text: str, cause: BaseException | None) -> NoReturn:
        full = f"{method} on {self.endpoint}: {code}: {text[:200]}"
        error: CRIError = (RuntimeUnavailable if code in _UNAVAILABLE else RuntimeCallError)(full, code=code)
        raise error from cause

    def _status(self, reply: _Reply) -> tuple[str, str, bytes | None]:
        """The call's status name, message and reply bytes (without the 5-byte prefix)."""
        headers = reply.headers or {}
        if reply.reset is not None:
            return _RESET.get(reply.reset, "INTERNAL"), f"the runtime reset the stream (error {reply.reset})", None
        trailers = reply.trailers if reply.trailers is not None else headers  # trailers-only
        http = headers.get(b":status", b"")
        raw = trailers.get(b"grpc-status")
        if http != b"200":
            # gRPC fails any reply whose HTTP status is not 200, whatever grpc-status it carries (a proxy's,
            # or a runtime's going away): its NOT_FOUND is no runtime's word that a sandbox is gone
            code = _HTTP_STATUS.get(int(http) if http.isdigit() else 0, "UNKNOWN")
            return code, f"HTTP status {http.decode('ascii', 'replace')}, not a gRPC reply", None
        if raw is None:
            return "INTERNAL", "the reply ended without a grpc-status", None
        number = int(raw) if raw.isdigit() else -1
        code = STATUS_NAMES[number] if 0 <= number < len(STATUS_NAMES) else "UNKNOWN"
        text = _decode_message(trailers.get(b"grpc-message", b"")) or code
        if code != "OK":
            return code, text, None
        if not headers.get(b"content-type", b"").startswith(b"application/grpc"):
            return "UNKNOWN", f"the reply's content-type is {headers.get(b'content-type', b'')!r}", None
        if len(reply.body) < 5 or len(reply.body) != 5 + int.from_bytes(reply.body[1:5], "big"):
            return "INTERNAL", f"the reply carries {len(reply.body)} bytes, not one whole message", None
        return "OK", "", bytes(reply.body[5:])

    # --- the connection ----------------------------------------------------------------------------

    def _drop(self) -> None:
        sock, self._sock, self._conn = self._sock, None, None
        if sock is not None:
            sock.close()

    def _connected(self, deadline: float) -> tuple[socket.socket, h2.connection.H2Connection, bool]:
        """The connection to send on, and whether an earlier call opened it."""
        if self._sock is not None and self._conn is not None:
            same_file = self._bound is not None and self._bound == self._socket_file()
            if same_file and not self._stale(self._sock, self._conn, deadline):
                return self._sock, self._conn, True
            self._drop()
        # Taken before the connect: a path replaced in between is seen as replaced at the next call.
        bound = self._socket_file()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self._left(deadline))
            sock.connect(self._path)
            h2 = self._h2
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
            conn.local_settings = h2.settings.Settings(client=True, initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 64 * 1024,
            })
            conn.initiate_connection()
            self._flush(sock, conn, deadline)
            self._settled(sock, conn, deadline)
        except BaseException:
            sock.close()
            raise
        self._sock, self._conn, self._bound = sock, conn, bound
        self.connections += 1
        return sock, conn, False

    def _socket_file(self) -> tuple[int, int] | None:
        """The socket file the path leads to now: a runtime restarted on the path binds a new one, while the
        old process may still serve the connection it had (and list only what it knew)."""
        try:
            st = os.stat(self._path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def _settled(self, sock: socket.socket, conn: h2.connection.H2Connection, deadline: float) -> None:
        """Waits for the runtime's SETTINGS (its preface): the windows and frame size a request must keep to."""
        while True:
            sock.settimeout(self._left(deadline))
            data = sock.recv(_READ)
            if not data:
                raise _Failure("UNAVAILABLE", "the runtime closed the connection before its HTTP/2 preface")
            events = conn.receive_data(data)
            self._flush(sock, conn, deadline)
            for event in events:
                if isinstance(event, self._h2.events.ConnectionTerminated):
                    raise _Failure("UNAVAILABLE", f"the runtime closed the connection (GOAWAY, error "
                                                  f"{_error_name(event.error_code)}) before any call")
                if isinstance(event, self._h2.events.RemoteSettingsChanged):
                    return

    def _stale(self, sock: socket.socket, conn: h2.connection.H2Connection, deadline: float) -> bool:
        """Reads what the runtime sent while the connection was idle (pings, settings, GOAWAY, EOF):
        True when the connection can no longer carry a call."""
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        try:
            while poller.poll(0):
                self._left(deadline)  # a runtime that never stops sending cannot hold the call here
                data = sock.recv(_READ)
                if not data:
                    return True
                for event in conn.receive_data(data):
                    if isinstance(event, self._h2.events.ConnectionTerminated):
                        return True
                    if isinstance(event, self._h2.events.DataReceived):  # a stream given up on earlier
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            self._flush(sock, conn, deadline)
        except (OSError, self._h2.exceptions.H2Error):
            return True
        return conn.state_machine.state == self._h2.connection.ConnectionState.CLOSED

    @staticmethod
    def _left(deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline")
        return left

    def _flush(self, sock: socket.socket, conn: h2.connection.H2Connection, deadline: float) -> None:
        data = conn.data_to_send()
        if data:
            sock.settimeout(self._left(deadline))
            sock.sendall(data)

    def _unary(self, path: str, payload: bytes, deadline: float) -> _Reply:
        sock, conn, reused = self._connected(deadline)
        try:
            return self._exchange(sock, conn, path, payload, deadline)
        except _Unsent as e:
            # The connection the last call left was found closed (the runtime restarted, or closed it while
            # idle, after the check of _stale) before any byte of this request reached it: the runtime cannot
            # have seen the request. Never after a byte went out.
            if not reused:
                raise e.cause from e
        except _GoAway as e:
            # The runtime is going away (a restart, a graceful shutdown) and h2 reads nothing on a connection
            # after its GOAWAY: a request the runtime says it did not process (our stream above its last
            # one), or one that is safe to send twice, goes once more. A second GOAWAY fails the call.
            if e.processed and path.rsplit("/", 1)[-1] not in _SAFE_AGAIN:
                raise
        # Sent once more, on a new connection, within the same deadline.
        self._drop()
        sock, conn, _ = self._connected(deadline)
        try:
            return self._exchange(sock, conn, path, payload, deadline)
        except _Unsent as e:
            raise e.cause from e

    def _exchange(self, sock: socket.socket, conn: h2.connection.H2Connection, path: str, payload: bytes,
                  deadline: float) -> _Reply:
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [
            (b":method", b"POST"), (b":scheme", b"http"), (b":path", path.encode()),
            (b":authority", _AUTHORITY.encode()), (b"content-type", b"application/grpc"), (b"te", b"trailers"),
            (b"grpc-timeout", _timeout_header(deadline - time.monotonic()).encode()),
            (b"user-agent", b"nodegc-cri"),
        ])
        self._first_flush(sock, conn, deadline)  # the headers, even when the window holds every DATA byte back
        reply = _Reply(self.max_message)
        body = memoryview(b"\x00" + len(payload).to_bytes(4, "big") + payload)
        while True:  # the request, within the runtime's flow-control windows
            size = min(len(body), conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
            if size > 0 or not body:
                conn.send_data(sid, bytes(body[:size]), end_stream=size == len(body))
                body = body[size:]
                self._flush(sock, conn, deadline)
                if not body:
                    break
                continue
            reply.window_opened = False
            while not reply.window_opened:
                self._receive(sock, conn, sid, reply, deadline)
                if reply.ended or reply.body:
                    # HTTP/2 lets a server answer early, but a unary gRPC answer depends on the whole request
                    # message: a status or a message before the runtime had it all is not the runtime's word
                    # on this request (a NOT_FOUND there would read as a sandbox gone).
                    code = "INTERNAL" if reply.reset is None else _RESET.get(reply.reset, "INTERNAL")
                    raise _Failure(code, f"the runtime replied before it received the whole request "
                                         f"({len(body)} bytes still held back by its flow-control window): "
                                         "not an answer")
        while not reply.ended:
            self._receive(sock, conn, sid, reply, deadline)
        return reply

    def _first_flush(self, sock: socket.socket, conn: h2.connection.H2Connection, deadline: float) -> None:
        """Sends a request's first bytes: a connection found closed before the kernel took any of them
        (EPIPE, ECONNRESET: a send on a stream socket that takes some bytes returns their count, the error
        comes on the next send) raises _Unsent, the one case where sending the request again is safe."""
        data = memoryview(conn.data_to_send())
        sock.settimeout(self._left(deadline))
        try:
            sent = sock.send(data)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError) as e:
            raise _Unsent(e) from e
        if sent < len(data):
            sock.sendall(data[sent:])

    def _receive(self, sock: socket.socket, conn: h2.connection.H2Connection, sid: int, reply: _Reply,
                 deadline: float) -> None:
        ev = self._h2.events
        sock.settimeout(self._left(deadline))
        data = sock.recv(_READ)
        if not data:
            raise _Failure("UNAVAILABLE", "the runtime closed the connection before the reply ended")
        for event in conn.receive_data(data):
            if isinstance(event, ev.DataReceived):
                # Acknowledged at once (the message is kept whole, bounded by the size cap): WINDOW_UPDATE
                # frames let the runtime send on past the 64 KiB windows.
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                if event.stream_id == sid:
                    reply.add(event.data)
            elif isinstance(event, ev.WindowUpdated | ev.RemoteSettingsChanged):
                reply.window_opened = True  # the connection's, the stream's, or a new initial window
            elif getattr(event, "stream_id", sid) != sid:
                continue  # a stream an earlier call gave up on
            elif isinstance(event, ev.ResponseReceived):
                reply.headers = dict(event.headers)
            elif isinstance(event, ev.TrailersReceived):
                reply.trailers = dict(event.headers)
            elif isinstance(event, ev.StreamEnded):
                reply.ended = True
            elif isinstance(event, ev.StreamReset):
                reply.reset, reply.ended = int(event.error_code if event.error_code is not None else 0x2), True
            elif isinstance(event, ev.ConnectionTerminated):
                if not reply.ended:
                    last = event.last_stream_id
                    why = f"GOAWAY, error {_error_name(event.error_code)}, last stream {last}"
                    # A stream the runtime began to answer was processed, whatever last stream its GOAWAY
                    # names (a runtime or proxy that contradicts itself is not trusted to send a create twice).
                    began = reply.headers is not None or bool(reply.body)
                    raise _GoAway(f"the runtime closed the connection ({why}) before the reply of stream {sid}",
                                  processed=last is None or last >= sid or began)
            elif isinstance(event, ev.PushedStreamReceived):
                raise _Failure("INTERNAL", "the runtime pushed a stream (push is disabled)")
        self._flush(sock, conn, deadline)

    # --- the calls nodegc makes ----------------------------------------------------------------------

    def version(self) -> Any:
        return self.call("Version", message("VersionRequest", version="v1"), "VersionResponse")

    def list_sandboxes(self) -> list[Any]:
        return list(self.call("ListPodSandbox", message("ListPodSandboxRequest"), "ListPodSandboxResponse").items)

    def list_containers(self) -> list[Any]:
        reply = self.call("ListContainers", message("ListContainersRequest"), "ListContainersResponse")
        return list(reply.containers)

    def sandbox_status(self, sandbox_id: str, *, verbose: bool = False) -> Any | None:
        """The sandbox's status, or None when the runtime says it does not exist."""
        request = message("PodSandboxStatusRequest", pod_sandbox_id=sandbox_id, verbose=verbose)
        try:
            return self.call("PodSandboxStatus", request, "PodSandboxStatusResponse")
        except RuntimeCallError as e:
            if e.code == "NOT_FOUND":
                return None
            raise

    def stop_sandbox(self, sandbox_id: str, *, timeout: float | None = None) -> bool:
        """StopPodSandbox (the runtime's own teardown, CNI DEL included); False when it does not exist."""
        return self._idempotent("StopPodSandbox", sandbox_id, timeout)

    def remove_sandbox(self, sandbox_id: str, *, timeout: float | None = None) -> bool:
        return self._idempotent("RemovePodSandbox", sandbox_id, timeout)

    def _idempotent(self, method: str, sandbox_id: str, timeout: float | None) -> bool:
        try:
            self.call(method, message(f"{method}Request", pod_sandbox_id=sandbox_id), f"{method}Response",
                      timeout=timeout)
        except RuntimeCallError as e:
            if e.code == "NOT_FOUND":
                return False
            raise
        return True
