"""A kernel that answers under sequence 0: an NLMSG_ERROR our requests never asked for (they count from 1),
such as the ENOBUFS a socket is told after replies were dropped. Every reader passed it over as "a reply to
no request of ours" and waited for answers that would never come, until the receive timeout; it now fails
the read at once with the kernel's reason. An empty batch of requests raised IndexError (and would have
sent an empty datagram); it is now no answer and nothing sent.

The kernel here is the far end of a datagram socketpair sending crafted replies (the real ENOBUFS, read
as a receive error, is in tests/host/adversarial/found11)."""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Callable, Iterator

import pytest

from nodegc.hostio import netlink as nl


def _nlmsg(mtype: int, seq: int, body: bytes, flags: int = 0) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), mtype, flags, seq, 0) + body + b"\0" * (-len(body) % 4)


def _error(seq: int, code: int) -> bytes:
    return _nlmsg(nl.NLMSG_ERROR, seq, struct.pack("=i", -code) + bytes(16))


def _nsid(seq: int, nsid: int) -> bytes:
    attr = struct.pack("=HHi", 8, nl.NETNSA_NSID, nsid)
    return _nlmsg(nl.RTM_NEWNSID, seq, b"\0\0\0\0" + attr)


@pytest.fixture
def fake() -> Iterator[tuple[nl.RtnlSocket, socket.socket]]:
    ours, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    # Long enough that a reader waiting for the timeout fails the match below, not the test run.
    ours.settimeout(20)
    kernel.setblocking(False)
    rtnl = nl.RtnlSocket(ours)
    yield rtnl, kernel
    rtnl.close()
    kernel.close()


def test_enobufs_under_sequence_zero_fails_a_netnsid_batch_at_once(fake: tuple[nl.RtnlSocket, socket.socket]) -> None:
    rtnl, kernel = fake
    kernel.send(_nsid(1, 4))  # the first of three answered, then the kernel drops the rest
    kernel.send(_error(0, errno.ENOBUFS))
    with pytest.raises(nl.NetlinkError, match="ENOBUFS") as raised:
        rtnl.netnsids([10, 11, 12])
    assert raised.value.code == errno.ENOBUFS


def test_sequence_zero_error_fails_peer_lookups_dumps_and_deletes(fake: tuple[nl.RtnlSocket, socket.socket]) -> None:
    rtnl, kernel = fake
    calls: list[Callable[[], object]] = [
        lambda: rtnl.peer_addresses_off_loopback([3, 4]),
        rtnl.dump_links,
        rtnl.dump_addresses,
        rtnl.addresses_off_loopback,
        lambda: rtnl.get_link(7),
        lambda: rtnl.delete_links([7, 8]),
        lambda: rtnl.delete_group(9),
    ]
    for call in calls:
        kernel.send(_error(0, errno.ENOBUFS))
        with pytest.raises(nl.NetlinkError, match="ENOBUFS"):
            call()


def test_an_acknowledgement_under_sequence_zero_is_no_answer_either(fake: tuple[nl.RtnlSocket, socket.socket]) -> None:
    rtnl, kernel = fake
    kernel.send(_error(0, 0))
    with pytest.raises(nl.NetlinkError, match="no request"):
        rtnl.netnsids([10])


def test_a_late_error_to_an_earlier_request_is_still_passed_over(fake: tuple[nl.RtnlSocket, socket.socket]) -> None:
    rtnl, kernel = fake
    assert rtnl.netnsids([]) == []
    kernel.send(_error(99, errno.EPERM) + _nsid(1, 5))  # 99: someone else's, not ours
    assert rtnl.netnsids([10]) == [5]


def test_no_request_is_no_answer_and_nothing_sent(fake: tuple[nl.RtnlSocket, socket.socket]) -> None:
    rtnl, kernel = fake
    assert rtnl._ask_each([], lambda *_: 0) == []  # was IndexError
    assert rtnl._acked(nl.RTM_DELLINK, [], []) == []
    assert rtnl.delete_links([]) == [] and rtnl.set_groups([]) == [] and rtnl.peer_addresses_off_loopback([]) == []
    with pytest.raises(BlockingIOError):
        kernel.recv(64)  # not even an empty datagram went out
