"""A pod with CAP_NET_ADMIN can fill its namespace with addresses (or links) without end, and a netlink dump
of it had no bound: every item was kept until the dump ended (the receive timeout bounds only the wait for
each datagram), so one namespace could push the agent past its memory limit. A dump now accepts at most
DUMP_MAX_MESSAGES items and DUMP_MAX_BYTES; past either, that namespace's read fails with the reason (kept,
as any unreadable namespace is), the other namespaces read as before. Real namespaces, links and addresses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodegc.hostio import netlink
from nodegc.hostio.netlink import NetlinkError, RtnlSocket
from nodegc.inventory.links import scan_veths
from nodegc.inventory.netns import NetnsReadError, read_netns_addresses_many
from tests.host.test_netns_addresses_by_netnsid import Node, _run

pytestmark = pytest.mark.host


def _flood(ns: Path, count: int) -> None:
    """`count` more addresses on the pod's eth0, in one `ip -batch`."""
    lines = "".join(f"addr add 10.{64 + i // 65536}.{i // 256 % 256}.{i % 256}/32 dev eth0\n"
                    for i in range(count))
    _run("nsenter", f"--net={ns}", "ip", "-batch", "-", stdin=lines)


def test_an_address_dump_past_the_bound_fails_that_namespace_only(node: Node) -> None:
    flooded = node.pod("flooded", "10.9.0.3/24")
    fine = node.pod("fine", "10.9.0.4/24")
    bound = getattr(netlink, "DUMP_MAX_MESSAGES", 16384)
    _flood(flooded, bound + 1)  # the default bound, nothing patched
    for by_netnsid in (True, False):
        got = read_netns_addresses_many([flooded, fine], node_ns=node.ns, by_netnsid=by_netnsid)
        assert isinstance(got[0], NetnsReadError), (by_netnsid, type(got[0]))
        assert f"more than {bound} messages" in str(got[0])
        assert got[1] == ("10.9.0.4",), by_netnsid


def test_the_bound_is_per_dump_and_a_namespace_within_it_reads_whole(node: Node) -> None:
    ns = node.pod("p1", "10.9.0.3/24")
    _flood(ns, 300)
    with RtnlSocket.open(ns) as rtnl:
        total = len(rtnl.dump_addresses())  # lo's, eth0's, its link-local one and the 300
    assert total > 300
    with RtnlSocket.open(ns, max_dump_messages=total) as rtnl:
        assert len(rtnl.addresses_off_loopback()) == total - 2  # lo's two left out
    with RtnlSocket.open(ns, max_dump_messages=total) as rtnl:
        assert len(rtnl.dump_addresses()) == total
    with RtnlSocket.open(ns, max_dump_messages=total - 1) as rtnl, \
            pytest.raises(NetlinkError, match=f"{total - 1} messages"):
        rtnl.addresses_off_loopback()
    with RtnlSocket.open(ns, max_dump_bytes=4096) as rtnl, pytest.raises(NetlinkError, match="4096 bytes"):
        rtnl.dump_addresses()
    with RtnlSocket.open(node.ns, max_dump_messages=1000) as rtnl:
        fd = netlink.open_netns(ns)
        try:
            nsid = rtnl.netnsids([fd])[0]
        finally:
            os.close(fd)
        assert isinstance(nsid, int)
    with RtnlSocket.open(node.ns, max_dump_messages=100) as rtnl:
        assert rtnl.strict()
        with pytest.raises(NetlinkError, match="100 messages"):
            rtnl.peer_addresses_off_loopback([nsid])


def test_a_link_dump_past_the_bound_fails_the_veth_read(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(8):
        node.pod(f"p{i}", f"10.9.0.{10 + i}/24")
    veths, problems = scan_veths(netns_entries=(), net_ns=node.ns)
    assert len(veths) == 8 and not problems
    with RtnlSocket.open(node.ns, max_dump_messages=5) as rtnl, pytest.raises(NetlinkError, match="5 messages"):
        rtnl.dump_links()
    monkeypatch.setattr(netlink, "DUMP_MAX_MESSAGES", 5)
    veths, problems = scan_veths(netns_entries=(), net_ns=node.ns)
    assert not veths and len(problems) == 1 and "link dump failed" in problems[0].reason
