"""The CRI client (unary gRPC over HTTP/2 with h2) against a real containerd: replies and requests beyond
the 64 KiB flow-control windows, one connection for a scan's calls, the size cap, the statuses containerd
sends (NOT_FOUND, UNIMPLEMENTED), a reconnect after a restart, and a restart that closes the connection
after the client's idle check (the unsent request goes again on a new connection). The bad peers are in
tests/unit/test_cri_client.py."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from nodegc.inventory.cri.client import RuntimeCallError, RuntimeClient, RuntimeUnavailable
from nodegc.inventory.cri.messages import message
from nodegc.inventory.cri.reading import RuntimeReader
from nodegc.sandbox.containerd import SandboxContainerd, new_spec
from nodegc.sandbox.node import SandboxNode

Runtime = tuple[SandboxNode, SandboxContainerd]
BIG = 300_000  # bytes of annotations: the request, the list and the status each exceed 64 KiB


def _big_sandbox(rt: SandboxContainerd, name: str) -> str:
    spec = new_spec(name)
    rt.run_sandbox(new_spec(f"{name}-small"))  # so the big one is not alone in the list
    (rt.node.kubelet_root / "pods" / spec.uid).mkdir(parents=True, exist_ok=True)
    (rt.log_root / spec.log_dir_name).mkdir(parents=True, exist_ok=True)
    config = rt.sandbox_config(spec)
    config.annotations["example.com/big"] = "x" * BIG
    with rt.client(timeout=60.0) as c:
        reply = c.call("RunPodSandbox", message("RunPodSandboxRequest", config=config), "RunPodSandboxResponse")
    return str(reply.pod_sandbox_id)


def test_replies_and_requests_beyond_the_windows_on_one_connection(containerd_node: Runtime) -> None:
    _, rt = containerd_node
    sid = _big_sandbox(rt, "big")
    with RuntimeClient(rt.endpoint, timeout=10.0) as client:
        for _ in range(3):  # the connection's window too is handed back, call after call
            listed = {s.id: s for s in client.list_sandboxes()}
            assert len(listed) == 2 and len(listed[sid].annotations["example.com/big"]) == BIG
            status = client.sandbox_status(sid, verbose=True)
            assert status is not None and status.ByteSize() > BIG and status.status.id == sid
        assert client.connections == 1


def test_a_reader_scans_on_one_connection(containerd_node: Runtime) -> None:
    _, rt = containerd_node
    sid = _big_sandbox(rt, "big")
    reader = RuntimeReader(rt.endpoint)
    for _ in range(2):
        view = reader.read()
        assert view.reachable and {s.id for s in view.sandboxes} >= {sid}
    assert reader.client().connections == 1


def test_the_size_cap_refuses_a_large_reply_and_the_next_call_reconnects(containerd_node: Runtime) -> None:
    _, rt = containerd_node
    _big_sandbox(rt, "big")
    with RuntimeClient(rt.endpoint, timeout=10.0, max_message=BIG // 2) as client:
        with pytest.raises(RuntimeCallError) as caught:
            client.list_sandboxes()
        assert caught.value.code == "RESOURCE_EXHAUSTED" and "received message larger than max" in str(caught.value)
        assert client.version().runtime_name == "containerd" and client.connections == 2


def test_containerds_statuses(containerd_node: Runtime) -> None:
    _, rt = containerd_node
    with RuntimeClient(rt.endpoint, timeout=10.0) as client:
        assert client.sandbox_status("0" * 64) is None
        assert client.stop_sandbox("0" * 64) in (True, False)  # containerd answers either way, never an error
        with pytest.raises(RuntimeCallError) as caught:
            client.call("NoSuchMethod", message("VersionRequest"), "VersionResponse")
        assert caught.value.code == "UNIMPLEMENTED"
        assert client.version().runtime_name == "containerd" and client.connections == 1


def test_a_restarted_runtime_is_reached_again_by_the_same_client(containerd_node: Runtime) -> None:
    _, rt = containerd_node
    with RuntimeClient(rt.endpoint, timeout=5.0) as client:
        assert client.version().runtime_name == "containerd"
        rt.kill()
        with pytest.raises(RuntimeUnavailable) as caught:
            client.version()
        assert caught.value.code == "UNAVAILABLE"
        rt.start()
        assert client.version().runtime_name == "containerd" and client.connections == 2


class _RestartAfterIdleCheck(RuntimeClient):
    """Restarts the runtime right after the idle check found the connection open: the race of a runtime
    that closes (dies, restarts, or closes an idle connection) between that check and the request."""

    def __init__(self, rt: SandboxContainerd, **kwargs: Any) -> None:
        super().__init__(rt.endpoint, **kwargs)
        self.rt = rt
        self.armed = False

    def _stale(self, sock: socket.socket, conn: Any, deadline: float) -> bool:
        stale = super()._stale(sock, conn, deadline)
        if self.armed and not stale:
            self.armed = False
            self.rt.kill()
            self.rt.start()
        return stale


def test_a_restart_after_the_idle_check_sends_the_unsent_request_on_a_new_connection(
        containerd_node: Runtime) -> None:
    _, rt = containerd_node
    client = _RestartAfterIdleCheck(rt, timeout=60.0)
    with client:
        assert client.version().runtime_name == "containerd"
        client.armed = True
        assert client.version().runtime_name == "containerd"
        assert not client.armed and client.connections == 2
