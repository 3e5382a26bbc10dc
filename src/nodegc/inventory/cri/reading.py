"""Reading the runtime's sandboxes and containers into a `RuntimeView`.

A scan costs Version, ListPodSandbox and ListContainers; PodSandboxStatus (verbose: the netns path, the
IPs, the pid) is asked once per sandbox and again only when its state changes, since those facts are
fixed for a sandbox's life. The cache is keyed by sandbox id and creation time, so a reused id is read
anew. Any failure makes the whole view unreachable: a partial list is not the runtime's word.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from nodegc.inventory.cri.client import CRIError, RuntimeClient, socket_exists
from nodegc.inventory.cri.messages import SANDBOX_READY
from nodegc.model.runtime import RuntimeContainer, RuntimeSandbox, RuntimeView
from nodegc.observe.logs import get_logger

log = get_logger(__name__)

_CONTAINER_STATES = {0: "created", 1: "running", 2: "exited", 3: "unknown"}
_MAX_INFO = 4 * 1024 * 1024


def _time(ns: int) -> datetime | None:
    if ns <= 0:
        return None
    try:
        return datetime.fromtimestamp(ns / 1e9, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _verbose_info(info: Any) -> dict[str, Any]:
    """containerd puts one JSON document under "info"; CRI-O spreads its keys. Unreadable is empty."""
    out: dict[str, Any] = {}
    for key, value in dict(info).items():
        if not isinstance(value, str) or len(value) > _MAX_INFO:
            continue
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):  # nested too deeply: unreadable too
            continue
        if key == "info" and isinstance(parsed, dict):
            out.update(parsed)
        else:
            out[key] = parsed
    return out


def _netns_from(info: dict[str, Any]) -> str | None:
    spec = info.get("runtimeSpec")
    linux = spec.get("linux") if isinstance(spec, dict) else None
    namespaces = linux.get("namespaces") if isinstance(linux, dict) else None
    if isinstance(namespaces, list):
        for ns in namespaces:
            if isinstance(ns, dict) and ns.get("type") == "network" and isinstance(ns.get("path"), str):
                return str(ns["path"]) or None
    return None


def sandbox_from_status(reply: Any) -> RuntimeSandbox:
    """A sandbox from a PodSandboxStatus reply (verbose or not)."""
    st = reply.status
    ips = tuple(ip for ip in (st.network.ip, *(a.ip for a in st.network.additional_ips)) if ip)
    info = _verbose_info(reply.info)
    pid = info.get("pid")
    closed = info.get("netNamespaceClosed")
    config = info.get("config")
    log_dir = config.get("log_directory") if isinstance(config, dict) else None
    return RuntimeSandbox(
        id=st.id,
        pod_uid=st.metadata.uid,
        pod_name=st.metadata.name,
        pod_namespace=st.metadata.namespace,
        attempt=int(st.metadata.attempt),
        ready=st.state == SANDBOX_READY,
        created_at=_time(int(st.created_at)),
        ips=ips,
        netns_path=_netns_from(info),
        netns_closed=closed if isinstance(closed, bool) else None,
        pid=pid if isinstance(pid, int) and pid > 0 else None,
        log_directory=log_dir if isinstance(log_dir, str) and log_dir else None,
        status_read=True,
    )


def _sandbox_from_list(item: Any) -> RuntimeSandbox:
    return RuntimeSandbox(
        id=item.id,
        pod_uid=item.metadata.uid,
        pod_name=item.metadata.name,
        pod_namespace=item.metadata.namespace,
        attempt=int(item.metadata.attempt),
        ready=item.state == SANDBOX_READY,
        created_at=_time(int(item.created_at)),
    )


def _container(item: Any) -> RuntimeContainer:
    return RuntimeContainer(
        id=item.id,
        sandbox_id=item.pod_sandbox_id,
        name=item.metadata.name,
        state=_CONTAINER_STATES.get(int(item.state), "unknown"),
        created_at=_time(int(item.created_at)),
    )


def _utcnow() -> datetime:
    return datetime.now(UTC)


class RuntimeReader:
    """Reads one runtime endpoint; keeps the per-sandbox status cache between scans (thread-safe)."""

    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = 10.0,
        state_dir: str | None = None,
        client_factory: Callable[..., RuntimeClient] = RuntimeClient,
        now: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.state_dir = state_dir
        self._client_factory = client_factory
        self._now = now
        self._client: RuntimeClient | None = None
        self._status: dict[tuple[str, int, bool], RuntimeSandbox] = {}
        self._lock = threading.Lock()
        self.seen_reachable = False
        """The runtime answered at least once: from then on a missing socket means unreachable, not absent."""

    def client(self) -> RuntimeClient:
        if self._client is None:
            self._client = self._client_factory(self.endpoint, timeout=self.timeout)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def socket_present(self) -> bool:
        return socket_exists(self.endpoint)

    def read(self) -> RuntimeView:
        with self._lock:
            read_at = self._now()
            try:
                view = self._read(read_at)
            except CRIError as e:
                log.warning("container runtime unreachable", endpoint=self.endpoint, error=str(e))
                return RuntimeView(endpoint=self.endpoint, reachable=False, error=str(e), read_at=read_at,
                                   state_dir=self.state_dir)
            self.seen_reachable = True
            return view

    def _read(self, read_at: datetime) -> RuntimeView:
        client = self.client()
        version = client.version()
        # By id: the runtime lists from a map (containerd: in no stable order), and a view that shows the
        # same sandboxes and containers compares equal to the last one (planning.remembered takes its
        # correlation again).
        listed = sorted(client.list_sandboxes(), key=lambda item: str(item.id))
        containers = tuple(sorted((_container(c) for c in client.list_containers()), key=lambda c: c.id))
        sandboxes: list[RuntimeSandbox] = []
        keep: set[tuple[str, int, bool]] = set()
        for item in listed:
            key = (item.id, int(item.created_at), item.state == SANDBOX_READY)
            keep.add(key)
            cached = self._status.get(key)
            if cached is None:
                reply = client.sandbox_status(item.id, verbose=True)
                # Removed between the list and the status: still the runtime's at list time.
                cached = sandbox_from_status(reply) if reply is not None else _sandbox_from_list(item)
                if reply is not None:
                    self._status[key] = cached
            # The list's state is the newer word for a cached status.
            sandboxes.append(cached if cached.ready == (item.state == SANDBOX_READY)
                             else _sandbox_from_list(item))
        for key in set(self._status) - keep:
            del self._status[key]
        return RuntimeView(
            endpoint=self.endpoint,
            reachable=True,
            runtime_name=version.runtime_name or None,
            runtime_version=version.runtime_version or None,
            api_version=version.runtime_api_version or None,
            sandboxes=tuple(sandboxes),
            containers=containers,
            read_at=read_at,
            state_dir=self.state_dir,
        )

    def fresh_status(self, sandbox_id: str) -> RuntimeSandbox | None:
        """A live PodSandboxStatus (terminate re-verification); None: the runtime does not know the id.
        Raises CRIError when the runtime cannot say."""
        reply = self.client().sandbox_status(sandbox_id, verbose=True)
        return sandbox_from_status(reply) if reply is not None else None
