"""Adversarial, with real namespaces: namespace addresses read through netnsids (IFA_TARGET_NETNSID) when the
ids move. A namespace dies and the id it had in the node's namespace is handed to the next one (the kernel
takes the lowest free id); a namespace's file is left behind unmounted; a namespace mounted again at the path
of a dead one; an id given by hand (`ip netns set`) to a namespace no veth ties to the node; the node's own
namespace under a netns file; files that are no network namespace (a uts namespace, a directory, an empty
file). Each read equals entering every namespace."""

from __future__ import annotations

import struct
import subprocess
import time
from pathlib import Path

from nodegc.hostio import netlink
from nodegc.hostio.netlink import RtnlSocket
from tests.host.test_netns_addresses_by_netnsid import Node, _by_netnsid, _ip, _new_ns, _run, _same, node

__all__ = ["node"]


def _nsid(node: Node, path: Path) -> int:
    with open(path, "rb") as f, RtnlSocket.open(node.ns) as rtnl:
        got = rtnl.netnsids([f.fileno()])[0]
    assert isinstance(got, int)
    return got


def test_an_id_handed_on_to_the_next_namespace(node: Node) -> None:
    first = node.pod("first", "10.72.0.2/24")
    held = _nsid(node, first)
    subprocess.run(["umount", str(first)], capture_output=True, timeout=30, check=True)  # dies: its id is free
    _id_freed(node, held)
    second = node.pod("second", "10.72.0.3/24")
    assert _nsid(node, second) == held  # the id the dead namespace had
    again = node.dir / "first"
    assert again.exists()  # the file of the dead namespace is left: no namespace to read
    read = _same(node, [again, second])
    assert read[1] == ("10.72.0.3",) and isinstance(read[0], str)
    node.made.remove(first)
    again.unlink()
    node.pod("first", "10.72.0.4/24")  # another namespace at the dead one's path
    assert _same(node, [again, second]) == [("10.72.0.4",), ("10.72.0.3",)]


def _id_freed(node: Node, nsid: int) -> None:
    """Wait until the node's namespace no longer lists `nsid` (a dead namespace is cleaned up later)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        listed = subprocess.run(["nsenter", f"--net={node.ns}", "ip", "netns", "list-id"], capture_output=True,
                                text=True, timeout=30, check=True).stdout
        if f"nsid {nsid} " not in listed + " ":
            return
        time.sleep(0.05)
    raise AssertionError(f"netnsid {nsid} still assigned")


def _set_id(node: Node, path: Path, nsid: int) -> None:
    """`ip netns set` by file: the id `nsid` in the node's namespace for the namespace of `path`."""
    with open(path, "rb") as f, RtnlSocket.open(node.ns) as rtnl:
        body = b"\0\0\0\0" + netlink._nla(netlink.NETNSA_NSID, struct.pack("=I", nsid)) + netlink._nla(
            netlink.NETNSA_FD, struct.pack("=I", f.fileno()))
        assert rtnl._acked(netlink.RTM_NEWNSID, [body], ["set netnsid"]) == [None]


def test_an_id_given_by_hand_and_the_nodes_own_namespace(node: Node) -> None:
    lone = node.pod("lone", "10.72.1.2/24", veth=False)  # no veth to the node: no id yet
    assert _by_netnsid(node, [lone]) == [False]
    _set_id(node, lone, 77)
    assert _by_netnsid(node, [lone]) == [True]
    own = node.dir / "own"
    own.touch()
    _run("mount", "--bind", node.ns, own)  # the node's own namespace under a netns file
    node.made.append(own)
    _ip(node.ns, "addr", "add", "10.72.9.1/32", "dev", "lo")
    _ip(node.ns, "link", "add", "n0", "type", "veth", "peer", "name", "n1")
    _ip(node.ns, "addr", "add", "10.72.9.2/24", "dev", "n0")
    assert _same(node, [lone, own]) == [("10.72.1.2",), ("10.72.9.2",)]
    extra = node.dir / "extra"
    _new_ns(extra)
    node.made.append(extra)
    _set_id(node, extra, 78)
    assert _same(node, [extra, lone, own]) == [(), ("10.72.1.2",), ("10.72.9.2",)]


def test_files_that_are_no_network_namespace(node: Node) -> None:
    """Another kind of namespace bind-mounted at a netns path, a directory, an empty file: no id, no
    entering; each read fails with its reason, and the namespaces beside them are read."""
    pod = node.pod("pod", "10.72.2.2/24")
    uts = node.dir / "uts"
    uts.touch()
    _run("mount", "--bind", "/proc/self/ns/uts", uts)
    node.made.append(uts)
    directory = node.dir / "dir"
    directory.mkdir()
    empty = node.dir / "empty"
    empty.touch()
    assert _by_netnsid(node, [uts, directory, empty, pod]) == [False, False, False, True]
    read = _same(node, [uts, directory, empty, pod])
    assert all(isinstance(r, str) for r in read[:3]) and read[3] == ("10.72.2.2",)
