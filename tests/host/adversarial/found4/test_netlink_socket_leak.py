"""A netlink socket made inside a network namespace must not outlive a timeout: the thread that enters the
namespace may finish after the caller gave up on it (a slow setns, a loaded machine), and the socket it
makes then was left open for as long as anything kept the caller's error (a scan keeps its read errors)."""

from __future__ import annotations

import gc
import os
import socket
import threading
import weakref
from pathlib import Path

import pytest

from nodegc.hostio import netlink
from nodegc.hostio.netlink import NetlinkError, RtnlSocket

OWN_NS = Path("/proc/self/ns/net")  # the test's private namespace: entering it is harmless


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _join_namespace_threads() -> None:
    for t in threading.enumerate():
        if t.name == "nodegc-netns":
            t.join(10)


def test_a_socket_made_after_the_timeout_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    made: list[weakref.ref[socket.socket]] = []  # weak: the test itself must not keep a socket alive
    real = netlink._new_socket

    def slow(protocol: int = netlink.NETLINK_ROUTE) -> socket.socket:
        release.wait(10)  # inside the namespace, after the caller stopped waiting
        sock = real(protocol)
        made.append(weakref.ref(sock))
        return sock

    monkeypatch.setattr(netlink, "_new_socket", slow)
    _join_namespace_threads()
    before = _open_fds()
    with pytest.raises(NetlinkError, match="did not finish in time") as kept:
        RtnlSocket.open(OWN_NS, timeout=0.05)
    release.set()
    _join_namespace_threads()
    gc.collect()
    assert kept.value is not None  # the error is still held, as a caller that records it holds it
    assert len(made) == 1  # it was made, after the caller gave up
    assert _open_fds() == before


@pytest.mark.filterwarnings("error::ResourceWarning", "error::pytest.PytestUnraisableExceptionWarning")
def test_a_socket_is_closed_when_the_thread_cannot_return_home(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[weakref.ref[socket.socket]] = []
    real_new, real_setns = netlink._new_socket, netlink._setns
    calls = 0

    def new(protocol: int = netlink.NETLINK_ROUTE) -> socket.socket:
        sock = real_new(protocol)
        made.append(weakref.ref(sock))
        return sock

    def setns(fd: int, what: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:  # the way back
            raise NetlinkError(what)
        real_setns(fd, what)

    monkeypatch.setattr(netlink, "_new_socket", new)
    monkeypatch.setattr(netlink, "_setns", setns)
    before = _open_fds()
    with pytest.raises(NetlinkError, match="cannot return to the original namespace"):
        RtnlSocket.open(OWN_NS, timeout=5)
    _join_namespace_threads()
    assert len(made) == 1
    sock = made[0]()
    assert sock is None or sock.fileno() == -1  # closed by nodegc, not left to the garbage collector
    assert _open_fds() == before


def test_a_timely_socket_still_works() -> None:
    before = _open_fds()
    with RtnlSocket.open(OWN_NS, timeout=5) as rtnl:
        links, bad = rtnl.dump_links()
    assert bad == [] and any(link.name == "lo" for link in links)
    _join_namespace_threads()
    assert _open_fds() == before
