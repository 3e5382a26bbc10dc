"""A real kernel that drops replies: a socket whose receive buffer cannot hold a batch's answers is told
ENOBUFS. The batch fails at once with the errno, never waits for the answers that were dropped."""

from __future__ import annotations

import errno
import os
import socket

import pytest

from nodegc.hostio.netlink import NetlinkError, RtnlSocket


def test_a_batch_whose_answers_overrun_the_buffer_fails_with_enobufs() -> None:
    fds = [os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC) for _ in range(64)]
    try:
        with RtnlSocket.open(timeout=30) as rtnl:
            rtnl._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's floor
            with pytest.raises(NetlinkError, match="No buffer space") as raised:
                rtnl.netnsids(fds)
        assert raised.value.code == errno.ENOBUFS
    finally:
        for fd in fds:
            os.close(fd)
