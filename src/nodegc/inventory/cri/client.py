"""A bounded gRPC client for the CRI RuntimeService on the runtime's unix socket.

Every call has a deadline. Failures split in two: the runtime could not be asked (no socket, refused,
deadline, UNAVAILABLE) is `RuntimeUnavailable`, which callers treat as "the runtime's word is missing";
any other status is `RuntimeCallError`. NOT_FOUND on a status, stop or remove is an answer, not a failure.

grpc is imported when the first client is made, not with this module: the endpoint helpers and the
error types are all a node without a runtime socket needs, and grpc alone is about 13 MiB of memory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from nodegc.inventory.cri.messages import SERVICE, message, message_class

DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
CRIO_ENDPOINT = "unix:///var/run/crio/crio.sock"
DEFAULT_TIMEOUT = 10.0
_MAX_MESSAGE = 16 * 1024 * 1024  # what the kubelet allows

if TYPE_CHECKING:
    import grpc


class CRIError(Exception):
    """Base of the runtime client's errors; keeps the gRPC code when there is one."""

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


class RuntimeClient:
    """One channel to the runtime; use as a context manager or call close()."""

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._target = f"unix://{socket_path(endpoint)}"
        import grpc

        self._grpc = grpc
        self._channel = grpc.insecure_channel(
            self._target,
            options=[
                ("grpc.max_receive_message_length", _MAX_MESSAGE),
                ("grpc.enable_retries", 0),
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
            ],
        )

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> RuntimeClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def call(self, method: str, request: Any, response: str, *, timeout: float | None = None) -> Any:
        """One unary call, bounded by the client's timeout; errors become the client's own."""
        rpc: grpc.UnaryUnaryMultiCallable[Any, Any] = self._channel.unary_unary(
            f"{SERVICE}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=message_class(response).FromString,
        )
        try:
            return rpc(request, timeout=self.timeout if timeout is None else timeout)
        except self._grpc.RpcError as e:
            call = isinstance(e, self._grpc.Call)
            code: grpc.StatusCode | None = e.code() if call else None
            details = (e.details() if call else None) or str(e)
            name = code.name if code is not None else None
            text = f"{method} on {self.endpoint}: {name or 'error'}: {details[:200]}"
            if name is None or name in _UNAVAILABLE:
                raise RuntimeUnavailable(text, code=name) from e
            raise RuntimeCallError(text, code=name) from e

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
