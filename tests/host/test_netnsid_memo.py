"""The veth reader's remembered netnsids: taken again only while both namespaces are provably the same.

Each case changes the node right between two scans and compares the scan that may take ids again with one
that remembers nothing (`forget_netnsids`): they must agree, whatever the kernel offers (without unique
mount ids or namespace cookies nothing is remembered, and the two agree trivially).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodegc.hostio import netlink as nl
from nodegc.hostio.libc import unique_mount
from nodegc.hostio.mountinfo import read_mounts
from nodegc.inventory import links
from nodegc.inventory.links import forget_netnsids, scan_veths
from nodegc.inventory.netns import scan_netns
from nodegc.model.resources import VethLink

pytestmark = pytest.mark.host


def _run(*argv: str | Path) -> str:
    proc = subprocess.run([os.fspath(a) for a in argv], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, f"{argv}: {proc.stdout} {proc.stderr}"
    return proc.stdout


def _make_netns(path: Path) -> None:
    path.touch()
    _run("unshare", f"--net={path}", "true")


@dataclass(frozen=True)
class Node:
    node_ns: Path
    netns_dir: Path


def _add_pod(node: Node, name: str, veth: str) -> Path:
    path = node.netns_dir / name
    _make_netns(path)
    _run("nsenter", f"--net={node.node_ns}", "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0",
         "netns", path)
    return path


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    netns_dir = tmp_path / "netns"
    netns_dir.mkdir()
    node_ns = tmp_path / "node"
    _make_netns(node_ns)
    made = Node(node_ns, netns_dir)
    for i in range(3):
        _add_pod(made, f"pod-{i}", f"veth-{i}")
    forget_netnsids()
    yield made
    forget_netnsids()
    for path in [*netns_dir.iterdir(), node_ns]:
        for _ in range(3):  # stacked mounts
            subprocess.run(["umount", str(path)], capture_output=True, timeout=30, check=False)


def _veths(node: Node, net_ns: Path | None = None) -> tuple[tuple[VethLink, ...], tuple[str, ...]]:
    mounts, _ = read_mounts()
    entries, _ = scan_netns(node.netns_dir, mounts)
    veths, problems = scan_veths(netns_entries=entries, net_ns=net_ns or node.node_ns)
    return tuple(sorted(veths, key=lambda v: v.index)), tuple(sorted(f"{p.path}: {p.reason}" for p in problems))


def _fresh(node: Node, net_ns: Path | None = None) -> tuple[tuple[VethLink, ...], tuple[str, ...]]:
    forget_netnsids()
    try:
        return _veths(node, net_ns)
    finally:
        forget_netnsids()


def _remembers() -> bool:
    with nl.RtnlSocket.open() as rtnl:
        cookie = rtnl.netns_cookie()
    return cookie is not None and unique_mount("/") is not None


def _asked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many ids each query of the kernel asks for, from here on."""
    counts: list[int] = []
    real = nl.RtnlSocket.netnsids

    def counting(self: nl.RtnlSocket, fds: list[int]) -> list[int | nl.NetlinkError]:
        counts.append(len(fds))
        return real(self, fds)

    monkeypatch.setattr(nl.RtnlSocket, "netnsids", counting)
    return counts


def test_unchanged_namespaces_are_not_asked_again_and_match_a_fresh_read(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _veths(node)
    assert all(v.peer_netns_path for v in first[0])
    asked = _asked(monkeypatch)
    again = _veths(node)
    assert again == first
    assert sum(asked) == (0 if _remembers() else 3)
    assert _fresh(node) == first


def test_a_namespace_replaced_at_the_same_path_between_two_scans_is_asked_again(node: Node) -> None:
    _veths(node)
    pod = node.netns_dir / "pod-1"
    _run("umount", pod)  # the pod's namespace dies with its veth; a new one comes at the same path
    pod.unlink()
    _add_pod(node, "pod-1", "veth-new")
    _add_pod(node, "pod-9", "veth-9")
    # The old namespace dies asynchronously: while its veth-1 is still listed, nothing resolves to pod-1
    # but the new namespace's veth.
    deadline = time.monotonic() + 10
    while True:
        remembered = _veths(node)
        by_name = {v.name: v for v in remembered[0]}
        assert [v.name for v in remembered[0] if v.peer_netns_path == str(pod)] == ["veth-new"]
        if "veth-1" not in by_name or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert "veth-1" not in by_name
    assert remembered == _fresh(node)
    assert by_name["veth-new"].peer_ns_inode == os.stat(pod).st_ino


def test_a_mount_stacked_on_a_file_between_two_scans_is_seen(node: Node) -> None:
    """pod-0's file now shows pod-2's namespace (a bind mount on top): the scan must see two files on one
    namespace, exactly as a fresh read does, not pod-0's remembered id."""
    _veths(node)
    _run("mount", "--bind", node.netns_dir / "pod-2", node.netns_dir / "pod-0")
    remembered = _veths(node)
    assert remembered == _fresh(node)
    assert any("also names" in p for p in remembered[1])
    by_name = {v.name: v for v in remembered[0]}
    assert by_name["veth-0"].peer_netns_path is None  # its namespace has no file left that shows it


def test_ids_asked_in_one_node_namespace_are_never_taken_in_another(node: Node) -> None:
    """Another node namespace numbers the same pod namespaces differently: its cookie differs."""
    other = node.netns_dir.parent / "other-node"
    _make_netns(other)
    try:
        # In `other`, pod-2 gets the first id (the one pod-0 has in the node namespace).
        _run("nsenter", f"--net={other}", "ip", "link", "add", "veth-o", "type", "veth", "peer", "name", "eth1",
             "netns", node.netns_dir / "pod-2")
        _veths(node)
        remembered = _veths(node, other)
        assert remembered == _fresh(node, other)
        (veth,) = remembered[0]
        assert veth.peer_netns_path == str(node.netns_dir / "pod-2")
    finally:
        subprocess.run(["umount", str(other)], capture_output=True, timeout=30, check=False)


def test_an_unassigned_id_is_asked_every_scan(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """A namespace without an id now may get one at any time (a veth moved in): never remembered."""
    bare = node.netns_dir / "bare"
    _make_netns(bare)
    _veths(node)
    asked = _asked(monkeypatch)
    _run("nsenter", f"--net={node.node_ns}", "ip", "link", "add", "veth-late", "type", "veth", "peer", "name",
         "eth0", "netns", bare)
    remembered = _veths(node)
    assert sum(asked) == (1 if _remembers() else 4)
    by_name = {v.name: v for v in remembered[0]}
    assert by_name["veth-late"].peer_netns_path == str(bare)
    assert remembered == _fresh(node)


def test_forget_netnsids_asks_everything_again(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    _veths(node)
    asked = _asked(monkeypatch)
    forget_netnsids()
    _veths(node)
    assert sum(asked) == 3
    assert links._REMEMBERED.ids_from(None) == {}
