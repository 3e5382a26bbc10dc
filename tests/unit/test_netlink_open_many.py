"""`open_many`'s bookkeeping: order, a namespace that takes too long, a thread that could not go back.

Entering namespaces needs root and is tested in tests/host/test_net_readers.py; here the entering is
replaced by opening a netlink socket in the current namespace (any user may), so that the timing and the
failures can be steered.
"""

from __future__ import annotations

import errno
import socket
import threading
from pathlib import Path

import pytest

from nodegc.hostio import netlink


def test_each_path_gets_its_socket_or_its_error_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    def enter(path: Path, protocol: int = netlink.NETLINK_ROUTE) -> socket.socket:
        if path.name == "bad":
            raise OSError(errno.EINVAL, "cannot enter bad: Invalid argument")
        return netlink._new_socket(protocol)

    monkeypatch.setattr(netlink, "_enter_and_open", enter)
    out = netlink.open_many([Path("/n/a"), Path("/n/bad"), Path("/n/c")])
    assert isinstance(out[0], netlink.RtnlSocket)
    assert isinstance(out[1], netlink.NetlinkError)
    assert str(out[1]) == "/n/bad: [Errno 22] cannot enter bad: Invalid argument"
    assert isinstance(out[2], netlink.RtnlSocket)
    for sock in out:
        if isinstance(sock, netlink.RtnlSocket):
            sock.close()
    assert netlink.open_many([]) == []


def test_a_slow_namespace_fails_the_rest_and_leaves_no_socket_open(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    made: list[socket.socket] = []
    finished = threading.Event()

    def enter(path: Path, protocol: int = netlink.NETLINK_ROUTE) -> socket.socket:
        if path.name == "slow":
            release.wait(10)
        sock = netlink._new_socket(protocol)
        made.append(sock)
        if path.name == "last":
            finished.set()
        return sock

    monkeypatch.setattr(netlink, "_enter_and_open", enter)
    out = netlink.open_many([Path("/n/a"), Path("/n/slow"), Path("/n/last")], timeout=0.2)
    assert isinstance(out[0], netlink.RtnlSocket)
    assert [str(e) for e in out[1:]] == ["/n/slow: entering the namespace did not finish in time",
                                         "/n/last: entering the namespace did not finish in time"]
    release.set()
    # The thread makes the slow namespace's socket after the caller gave up: it closes it and stops.
    for _ in range(100):
        if len(made) == 2 and made[1].fileno() == -1:
            break
        threading.Event().wait(0.05)
    assert len(made) == 2
    assert made[1].fileno() == -1
    assert not finished.is_set()
    first = out[0]
    assert isinstance(first, netlink.RtnlSocket)
    first.close()


def test_a_thread_that_could_not_go_back_enters_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    entered: list[str] = []

    def enter(path: Path, protocol: int = netlink.NETLINK_ROUTE) -> socket.socket:
        entered.append(path.name)
        if path.name == "b":
            raise netlink._Stranded(errno.EPERM, "cannot return to the original namespace: Operation not permitted")
        return netlink._new_socket(protocol)

    monkeypatch.setattr(netlink, "_enter_and_open", enter)
    out = netlink.open_many([Path("/n/a"), Path("/n/b"), Path("/n/c"), Path("/n/d")])
    assert entered == ["a", "b"]
    assert isinstance(out[0], netlink.RtnlSocket)
    assert [str(e) for e in out[1:]] == [
        f"/n/{name}: [Errno 1] cannot return to the original namespace: Operation not permitted"
        for name in ("b", "c", "d")]
    first = out[0]
    assert isinstance(first, netlink.RtnlSocket)
    first.close()
