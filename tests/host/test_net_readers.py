"""Network readers against real kernel objects: a node netns, pod netns with veths, CNI iptables chains.

Everything is created below a temporary directory inside the session's private mount and network
namespace (see notes: the host tests run under `unshare --mount --net --propagation private`).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyroute2 import NetNS

from nodegc.hostio import netlink as nl
from nodegc.hostio.mountinfo import read_mounts
from nodegc.inventory.iptables import scan_iptables
from nodegc.inventory.links import scan_veths
from nodegc.inventory.netns import NetnsReadError, read_netns_addresses, read_netns_addresses_many, scan_netns
from nodegc.model.resources import Kind, NetnsEntry

pytestmark = pytest.mark.host

CNI_BIN = Path("/usr/lib/cni")
NET = "k8s-pod-network"
CID = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"


def _require_root() -> None:
    # the isolation itself (private mount and network namespace) is checked by tests/host/conftest.py
    if os.geteuid() != 0:
        pytest.skip("needs root")


def _run(*argv: str | Path, stdin: str | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [os.fspath(a) for a in argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, f"{argv}: {proc.stdout} {proc.stderr}"
    return proc.stdout


def _make_netns(path: Path) -> None:
    path.touch()
    _run("unshare", f"--net={path}", "true")


def _in_node(node: Path, *argv: str | Path) -> str:
    return _run("nsenter", f"--net={node}", *argv)


@dataclass(frozen=True)
class Node:
    root: Path
    node_ns: Path
    netns_dir: Path
    pod_a: Path
    pod_b: Path
    pod_c: Path
    leftover: Path
    stray_peer: str


def _cni_add(node: Path, *, netns: Path, ipam_dir: Path) -> None:
    """bridge (ipMasq) then portmap, run in the node namespace as the runtime would."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": CID,
        "CNI_NETNS": str(netns),
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(CNI_BIN),
    }
    bridge = {
        "cniVersion": "1.0.0",
        "name": NET,
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": True,
        "ipMasq": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "dataDir": str(ipam_dir)},
    }
    result = _run("nsenter", f"--net={node}", CNI_BIN / "bridge", stdin=json.dumps(bridge), env=env)
    portmap = {
        "cniVersion": "1.0.0",
        "name": NET,
        "type": "portmap",
        "capabilities": {"portMappings": True},
        "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
        "prevResult": json.loads(result),
    }
    _run("nsenter", f"--net={node}", CNI_BIN / "portmap", stdin=json.dumps(portmap), env=env)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    _require_root()
    root = tmp_path_factory.mktemp("netnode")
    netns_dir = root / "netns"
    netns_dir.mkdir()
    node_ns = root / "node"
    _make_netns(node_ns)
    _in_node(node_ns, "ip", "link", "set", "lo", "up")
    _in_node(node_ns, "ip", "link", "add", "br-test", "type", "bridge")

    pod_a, pod_b, pod_c = netns_dir / "pod-a", netns_dir / "pod-b", netns_dir / "pod-c"
    for pod, veth in ((pod_a, "veth-a"), (pod_b, "veth-b")):
        _make_netns(pod)
        _in_node(node_ns, "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", pod)
    _in_node(node_ns, "ip", "link", "set", "veth-a", "master", "br-test")
    _run("nsenter", f"--net={pod_a}", "ip", "addr", "add", "10.77.0.5/24", "dev", "eth0")
    _run("nsenter", f"--net={pod_a}", "ip", "addr", "add", "10.77.1.5/32", "dev", "lo")
    _run("nsenter", f"--net={pod_a}", "ip", "link", "set", "lo", "up")

    # a veth whose peer lives in a namespace without a netns file (here: the session's own)
    stray_peer = f"stray{os.getpid() % 100000}"
    _in_node(node_ns, "ip", "link", "add", "veth-s", "type", "veth", "peer", "name", stray_peer,
             "netns", f"/proc/{os.getpid()}/ns/net")  # fmt: skip

    _make_netns(pod_c)
    _cni_add(node_ns, netns=pod_c, ipam_dir=root / "ipam")

    leftover = netns_dir / "cni-leftover"
    leftover.touch()
    (netns_dir / "subdir").mkdir()
    (netns_dir / "link").symlink_to(pod_a)

    yield Node(root, node_ns, netns_dir, pod_a, pod_b, pod_c, leftover, stray_peer)

    subprocess.run(["ip", "link", "del", stray_peer], capture_output=True, timeout=30, check=False)
    for ns in (pod_a, pod_b, pod_c, node_ns):
        subprocess.run(["umount", str(ns)], capture_output=True, timeout=30, check=False)


def _scan(node: Node) -> tuple[dict[str, NetnsEntry], list[str]]:
    mounts, _ = read_mounts()
    entries, problems = scan_netns(node.netns_dir, mounts)
    return {e.name: e for e in entries}, [f"{p.path}: {p.reason}" for p in problems]


def test_scan_netns_mounted_and_leftover(node: Node) -> None:
    entries, problems = _scan(node)
    assert set(entries) == {"pod-a", "pod-b", "pod-c", "cni-leftover"}
    for name in ("pod-a", "pod-b", "pod-c"):
        e = entries[name]
        assert e.mounted
        assert e.path == str(node.netns_dir / name)
        assert e.ns_inode == os.stat(e.path).st_ino
        assert e.file_inode is not None
        assert e.file_inode != e.ns_inode  # the file under the mount, not the namespace
    assert len({entries[n].ns_inode for n in ("pod-a", "pod-b", "pod-c")}) == 3
    left = entries["cni-leftover"]
    assert (left.mounted, left.ns_inode) == (False, None)
    assert left.file_inode == os.lstat(node.leftover).st_ino
    assert sorted(problems) == [
        f"{node.netns_dir / 'link'}: symlink in netns dir, not followed",
        f"{node.netns_dir / 'subdir'}: directory in netns dir",
    ]


def test_scan_netns_missing_dir_is_empty(node: Node) -> None:
    assert scan_netns(node.root / "absent", ()) == ((), ())


def test_mount_point_missing_from_table_is_kept_as_mounted(node: Node) -> None:
    entries, problems = scan_netns(node.netns_dir, ())
    assert all(entries_by.mounted for entries_by in entries if entries_by.name.startswith("pod-"))
    assert sum("missing from the mount table" in p.reason for p in problems) == 3


def test_read_netns_addresses(node: Node) -> None:
    assert read_netns_addresses(node.pod_a) == ("10.77.0.5",)
    assert read_netns_addresses(node.pod_b) == ()


def test_read_netns_addresses_many_reads_each_in_order_and_fails_one_alone(node: Node) -> None:
    """One thread opens the sockets of all: a namespace that cannot be entered fails only its own read,
    and the caller's thread never leaves its namespace."""
    before = os.stat("/proc/thread-self/ns/net").st_ino
    found = read_netns_addresses_many([node.pod_a, node.leftover, node.pod_b, node.netns_dir / "never-existed",
                                       node.pod_a])
    assert found[0] == ("10.77.0.5",)
    assert isinstance(found[1], NetnsReadError)
    assert found[2] == ()
    assert isinstance(found[3], NetnsReadError)
    assert found[4] == ("10.77.0.5",)
    assert [str(f) for f in found if isinstance(f, NetnsReadError)] == [
        str(_error(lambda: read_netns_addresses(node.leftover))),
        str(_error(lambda: read_netns_addresses(node.netns_dir / "never-existed")))]
    assert not (node.netns_dir / "never-existed").exists()
    assert os.stat("/proc/thread-self/ns/net").st_ino == before
    assert read_netns_addresses_many([]) == []


def _error(fn: Callable[[], object]) -> NetnsReadError:
    with pytest.raises(NetnsReadError) as caught:
        fn()
    return caught.value


def test_read_netns_addresses_ipv6_without_link_local(node: Node) -> None:
    for argv in (["ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1"], ["ip", "link", "set", "d0", "up"],
                 ["ip", "-6", "addr", "add", "fd00::5/64", "dev", "d0", "nodad"]):
        subprocess.run(["nsenter", f"--net={node.pod_b}", *argv], check=True, timeout=10)
    assert read_netns_addresses(node.pod_b) == ("fd00::5",)


def test_read_netns_addresses_of_leftover_fails_without_creating(node: Node) -> None:
    with pytest.raises(NetnsReadError):
        read_netns_addresses(node.leftover)
    with pytest.raises(NetnsReadError):
        read_netns_addresses(node.netns_dir / "never-existed")
    assert not (node.netns_dir / "never-existed").exists()
    entries, _ = _scan(node)
    assert not entries["cni-leftover"].mounted


def test_scan_veths_resolves_peers(node: Node) -> None:
    entries, _ = _scan(node)
    veths, problems = scan_veths(netns_entries=tuple(entries.values()), net_ns=node.node_ns)
    assert problems == ()
    by_name = {v.name: v for v in veths}
    assert {"veth-a", "veth-b", "veth-s"} <= set(by_name)
    assert len(veths) == 4  # plus the bridge plugin's veth for pod-c
    a, b, s = by_name["veth-a"], by_name["veth-b"], by_name["veth-s"]
    assert (a.peer_netns_path, a.peer_ns_inode) == (str(node.pod_a), entries["pod-a"].ns_inode)
    assert (b.peer_netns_path, b.peer_ns_inode) == (str(node.pod_b), entries["pod-b"].ns_inode)
    assert (a.master, b.master) == ("br-test", None)
    assert a.mac is not None and a.index > 0 and a.peer_ifindex is not None
    assert s.peer_netnsid is not None and s.peer_netns_path is None
    plugin_veth = next(v for n, v in by_name.items() if n not in ("veth-a", "veth-b", "veth-s"))
    assert (plugin_veth.master, plugin_veth.peer_netns_path) == ("cni0", str(node.pod_c))


def test_scan_veths_without_entries_leaves_peers_unresolved(node: Node) -> None:
    veths, problems = scan_veths(netns_entries=(), net_ns=node.node_ns)
    assert problems == ()
    assert veths and all(v.peer_netns_path is None and v.peer_netnsid is not None for v in veths)


def test_scan_veths_bad_netns_is_one_problem(node: Node) -> None:
    veths, problems = scan_veths(netns_entries=(), net_ns=node.leftover)
    assert veths == ()
    assert len(problems) == 1 and problems[0].kind is Kind.VETH


def test_scan_veths_agrees_with_pyroute2(node: Node) -> None:
    entries, _ = _scan(node)
    veths, _ = scan_veths(netns_entries=tuple(entries.values()), net_ns=node.node_ns)
    with NetNS(str(node.node_ns), flags=0) as ipr:
        links = list(ipr.get_links())
    names = {int(m["index"]): m.get_attr("IFLA_IFNAME") for m in links}
    expected = {}
    for m in links:
        info = m.get_attr("IFLA_LINKINFO")
        if info is None or info.get_attr("IFLA_INFO_KIND") != "veth":
            continue
        master = m.get_attr("IFLA_MASTER")
        expected[int(m["index"])] = (
            m.get_attr("IFLA_IFNAME"),
            m.get_attr("IFLA_ADDRESS"),
            names.get(master) if master else None,
            m.get_attr("IFLA_LINK_NETNSID"),
            m.get_attr("IFLA_LINK") or None,
        )
    assert {v.index: (v.name, v.mac, v.master, v.peer_netnsid, v.peer_ifindex) for v in veths} == expected


def test_scan_veths_leaves_the_callers_namespace_alone(node: Node) -> None:
    before = os.readlink("/proc/thread-self/ns/net")
    scan_veths(netns_entries=(), net_ns=node.node_ns)
    assert os.readlink("/proc/thread-self/ns/net") == before
    assert not any(t.name == "nodegc-netns" for t in threading.enumerate())


def test_scan_veths_two_files_on_one_namespace_keep_the_first(node: Node) -> None:
    # more copies than one batch of id queries, so the batches must agree with each other too
    entries, _ = _scan(node)
    pod_b = entries["pod-b"]
    copies = [NetnsEntry(f"copy-{i}", pod_b.path, True, pod_b.ns_inode) for i in range(150)]
    veths, problems = scan_veths(netns_entries=(entries["pod-a"], *copies), net_ns=node.node_ns)
    by_name = {v.name: v for v in veths}
    assert by_name["veth-a"].peer_netns_path == str(node.pod_a)
    assert by_name["veth-b"].peer_netns_path == pod_b.path
    assert len(problems) == 149
    assert all(p.path == pod_b.path and p.reason.endswith(f"also names {pod_b.path}") for p in problems)


def test_scan_veths_reports_unopenable_and_replaced_files(node: Node) -> None:
    entries, _ = _scan(node)
    gone = NetnsEntry("gone", str(node.netns_dir / "never-existed"), True, 1)
    replaced = NetnsEntry("replaced", str(node.pod_a), True, entries["pod-b"].ns_inode)
    veths, problems = scan_veths(netns_entries=(gone, replaced, entries["pod-b"]), net_ns=node.node_ns)
    assert [(p.path, p.reason.split(":")[0]) for p in problems] == [
        (gone.path, "cannot open netns"),
        (replaced.path, "netns changed since it was scanned"),
    ]
    by_name = {v.name: v for v in veths}
    assert (by_name["veth-a"].peer_netns_path, by_name["veth-b"].peer_netns_path) == (None, str(node.pod_b))


# A fake kernel: the far end of a datagram socketpair sends crafted netlink replies.


def _nlmsg(mtype: int, seq: int, body: bytes, flags: int = 0) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), mtype, flags, seq, 0) + body + b"\0" * (-len(body) % 4)


def _attr(atype: int, payload: bytes) -> bytes:
    return struct.pack("=HH", 4 + len(payload), atype) + payload + b"\0" * (-len(payload) % 4)


def _link(seq: int, index: int, name: bytes, kind: bytes | None = None, extra: bytes = b"") -> bytes:
    attrs = _attr(nl.IFLA_IFNAME, name + b"\0") + _attr(nl.IFLA_ADDRESS, bytes(range(0xA0, 0xA6)))
    if kind is not None:
        attrs += _attr(nl.IFLA_LINKINFO | 0x8000, _attr(nl.IFLA_INFO_KIND, kind + b"\0"))
    attrs += _attr(nl.IFLA_MASTER, struct.pack("=I", 1)) + _attr(nl.IFLA_LINK_NETNSID, struct.pack("=i", -1))
    return _nlmsg(nl.RTM_NEWLINK, seq, struct.pack("=BxHiII", 0, 1, index, 0, 0) + attrs + extra, flags=2)


@pytest.fixture
def fake() -> Iterator[tuple[nl.RtnlSocket, socket.socket]]:
    ours, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ours.settimeout(0.5)
    rtnl = nl.RtnlSocket(ours)
    yield rtnl, kernel
    rtnl.close()
    kernel.close()


def test_netlink_dump_spans_datagrams(fake: tuple[nl.RtnlSocket, socket.socket]) -> None:
    rtnl, kernel = fake
    kernel.send(_nlmsg(nl.NLMSG_DONE, 99, struct.pack("=i", 0)))  # a stale reply to someone else
    kernel.send(_link(1, 1, b"br0", b"bridge") + _link(1, 2, b"veth\xff", b"veth"))
    kernel.send(_link(1, 3, b"lo") + _nlmsg(nl.NLMSG_DONE, 1, struct.pack("=i", 0)))
    links, bad = rtnl.dump_links()
    assert bad == []
    assert [(x.index, x.name, x.kind) for x in links] == [(1, "br0", "bridge"), (2, None, "veth"), (3, "lo", None)]
    assert (links[1].mac, links[1].master, links[1].link_netnsid, links[1].link) == (
        "a0:a1:a2:a3:a4:a5", 1, -1, None
    )


def test_netlink_error_and_malformed_replies(fake: tuple[nl.RtnlSocket, socket.socket]) -> None:
    rtnl, kernel = fake
    kernel.send(_link(1, 1, b"a") + _nlmsg(nl.NLMSG_ERROR, 1, struct.pack("=i", -1) + bytes(16)))
    with pytest.raises(nl.NetlinkError, match="EPERM"):
        rtnl.dump_links()
    kernel.send(_link(2, 1, b"a")[:-3])  # a message longer than its datagram
    with pytest.raises(nl.NetlinkError, match="length"):
        rtnl.dump_links()
    overrun = struct.pack("=HH", 64, nl.IFLA_MASTER) + bytes(4)  # an attribute longer than its message
    kernel.send(_link(3, 1, b"a", extra=overrun) + _link(3, 2, b"b") + _nlmsg(nl.NLMSG_DONE, 3, bytes(4)))
    links, bad = rtnl.dump_links()
    assert [x.name for x in links] == ["b"] and len(bad) == 1 and "overruns" in bad[0]
    with pytest.raises(nl.NetlinkError, match="in time"):  # nothing more comes
        rtnl.dump_links()


def test_netlink_netnsids_answer_each_request(fake: tuple[nl.RtnlSocket, socket.socket]) -> None:
    rtnl, kernel = fake
    first = 1
    kernel.send(_nlmsg(nl.RTM_NEWNSID, first + 1, bytes(4) + _attr(nl.NETNSA_NSID, struct.pack("=I", 7))))
    kernel.send(_nlmsg(nl.NLMSG_ERROR, first, struct.pack("=i", -9) + bytes(16)))
    kernel.send(_nlmsg(nl.RTM_NEWNSID, first + 2, bytes(4)))
    answers = rtnl.netnsids([5, 6, 7])
    assert isinstance(answers[0], nl.NetlinkError) and "EBADF" in str(answers[0])
    assert answers[1] == 7
    assert isinstance(answers[2], nl.NetlinkError)
    requests = kernel.recv(4096)
    assert len(requests) == 3 * 28  # one send for the batch
    assert struct.unpack_from("=HH", requests, 16 + 4) == (8, nl.NETNSA_FD)


def test_scan_iptables_through_net_ns(node: Node) -> None:
    chains, rules, problems = scan_iptables(net_ns=node.node_ns, commands=("iptables-save",), timeout=30)
    assert problems == ()
    assert {(c.table, c.network, c.container_id) for c in chains} == {("nat", NET, CID)}
    assert sorted(c.name.split("-")[1] == "DN" for c in chains) == [False, True]
    assert [(r.chain, r.container_id) for r in rules] == [("CNI-HOSTPORT-DNAT", CID)]


def test_scan_iptables_reads_the_requested_namespace_only(node: Node) -> None:
    # other host tests may run plugins in the session namespace: only this module's container must be absent
    chains, rules, _ = scan_iptables(net_ns=None, commands=("iptables-save",), timeout=30)
    assert all(c.container_id != CID for c in chains)
    assert all(r.container_id != CID for r in rules)


def test_scan_iptables_missing_binary_is_a_problem(node: Node) -> None:
    chains, _, problems = scan_iptables(
        net_ns=node.node_ns, commands=("nodegc-no-such-save", "iptables-save"), timeout=30
    )
    assert len(chains) == 2
    assert len(problems) == 1 and "nodegc-no-such-save" in problems[0].path
    _, _, problems = scan_iptables(net_ns=None, commands=("/nonexistent/iptables-save",), timeout=30)
    assert len(problems) == 1 and problems[0].reason.startswith("not found")


def _status(seq: int, code: int) -> bytes:
    return _nlmsg(nl.NLMSG_ERROR, seq, struct.pack("=i", code) + bytes(16))


def test_netlink_link_deletes_are_acknowledged_one_by_one(fake: tuple[nl.RtnlSocket, socket.socket]) -> None:
    rtnl, kernel = fake
    kernel.send(_status(2, -errno.ENODEV) + _status(1, 0))
    kernel.send(_status(99, 0) + _status(3, -errno.EPERM))  # a stale reply first
    answers = rtnl.delete_links([5, 6, 7])
    assert answers[0] is None
    assert isinstance(answers[1], nl.NetlinkError) and answers[1].code == errno.ENODEV
    assert isinstance(answers[2], nl.NetlinkError) and answers[2].code == errno.EPERM
    requests = kernel.recv(4096)
    assert len(requests) == 3 * 32  # one send for the batch
    assert struct.unpack_from("=IHH", requests, 0) == (32, nl.RTM_DELLINK, nl.NLM_F_REQUEST | nl.NLM_F_ACK)
    assert struct.unpack_from("=i", requests, 32 + 16 + 4)[0] == 6


def test_netlink_get_link_by_index(fake: tuple[nl.RtnlSocket, socket.socket]) -> None:
    rtnl, kernel = fake
    kernel.send(_link(1, 4, b"veth0", b"veth"))
    found = rtnl.get_link(4)
    assert found is not None and (found.index, found.name, found.kind) == (4, "veth0", "veth")
    kernel.send(_status(2, -errno.ENODEV))
    assert rtnl.get_link(9) is None
    kernel.send(_status(3, -errno.EPERM))
    with pytest.raises(nl.NetlinkError, match="EPERM"):
        rtnl.get_link(9)


def _address(seq: int, index: int, ip: bytes) -> bytes:
    family = socket.AF_INET if len(ip) == 4 else socket.AF_INET6
    return _nlmsg(nl.RTM_NEWADDR, seq, struct.pack("=BBBBI", family, 32, 0, 0, index) + _attr(nl.IFA_LOCAL, ip),
                  flags=2)


def _loopback(seq: int, index: int = 1, name: bytes = b"lo", flags: int = nl.IFF_LOOPBACK | 0x1) -> bytes:
    attrs = _attr(nl.IFLA_IFNAME, name + b"\0")
    return _nlmsg(nl.RTM_NEWLINK, seq, struct.pack("=BxHiII", 0, 772, index, flags, 0) + attrs, flags=2)


def test_netlink_addresses_off_loopback_in_one_round_trip(fake: tuple[nl.RtnlSocket, socket.socket]) -> None:
    rtnl, kernel = fake
    # the dump may come before the lookup's answer; the loopback's own addresses are left out
    kernel.send(_address(2, 1, bytes([10, 0, 0, 1])) + _address(2, 2, bytes([10, 0, 0, 2])))
    kernel.send(_nlmsg(nl.NLMSG_DONE, 2, struct.pack("=i", 0)) + _loopback(1))
    assert rtnl.addresses_off_loopback() == [(2, "10.0.0.2")]
    requests = kernel.recv(4096)  # one send: the lookup of link 1 (no name), then the dump
    first = struct.unpack_from("=IHHI", requests, 0)
    assert (first[1], first[2]) == (nl.RTM_GETLINK, nl.NLM_F_REQUEST)
    assert struct.unpack_from("=i", requests, 16 + 4)[0] == 1 and b"lo\0" not in requests[: first[0]]
    assert struct.unpack_from("=HH", requests, first[0] + 4) == (nl.RTM_GETADDR, nl.NLM_F_REQUEST | nl.NLM_F_DUMP)
    # whatever the loopback is called
    kernel.send(_loopback(3, name=b"eth0") + _address(4, 1, bytes([10, 0, 0, 1])) + _nlmsg(nl.NLMSG_DONE, 4, bytes(4)))
    assert rtnl.addresses_off_loopback() == []
    # no such link: nothing is left out
    kernel.send(_status(5, -errno.ENODEV) + _address(6, 1, bytes([10, 0, 0, 1])) + _nlmsg(nl.NLMSG_DONE, 6, bytes(4)))
    assert rtnl.addresses_off_loopback() == [(1, "10.0.0.1")]
    # any other refusal, or an answer about another link or one that is not a loopback, fails the read
    kernel.send(_status(7, -errno.EPERM) + _nlmsg(nl.NLMSG_DONE, 8, bytes(4)))
    with pytest.raises(nl.NetlinkError, match="EPERM"):
        rtnl.addresses_off_loopback()
    kernel.send(_loopback(9, index=2) + _nlmsg(nl.NLMSG_DONE, 10, bytes(4)))
    with pytest.raises(nl.NetlinkError, match="link 2"):
        rtnl.addresses_off_loopback()
    kernel.send(_link(11, 1, b"lo") + _nlmsg(nl.NLMSG_DONE, 12, bytes(4)))  # index 1, no IFF_LOOPBACK
    with pytest.raises(nl.NetlinkError, match="not the loopback"):
        rtnl.addresses_off_loopback()
    kernel.send(_loopback(13))  # the dump never ends
    with pytest.raises(nl.NetlinkError, match="in time"):
        rtnl.addresses_off_loopback()


def test_read_netns_addresses_with_the_loopback_renamed(node: Node) -> None:
    """The loopback is left out whatever its name (ifindex 1, IFF_LOOPBACK): a renamed loopback's addresses
    are not the pod's, and a link renamed lo, or given the alternative name lo, is read like any other."""
    ns = node.root / "renamed-lo"
    _make_netns(ns)
    try:
        _run("nsenter", f"--net={ns}", "ip", "link", "set", "lo", "name", "lo2")
        _run("nsenter", f"--net={ns}", "ip", "link", "set", "lo2", "up")
        _run("nsenter", f"--net={ns}", "ip", "addr", "add", "10.77.3.5/32", "dev", "lo2")
        assert read_netns_addresses(ns) == ()
        _run("nsenter", f"--net={ns}", "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "p0")
        _run("nsenter", f"--net={ns}", "ip", "addr", "add", "10.77.3.6/24", "dev", "eth0")
        _run("nsenter", f"--net={ns}", "ip", "link", "property", "add", "dev", "eth0", "altname", "lo")
        assert read_netns_addresses(ns) == ("10.77.3.6",)
        _run("nsenter", f"--net={ns}", "ip", "link", "property", "del", "dev", "eth0", "altname", "lo")
        _run("nsenter", f"--net={ns}", "ip", "link", "set", "eth0", "name", "lo")
        assert read_netns_addresses(ns) == ("10.77.3.6",)
        assert read_netns_addresses_many([ns, node.pod_a]) == [("10.77.3.6",), ("10.77.0.5",)]
    finally:
        subprocess.run(["umount", str(ns)], capture_output=True, timeout=30, check=False)


def test_netlink_deletes_real_links(node: Node) -> None:
    _in_node(node.node_ns, "ip", "link", "add", "nodegc-d0", "type", "bridge")
    _in_node(node.node_ns, "ip", "link", "add", "nodegc-d1", "type", "bridge")
    with nl.RtnlSocket.open(node.node_ns) as rtnl:
        links, _ = rtnl.dump_links()
        index = {link.name: link.index for link in links}
        found = rtnl.get_link(index["nodegc-d0"])
        assert found is not None and found.kind == "bridge"
        answers = rtnl.delete_links([index["nodegc-d0"], index["nodegc-d1"], index["nodegc-d1"]])
        assert answers[:2] == [None, None]
        assert isinstance(answers[2], nl.NetlinkError) and answers[2].code == errno.ENODEV
        assert rtnl.get_link(index["nodegc-d0"]) is None


def test_scan_iptables_reuses_a_dump_only_while_the_ruleset_is_unchanged(node: Node) -> None:
    from nodegc.inventory.iptables import _is_nft, scan_iptables_all

    nft = _is_nft("iptables-save") and _is_nft("ip6tables-save")
    first = scan_iptables_all(net_ns=node.node_ns)
    again = scan_iptables_all(net_ns=node.node_ns)
    assert (again is first) == nft
    chain = "CNI-0123456789abcdef01234567"
    try:
        _in_node(node.node_ns, "iptables", "-t", "nat", "-N", chain)
        added = scan_iptables_all(net_ns=node.node_ns)
        assert added is not first and chain in {c.name for c in added[0] if c.table == "nat"}
        _in_node(node.node_ns, "ip6tables", "-t", "filter", "-N", chain)
        both = scan_iptables_all(net_ns=node.node_ns)
        assert both is not added and len([c for c in both[0] if c.name == chain]) == 2
        assert scan_iptables_all(net_ns=node.node_ns, reuse=False) is not both
    finally:
        _in_node(node.node_ns, "iptables", "-t", "nat", "-X", chain)
        _in_node(node.node_ns, "ip6tables", "-t", "filter", "-X", chain)
    assert chain not in {c.name for c in scan_iptables_all(net_ns=node.node_ns)[0]}
