"""The CRI reader against a real containerd: what it reads, what it caches, what it says when it cannot."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from nodegc.inventory.cri.reading import RuntimeReader
from nodegc.inventory.cri.runtimes import read_runtime
from nodegc.inventory.scanning import scan_node
from nodegc.sandbox.containerd import SandboxContainerd, new_spec
from nodegc.sandbox.node import NETWORK_NAME, SandboxNode
from nodegc.settings import ScanOptions

Runtime = tuple[SandboxNode, SandboxContainerd]


def test_reads_version_sandboxes_and_containers(containerd_node: Runtime) -> None:
    node, rt = containerd_node
    spec = new_spec("web")
    sid = rt.run_sandbox(spec)
    cid = rt.run_container(sid, spec)
    view = RuntimeReader(rt.endpoint).read()
    assert view.reachable and view.runtime_name == "containerd" and view.runtime_version
    sb = view.sandbox(sid)
    assert sb is not None and sb.ready and sb.status_read
    assert (sb.pod_uid, sb.pod_name, sb.pod_namespace) == (spec.uid, "web", "default")
    # Where the runtime says the netns is (under its state dir here), and the IP host-local reserved.
    assert sb.netns_path and sb.netns_path.startswith(str(rt.state)) and os.path.exists(sb.netns_path)
    assert len(sb.ips) == 1
    reservation = node.ipam_dir / NETWORK_NAME / sb.ips[0]
    assert reservation.read_text().splitlines()[0] == sid
    assert sb.log_directory == str(rt.log_root / spec.log_dir_name)
    assert sb.pid and Path(f"/proc/{sb.pid}").exists()
    assert [(c.id, c.sandbox_id, c.name, c.state) for c in view.containers] == [(cid, sid, "app", "running")]


def test_status_is_cached_and_reread_on_a_state_change(containerd_node: Runtime) -> None:
    _, rt = containerd_node
    sid = rt.run_sandbox(new_spec("a"))
    reader = RuntimeReader(rt.endpoint)
    calls: list[str] = []
    client = reader.client()
    real = client.call

    def counting(method: str, *args: object, **kwargs: object) -> object:
        calls.append(method)
        return real(method, *args, **kwargs)  # type: ignore[arg-type]

    client.call = counting  # type: ignore[method-assign]
    reader.read()
    reader.read()
    assert calls.count("PodSandboxStatus") == 1
    rt.stop_sandbox(sid)
    view = reader.read()
    assert calls.count("PodSandboxStatus") == 2
    sb = view.sandbox(sid)
    assert sb is not None and not sb.ready and sb.status_read


def test_a_dead_runtime_is_unreachable_not_empty(containerd_node: Runtime) -> None:
    _, rt = containerd_node
    rt.run_sandbox(new_spec("a"))
    reader = RuntimeReader(rt.endpoint, timeout=2.0)
    assert reader.read().reachable
    rt.kill()
    view = reader.read()
    assert not view.reachable and not view.sandboxes and view.error
    rt.start()
    assert reader.read().reachable


def test_scan_carries_the_runtime_view(containerd_node: Runtime) -> None:
    node, rt = containerd_node
    sid = rt.run_sandbox(new_spec("a"))
    inv = scan_node(node.roots, ScanOptions(runtime_endpoint=rt.endpoint))
    assert inv.runtime is not None and inv.runtime.reachable
    assert [s.id for s in inv.runtime.sandboxes] == [sid]
    assert scan_node(node.roots).runtime is None


def test_no_socket_means_no_runtime(tmp_path: Path) -> None:
    options = ScanOptions(runtime_endpoint=f"unix://{tmp_path}/none.sock")
    assert read_runtime(options) is None
    assert read_runtime(dataclasses.replace(options, runtime_endpoint=None)) is None
