"""Addresses of namespaces read from the node's namespace through their netnsid (IFA_TARGET_NETNSID) are the
addresses read by entering each namespace, whatever the namespaces hold and however they change between
reads: the same path holding another namespace, addresses added and removed, the pod's link moved out, a
namespace without an id in the node's, a file that is no namespace. Real namespaces and veths."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.hostio import netlink
from nodegc.hostio.netlink import NetlinkError, RtnlSocket
from nodegc.inventory import netns as netns_mod
from nodegc.inventory.netns import NetnsReadError, read_netns_addresses_many

pytestmark = pytest.mark.host


def _run(*argv: str | Path, stdin: str | None = None) -> None:
    proc = subprocess.run([os.fspath(a) for a in argv], input=stdin, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, f"{argv}: {proc.stdout} {proc.stderr}"


def _ip(ns: Path, *args: str | Path) -> None:
    _run("nsenter", f"--net={ns}", "ip", *args)


def _new_ns(path: Path) -> None:
    path.touch()
    _run("unshare", f"--net={path}", "true")


class Node:
    """A node namespace and pod namespaces whose eth0 is a veth to it (so each has a netnsid there)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ns = root / "node"
        self.dir = root / "netns"
        self.dir.mkdir()
        _new_ns(self.ns)
        _ip(self.ns, "link", "set", "lo", "up")
        self.made: list[Path] = [self.ns]
        self._veths = 0

    def pod(self, name: str, *addresses: str, veth: bool = True) -> Path:
        path = self.dir / name
        _new_ns(path)
        self.made.append(path)
        _ip(path, "link", "set", "lo", "up")
        if veth:
            self._veths += 1
            _ip(self.ns, "link", "add", f"veth{self._veths}", "type", "veth", "peer", "name", "eth0", "netns", path)
            _ip(path, "link", "set", "eth0", "up")
        else:
            _ip(path, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")  # both ends inside
        for address in addresses:
            _ip(path, "addr", "add", address, "dev", "eth0", *(("nodad",) if ":" in address else ()))
        return path

    def replace(self, path: Path, *addresses: str) -> None:
        """Another namespace at the same path, tied to the node by a veth of its own."""
        subprocess.run(["umount", str(path)], capture_output=True, timeout=30, check=False)
        path.unlink()
        self.made.remove(path)
        self.pod(path.name, *addresses)

    def close(self) -> None:
        for path in reversed(self.made):
            subprocess.run(["umount", str(path)], capture_output=True, timeout=30, check=False)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = Node(tmp_path)
    yield made
    made.close()


def _as_text(read: list[tuple[str, ...] | NetnsReadError]) -> list[object]:
    return [str(r) if isinstance(r, NetnsReadError) else tuple(sorted(r)) for r in read]


def _by_netnsid(node: Node, paths: list[Path]) -> list[bool]:
    """Which paths the netnsid read answers (the others are entered)."""
    out: list[tuple[str, ...] | NetnsReadError | None] = [None] * len(paths)
    netns_mod._read_by_netnsid(paths, out, node.ns)
    return [found is not None for found in out]


def _same(node: Node, paths: list[Path]) -> list[object]:
    """Both reads, held equal; the caller's thread never leaves its namespace."""
    home = os.stat("/proc/thread-self/ns/net").st_ino
    fresh = _as_text(read_netns_addresses_many(paths, node_ns=node.ns))
    entered = _as_text(read_netns_addresses_many(paths, by_netnsid=False))
    assert fresh == entered
    assert os.stat("/proc/thread-self/ns/net").st_ino == home
    return fresh


def test_the_same_addresses_as_entering_each_namespace(node: Node) -> None:
    plain = node.pod("plain", "10.70.0.2/24")
    dual = node.pod("dual", "10.70.0.3/24", "fd00:70::3/64")
    vip = node.pod("vip", "10.70.0.4/24")
    _ip(vip, "addr", "add", "10.70.9.4/32", "dev", "lo")  # on the loopback: left out
    renamed = node.pod("renamed", "10.70.0.5/24")
    _ip(renamed, "link", "set", "lo", "name", "lo0")
    _ip(renamed, "addr", "add", "10.70.9.5/32", "dev", "lo0")  # the loopback, whatever its name: left out
    called_lo = node.pod("called-lo", "10.70.0.6/24")
    _ip(called_lo, "link", "set", "lo", "name", "lo1")
    _ip(called_lo, "link", "set", "eth0", "down")
    _ip(called_lo, "link", "set", "eth0", "name", "lo")  # the pod's veth called lo: read as any other link
    _ip(called_lo, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
    _ip(called_lo, "addr", "add", "10.70.8.6/24", "dev", "d0")
    altname = node.pod("altname", "10.70.0.7/24")
    _ip(altname, "link", "set", "lo", "name", "lo2")
    _ip(altname, "link", "property", "add", "dev", "eth0", "altname", "lo")  # a lookup by name finds eth0
    empty = node.pod("empty")
    many = node.pod("many")
    batch = "".join(f"addr add 10.71.{i // 250}.{i % 250 + 1}/32 dev eth0\n" for i in range(600))
    _run("nsenter", f"--net={many}", "ip", "-batch", "-", stdin=batch)
    paths = [plain, dual, vip, renamed, called_lo, altname, empty, many]
    assert all(_by_netnsid(node, paths))
    read = _same(node, paths)
    assert read[:7] == [("10.70.0.2",), ("10.70.0.3", "fd00:70::3"), ("10.70.0.4",), ("10.70.0.5",),
                        ("10.70.0.6", "10.70.8.6"), ("10.70.0.7",), ()]
    assert isinstance(read[7], tuple) and len(read[7]) == 600


def test_more_namespaces_than_a_batch_mixed_with_ones_it_cannot_read(node: Node) -> None:
    pods = [node.pod(f"p{i}", f"10.72.{i}.2/24") for i in range(netlink._LOOKUP_BATCH + 5)]
    lone = node.pod("lone", "10.72.200.2/32", veth=False)  # no veth: no id in the node namespace
    leftover = node.dir / "leftover"
    leftover.touch()  # a plain file, no namespace
    paths = [*pods[:3], lone, leftover, node.dir / "absent", *pods[3:], pods[0]]
    assert _by_netnsid(node, paths) == [True] * 3 + [False] * 3 + [True] * (len(pods) - 3) + [True]
    read = _same(node, paths)
    assert read[3] == ("10.72.200.2",)
    assert all(isinstance(r, str) for r in read[4:6])
    assert not (node.dir / "absent").exists()


def test_changes_between_reads_are_seen(node: Node) -> None:
    a = node.pod("a", "10.73.0.2/24")
    b = node.pod("b", "10.73.0.3/24")
    assert _same(node, [a, b]) == [("10.73.0.2",), ("10.73.0.3",)]
    node.replace(a, "10.73.1.2/24")  # another namespace at the same path
    _ip(b, "addr", "add", "10.73.2.3/24", "dev", "eth0")
    _ip(b, "addr", "del", "10.73.0.3/24", "dev", "eth0")
    assert _same(node, [a, b]) == [("10.73.1.2",), ("10.73.2.3",)]
    _ip(b, "link", "set", "eth0", "netns", node.ns)  # the pod's link moved out, its address with it
    assert _by_netnsid(node, [b]) == [True]  # the namespace keeps its id while it lives
    assert _same(node, [a, b]) == [("10.73.1.2",), ()]


def test_a_kernel_without_strict_requests_is_entered(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    a = node.pod("a", "10.74.0.2/24")
    monkeypatch.setattr(RtnlSocket, "strict", lambda self: False)
    assert _by_netnsid(node, [a]) == [False]
    assert _same(node, [a]) == [("10.74.0.2",)]


def test_an_answer_for_another_id_fails_the_read(node: Node) -> None:
    a = node.pod("a", "10.75.0.2/24")
    fd = os.open(a, os.O_RDONLY | os.O_CLOEXEC)
    try:
        with RtnlSocket.open(node.ns) as rtnl:
            assert rtnl.strict()
            (nsid,) = rtnl.netnsids([fd])
            assert isinstance(nsid, int)
            (read,) = rtnl.peer_addresses_off_loopback([nsid])
            assert [address for _, address in read if not address.startswith("fe80")] == ["10.75.0.2"]
            with pytest.raises(NetlinkError):
                rtnl.peer_addresses_off_loopback([nsid + 1000])  # no namespace has it: the kernel refuses
    finally:
        os.close(fd)


def test_no_descriptor_is_left_open(node: Node) -> None:
    paths = [node.pod(f"p{i}", f"10.76.{i}.2/24") for i in range(3)]
    read_netns_addresses_many(paths, node_ns=node.ns)  # threads and buffers made once
    before = set(os.listdir("/proc/self/fd"))
    read_netns_addresses_many([*paths, node.dir / "absent"], node_ns=node.ns)
    assert set(os.listdir("/proc/self/fd")) == before
