"""The one place that uses lightkube internals: raw requests, whose bodies the caller decodes.

lightkube's public `watch()` neither asks for bookmarks nor lets the caller set a read timeout, and both
are what the reflector's stall detector rests on. So a watch is built here from the client's private
generic client (`Client._client`): `prepare_request` (URL and query of a list with watch=true),
`build_adapter_request` (the authenticated httpx2 request, honouring `BasicRequest.timeout`) and
`send(..., stream=True)`. Lists and GETs (`RawReads`) are built the same way, and their failures raised by
the generic client's own `raise_for_status` (lightkube's ApiError, as its `list()` and `get()` raise), but
their bodies are left to `api.reads`: lightkube would decode every object into its typed models, all
fields of all of them, where nodegc reads a few (`api.objects.POD_FIELDS`). `check_lightkube()` refuses a
lightkube outside the range the contract test (tests/api/test_lightkube_contract.py) was run against, or
one that lacks any of those parts, with a clear error instead of an AttributeError inside the watch thread.

A request's timeouts bound each read of the socket, not the answer, and the answer's headers are read inside
the client's transport, where no caller sees them arrive: a server or proxy sending a header line (or
another `100 Continue`) within each read timeout held the caller for as long as it cared to. So every
connection of the client reads through `_BoundedStream`, which stops a read at the deadline the request in
progress on this thread set (`_Deadline`): a list's, a GET's or a write's whole answer, headers included,
and a watch's headers, within BODY_TIMEOUTS read timeouts. The bytes of an answer are bounded too, as they
arrive and decoded (a gzip body counts as what it inflates to): MAX_PAGE_BYTES for a list page,
MAX_OBJECT_BYTES for one object (a GET, a write's answer, a watch line), MAX_ERROR_BYTES for an error's
Status; past its bound the read stops with `AnswerTooLarge`, which fails the call as a timeout does.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import ipaddress
import mmap
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from typing import Any, TypeVar

import httpcore2
import httpx2
import lightkube
from lightkube.core.generic_client import BasicRequest
from lightkube.types import PatchType

from nodegc.api.errors import KubeError

T = TypeVar("T")

SUPPORTED = ((0, 15), (2, 0))
"""lightkube versions [low, high) whose internals the contract test checks."""


@functools.cache
def _installed_version() -> str:
    return metadata.version("lightkube")


def lightkube_version() -> tuple[int, int]:
    text = _installed_version()
    match = re.match(r"(\d+)\.(\d+)", text)
    if match is None:
        raise KubeError(f"cannot read the lightkube version {text!r}")
    return int(match.group(1)), int(match.group(2))


def check_lightkube(client: lightkube.Client) -> Any:
    """The client's generic client, after checking version and shape; KubeError when unusable."""
    version = lightkube_version()
    low, high = SUPPORTED
    if not low <= version < high:
        raise KubeError(
            f"lightkube {version[0]}.{version[1]} is outside the supported range "
            f"{low[0]}.{low[1]} to before {high[0]}.{high[1]} (raw watch requests)"
        )
    generic = getattr(client, "_client", None)
    missing = [name for name in ("prepare_request", "build_adapter_request", "send", "raise_for_status",
                                 "handle_response")
               if not callable(getattr(generic, name, None))]
    if "timeout" not in {f.name for f in dataclasses.fields(BasicRequest)}:
        missing.append("BasicRequest.timeout")
    if not missing and not bound_answers(getattr(generic, "_client", None)):
        missing.append("the connection pools' network backend (bounding a whole answer)")
    if missing:
        raise KubeError(f"this lightkube lacks what raw requests need: {', '.join(missing)}")
    unbounded = unbounded_timeouts(getattr(generic, "_client", None))
    if unbounded:
        raise KubeError(f"the Kubernetes client has no {'/'.join(unbounded)} timeout: a request would wait on a"
                        " silent server for as long as it stays silent (build it with api.client.make_client)")
    return generic


def unbounded_timeouts(http: object) -> list[str]:
    """The timeouts an httpx2 client lacks (None), of those every bound of a request rests on: connecting
    (the TLS handshake too), each read and write, a connection from the pool; the whole answer's deadline is
    BODY_TIMEOUTS read timeouts. A client built elsewhere than `make_client` may have none."""
    timeout = getattr(http, "timeout", None)
    if not isinstance(timeout, httpx2.Timeout):
        return ["connect", "read", "write", "pool"]
    return [name for name in ("connect", "read", "write", "pool") if getattr(timeout, name) is None]


def bound_answers(http: object) -> bool:
    """Make every connection pool of `http` (an httpx2 client: its transport and its proxies' mounts) read
    through `_BoundedStream`; False when a pool's network backend cannot be reached. Idempotent; done before
    the client's first request (a connection keeps the backend it was made with)."""
    transports = [getattr(http, "_transport", None), *(getattr(http, "_mounts", None) or {}).values()]
    pools: list[Any] = [getattr(t, "_pool", None) for t in transports if t is not None]
    if not pools or not all(isinstance(getattr(p, "_network_backend", None), httpcore2.NetworkBackend)
                            for p in pools):
        return False
    for pool in pools:
        if not isinstance(pool._network_backend, _BoundedBackend):
            pool._network_backend = _BoundedBackend(pool._network_backend)
    return True


class WatchRequests:
    """Opens watch streams on one lightkube client (its connection pool, auth and base URL)."""

    def __init__(self, client: lightkube.Client) -> None:
        self._generic = check_lightkube(client)

    def open(
        self,
        resource: type[Any],
        *,
        namespace: str | None,
        params: dict[str, Any],
        connect_timeout: float,
        read_timeout: float,
    ) -> httpx2.Response:
        """A streaming GET of `resource`'s collection with watch=true and `params`; the caller reads and
        closes the response. httpx2 errors (ReadTimeout included) propagate to the caller."""
        basic: BasicRequest = self._generic.prepare_request(
            "list", res=resource, namespace=namespace, watch=True,
            params={k: v for k, v in params.items() if v is not None},
        )
        basic.timeout = httpx2.Timeout(connect_timeout, read=read_timeout)
        request = self._generic.build_adapter_request(basic)
        # Its headers within BODY_TIMEOUTS read timeouts, as any answer; the lines after them are the
        # reflector's to bound (its read timeout and its resync).
        with _Deadline(request):
            response: httpx2.Response = self._generic.send(request, stream=True)
        return response


BODY_TIMEOUTS = 3
"""An answer (a list page, a GET, a write's answer, an error's Status), headers included, must arrive whole
within this many of its request's read timeouts (30 s by default), and a watch's headers too: the timeout
itself bounds each read of the socket only."""


MIB = 1 << 20
MAX_OBJECT_BYTES = 16 * MIB
"""One object as JSON: a GET's answer, a write's, a watch event (one line). etcd refuses a write over 1.5 MiB
(its default --max-request-bytes), so no object it stores is larger; its JSON on the wire is larger than
its protobuf in etcd, seldom twice. Ten times that request bound, and a sixteenth of the agent's memory limit
(256 MiB, deploy/agent-daemonset.yaml)."""
MAX_PAGE_BYTES = 128 * MIB
"""One page of a list, decoded. A page is at most `limit` objects (`api.reads.CHUNK_SIZE`, 500): 256 KiB
each on average fits, where a pod as clusters send it is 5 to 50 KiB (the largest, with long annotations and
managedFields, near 100). 500 objects of the 1.5 MiB etcd allows would be 750 MiB: more than the agent's
memory limit (256 MiB) holds however it reads them, so the bound is the memory the agent can spare for one
page (about 45 MiB before any pod, the page's buffer given back whole after it: `Body`), not that extreme.
A page over it fails the list as any failure does: nothing is reclaimed, the list is retried backed off."""
MAX_ERROR_BYTES = 1 * MIB
"""An error's Status: a few hundred bytes (its message names the object and the reason; a field error
quotes no long value)."""


class AnswerTooLarge(httpx2.RequestError):
    """An answer past its byte bound (MAX_*_BYTES): the read stopped there and the connection is closed; the
    call fails as a timed-out one does (a KubeError naming the bound, from `errors.call`)."""


class Body:
    """A list page's body in an anonymous memory map of its own, unmapped at `close()` (the end of a `with`).

    A page of 500 pods as a cluster sends them is several MB. Kept in the heap (a bytearray), such a buffer
    grows past glibc's mmap threshold once, the threshold rises to its size at its free, and every later
    page then comes from the heap: freed, it stays resident (unless the threshold is fixed, as the agent
    fixes it, as the controller and the CLI do: `hostio.libc.tune_malloc`, unless the operator's MALLOC_* or
    GLIBC_TUNABLES leave it adaptive). A map of its own is
    given back whole whatever the allocator does. It grows by doubling (mremap: a private map; a shared
    anonymous one would fault past its first size); pages never written are never resident."""

    INITIAL = 1 << 20

    def __init__(self, cap: int | None = None) -> None:
        self._cap = cap
        """The map never grows past this (a larger body is refused before it is written: `_Deadline.pour`)."""
        self._map = mmap.mmap(-1, self.INITIAL, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._size = 0
        self._views: list[memoryview] = []

    def extend(self, chunk: bytes) -> None:
        end = self._size + len(chunk)
        if end > len(self._map):
            grown = max(end, 2 * len(self._map))
            self._map.resize(grown if self._cap is None else max(end, min(grown, self._cap)))
        self._map[self._size:end] = chunk
        self._size = end

    def __len__(self) -> int:
        return self._size

    def __bytes__(self) -> bytes:
        return self._map[:self._size]

    def view(self) -> memoryview:
        """The body, without a copy; valid until `close()` (decode it, keep no reference into it)."""
        whole = memoryview(self._map)
        self._views.append(whole)
        part = whole[:self._size]
        self._views.append(part)
        return part

    def close(self) -> None:
        for view in reversed(self._views):
            view.release()
        self._views.clear()
        self._map.close()

    def __enter__(self) -> Body:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RawReads:
    """Lists and GETs on one lightkube client (its connection pool, auth, base URL, the URL and query it
    builds, its error for a failed status); the body comes back undecoded."""

    def __init__(self, client: lightkube.Client) -> None:
        self._generic = check_lightkube(client)

    def list_page(self, resource: type[Any], *, namespace: str | None, params: dict[str, Any]) -> Body:
        """One page of a list (`params`: limit, continue, fieldSelector...), in a `Body` the caller closes.
        Failures raise as lightkube's `list()` raises them (ApiError, httpx2 errors)."""
        basic: BasicRequest = self._generic.prepare_request(
            "list", res=resource, namespace=namespace, params={k: v for k, v in params.items() if v is not None})
        limit = MAX_PAGE_BYTES
        body = Body(limit)
        try:
            self._read(basic, body.extend, limit)
        except BaseException:
            body.close()
            raise
        return body

    def get(self, resource: type[Any], *, namespace: str | None, name: str) -> bytearray:
        """One object; failures (a 404 included) raise as lightkube's `get()` raises them."""
        basic: BasicRequest = self._generic.prepare_request("get", res=resource, name=name, namespace=namespace)
        body = bytearray()
        self._read(basic, body.extend, MAX_OBJECT_BYTES)
        return body

    def _read(self, basic: BasicRequest, into: Callable[[bytes], object], limit: int) -> None:
        """The body, handed to `into` as it arrives (one buffer: httpx2's `read()` joins a list of its chunks,
        so a page of a list would be held twice at its end).

        The request's timeouts bound each read of the socket, not the body: a server or proxy that sends it a
        little at a time, each read within the timeout, would hold the caller for as long as it cared to. The
        whole body must arrive within BODY_TIMEOUTS read timeouts (ReadTimeout otherwise), an error's too, and
        be at most `limit` bytes decoded (MAX_ERROR_BYTES for an error's; AnswerTooLarge otherwise)."""
        request = self._generic.build_adapter_request(basic)
        with _Deadline(request) as deadline:
            response: httpx2.Response = self._generic.send(request, stream=True)
            try:
                if not response.is_success:
                    # The error carries the Status the server sent: read as bounded as any answer.
                    self._generic.raise_for_status(_whole(response, request, deadline))
                deadline.pour(response.iter_bytes(), request, into, limit)
            finally:
                response.close()


class Requests:
    """lightkube's `get`, `create` and `patch` (its URLs, query, field manager, auth, typed decoding and
    ApiError), with the answer read whole within BODY_TIMEOUTS read timeouts as `RawReads` reads: lightkube
    reads it with each read of the socket bounded, not the answer, so a server or proxy trickling an Event's,
    a Lease's or an EndpointSlice patch's answer held the cycle, the controller's sweep or its Lease renewal."""

    def __init__(self, client: lightkube.Client) -> None:
        self._generic = check_lightkube(client)

    def get(self, resource: type[T], name: str, *, namespace: str | None = None) -> T:
        got: T = self._request("get", res=resource, name=name, namespace=namespace)
        return got

    def create(self, obj: T, *, namespace: str | None = None) -> T:
        created: T = self._request("post", obj=obj, namespace=namespace)
        return created

    def patch(self, resource: type[T], name: str, obj: Any, *, namespace: str | None = None,
              patch_type: PatchType = PatchType.STRATEGIC) -> T:
        patched: T = self._request("patch", res=resource, name=name, obj=obj, namespace=namespace,
                                   headers={"Content-Type": patch_type.value})
        return patched

    def _request(self, method: str, *, res: type[Any] | None = None, obj: Any = None, name: str | None = None,
                 namespace: str | None = None, headers: dict[str, str] | None = None) -> Any:
        basic: BasicRequest = self._generic.prepare_request(method, res=res, obj=obj, name=name,
                                                            namespace=namespace, params={}, headers=headers)
        request = self._generic.build_adapter_request(basic)
        with _Deadline(request) as deadline:
            response: httpx2.Response = self._generic.send(request, stream=True)
            try:
                whole = _whole(response, request, deadline)
            finally:
                response.close()
        return self._generic.handle_response(method, whole, basic)


class _Deadline:
    """BODY_TIMEOUTS read timeouts of `request`, from now (none when the request has no read timeout). In a
    `with`, every read and write of a connection on this thread stops at it (`_BoundedStream`): the answer's
    headers are read inside the client's transport."""

    def __init__(self, request: httpx2.Request) -> None:
        read_timeout: float | None = (request.extensions.get("timeout") or {}).get("read")
        self.budget = BODY_TIMEOUTS * read_timeout if read_timeout else None
        self.at = time.monotonic() + self.budget if self.budget is not None else None
        self._token: contextvars.Token[_Deadline | None] | None = None

    def __enter__(self) -> _Deadline:
        self._token = _ANSWER.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _ANSWER.reset(self._token)
            self._token = None

    def late(self) -> str:
        return f"the answer did not arrive whole within {BODY_TIMEOUTS} read timeouts ({self.budget:g}s)"

    def read(self, chunks: Iterator[bytes], request: httpx2.Request, limit: int) -> bytearray:
        body = bytearray()
        self.pour(chunks, request, body.extend, limit)
        return body

    def pour(self, chunks: Iterator[bytes], request: httpx2.Request, into: Callable[[bytes], object],
             limit: int) -> None:
        """Each chunk to `into` as it arrives; ReadTimeout once past the deadline, AnswerTooLarge before a
        chunk that would take the body past `limit` bytes."""
        size = 0
        for chunk in chunks:
            size += len(chunk)
            if size > limit:
                raise AnswerTooLarge(f"the answer is over {limit} bytes ({limit / MIB:g} MiB), its bound",
                                     request=request)
            into(chunk)
            if self.at is not None and time.monotonic() > self.at:
                raise httpx2.ReadTimeout(self.late(), request=request)


def _whole(response: httpx2.Response, request: httpx2.Request, deadline: _Deadline) -> httpx2.Response:
    """The streamed answer as a read one: its bytes decoded (a Content-Encoding undone as they arrive, so a
    small gzip body cannot inflate past the bound afterwards), read within `deadline` and MAX_OBJECT_BYTES
    (MAX_ERROR_BYTES for an error), with its status and its other headers (Content-Type: it decodes as it
    would have)."""
    limit = MAX_OBJECT_BYTES if response.is_success else MAX_ERROR_BYTES
    body = deadline.read(response.iter_bytes(), request, limit)
    headers = [(k, v) for k, v in response.headers.multi_items()
               if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
    return httpx2.Response(response.status_code, headers=headers, content=bytes(body), request=request)


_ANSWER: contextvars.ContextVar[_Deadline | None] = contextvars.ContextVar("nodegc_answer_deadline", default=None)
"""The deadline of the request this thread is sending or reading (None: only each read is bounded)."""


def _left(timeout: float | None) -> tuple[_Deadline | None, float | None]:
    """The deadline in force and the timeout of one socket operation under it (the request's own, or what is
    left of the deadline when that comes first); TimeoutError past it."""
    deadline = _ANSWER.get()
    if deadline is None or deadline.at is None:
        return None, timeout
    left = deadline.at - time.monotonic()
    if left <= 0:
        raise TimeoutError(deadline.late())
    return deadline, left if timeout is None or timeout > left else timeout


class _BoundedStream(httpcore2.NetworkStream):
    """A connection whose reads and writes stop at the deadline of the request in progress (`_Deadline`)."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            deadline, timeout = _left(timeout)
        except TimeoutError as e:
            raise httpcore2.ReadTimeout(str(e)) from None
        try:
            return self._inner.read(max_bytes, timeout)
        except httpcore2.ReadTimeout:
            if deadline is not None and deadline.at is not None and time.monotonic() >= deadline.at:
                raise httpcore2.ReadTimeout(deadline.late()) from None
            raise

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            deadline, timeout = _left(timeout)
        except TimeoutError as e:
            raise httpcore2.WriteTimeout(str(e)) from None
        try:
            self._inner.write(buffer, timeout)
        except httpcore2.WriteTimeout:
            if deadline is not None and deadline.at is not None and time.monotonic() >= deadline.at:
                raise httpcore2.WriteTimeout(deadline.late()) from None
            raise

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:
        """The TLS handshake, whole, within the connect timeout and the deadline of the request in progress.

        Each read of a handshake is bounded by the timeout; the handshake as a whole is by CPython on a plain
        socket, not through a TLS proxy (httpcore's TLS-in-TLS reads record by record), and neither counts
        the request's deadline. A timer shuts the socket down at the bound: a server or proxy that sends its
        handshake a byte at a time stops there, and the request fails with the reason (ConnectTimeout)."""
        try:
            _, budget = _left(timeout)
        except TimeoutError as e:
            raise httpcore2.ConnectTimeout(f"the TLS handshake was not begun: {e}") from None
        if budget is None:  # no bound at all (a client without timeouts is refused: check_lightkube)
            return _BoundedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))
        late = f"the TLS handshake did not end within {budget:g}s"
        raw = self._inner.get_extra_info("socket")
        fired = threading.Event()

        def abort() -> None:
            fired.set()
            if isinstance(raw, socket.socket):
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(raw, socket.SHUT_RDWR)  # the fd's: under any TLS layer

        timer = threading.Timer(budget, abort)
        timer.daemon = True
        timer.start()
        try:
            inner = self._inner.start_tls(ssl_context, server_hostname, budget)
        except httpcore2.ConnectTimeout:
            raise httpcore2.ConnectTimeout(late) from None
        except (httpcore2.ConnectError, httpcore2.ReadError, httpcore2.WriteError, OSError):
            if fired.is_set():
                raise httpcore2.ConnectTimeout(late) from None
            raise
        finally:
            timer.cancel()
        if fired.is_set():  # ended as the timer fired: the socket may be shut down under it
            inner.close()
            raise httpcore2.ConnectTimeout(late)
        return _BoundedStream(inner)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


RESOLVE_WAITING = 16
"""Resolutions still waiting past their caller's budget (their threads stay blocked in the C library) before
no other name is resolved: a call then fails at once, naming the names that wait."""
_resolving: dict[tuple[str, int], tuple[threading.Thread, list[list[str] | BaseException]]] = {}
_resolving_lock = threading.Lock()


def _resolve(host: str, port: int, budget: float) -> list[str]:
    """`host`'s addresses for TCP, in getaddrinfo's order, within `budget` seconds: ConnectTimeout past it,
    ConnectError when the name cannot be resolved. An address is its own answer, without a thread. A
    resolution that outlasts its caller is left to end in its thread, and a later call for the same name and
    port waits on it rather than start another, so a resolver that never answers holds one thread a name."""
    with contextlib.suppress(ValueError):
        return [str(ipaddress.ip_address(host))]
    key = (host, port)
    with _resolving_lock:
        entry = _resolving.get(key)
        if entry is None:
            if len(_resolving) >= RESOLVE_WAITING:
                raise httpcore2.ConnectTimeout(
                    f"resolving {host!r} was not begun: {len(_resolving)} resolutions still wait"
                    f" ({', '.join(sorted(h for h, _ in _resolving)[:3])}...)")
            got: list[list[str] | BaseException] = []

            def run() -> None:
                try:
                    infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
                    got.append(list(dict.fromkeys(str(info[4][0]) for info in infos)))
                except BaseException as e:  # handed to whoever waits
                    got.append(e)
                finally:
                    with _resolving_lock:
                        if _resolving.get(key, (None,))[0] is threading.current_thread():
                            del _resolving[key]

            thread = threading.Thread(target=run, name="nodegc-resolve", daemon=True)
            entry = _resolving[key] = (thread, got)
            thread.start()
    thread, got = entry
    thread.join(budget)
    if not got:
        raise httpcore2.ConnectTimeout(f"resolving {host!r} did not end within {budget:g}s")
    answer = got[0]
    if isinstance(answer, BaseException):
        raise httpcore2.ConnectError(f"cannot resolve {host!r}: {answer}")
    if not answer:
        raise httpcore2.ConnectError(f"cannot resolve {host!r}: no address")
    return answer


class _BoundedBackend(httpcore2.NetworkBackend):
    """A pool's network backend whose connections are `_BoundedStream`s."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore2.NetworkStream:
        """A connection to `host`, its name resolved and every address tried within the connect timeout and
        the deadline of the request in progress, as a whole.

        httpcore connects with `socket.create_connection`: getaddrinfo with no bound of its own (a resolver
        that never answers holds it for as long as the C library retries), then each address in turn with
        the whole timeout, so a name of several silent addresses cost one timeout each. Here the name is
        resolved in a thread waited for the budget (`_resolve`), and the addresses are tried in order, each
        with an even share of what is left (the last one with all of it): ConnectTimeout past the budget,
        naming the name and what was tried."""
        try:
            _, budget = _left(timeout)
        except TimeoutError as e:
            raise httpcore2.ConnectTimeout(f"connecting to {host}:{port} was not begun: {e}") from None
        if budget is None:  # no bound at all (a client without timeouts is refused: check_lightkube)
            return _BoundedStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))
        ends = time.monotonic() + budget
        addresses = _resolve(host, port, budget)
        tried: list[str] = []
        timed_out = False
        for i, address in enumerate(addresses):
            left = ends - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            try:
                return _BoundedStream(self._inner.connect_tcp(address, port, left / (len(addresses) - i),
                                                              local_address, socket_options))
            except httpcore2.ConnectTimeout:
                timed_out = True
                tried.append(f"{address} (no answer)")
            except httpcore2.ConnectError as e:
                tried.append(f"{address} ({e})")
        attempts = f"{len(tried)} of its {len(addresses)} address(es) tried: {', '.join(tried) or 'none'}"
        if timed_out:
            raise httpcore2.ConnectTimeout(f"connecting to {host}:{port} did not end within {budget:g}s"
                                           f" ({attempts})")
        raise httpcore2.ConnectError(f"cannot connect to {host}:{port} ({attempts})")

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore2.NetworkStream:
        return _BoundedStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)
