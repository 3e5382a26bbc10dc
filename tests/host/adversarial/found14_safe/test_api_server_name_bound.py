"""Connecting to the API server by name: resolving it (getaddrinfo, inside the HTTP client's connect) had no
bound of its own, and a name resolving to several addresses that never answer cost one connect timeout each.
A resolver that never replies held a live GET, a list, a write or a watch's start for as long as the C
library's resolver retried (two attempts of five seconds here, the defaults), and eight silent addresses for
eight connect timeouts: past the deadline the README promises (connecting within `--request-timeout`, the
whole answer within three times it). Resolution and every connection attempt now end within the connect
timeout and the request's deadline, and the call fails with the reason.

Without the network: inside the test's private mount and network namespaces, /etc/resolv.conf is bind-mounted
to name a DNS server on 127.0.0.1 that reads every query and never replies, and /etc/hosts to give one name
eight addresses behind a veth pair, where every packet is dropped."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import lightkube
import pytest
from lightkube.resources.core_v1 import Pod

from nodegc.api.client import make_client
from nodegc.api.errors import KubeError
from nodegc.api.reads import get_live, list_all
from tests.adversarial.found11.test_trickled_writes import bounded
from tests.api.fakeapi import write_kubeconfig

TIMEOUT = 1.0
BOUND = 2.5 * TIMEOUT
"""Connecting within the connect timeout, and some slack (the deadline of the whole answer is 3 of them)."""
SILENT_NAME = "apiserver.silent-resolver.nodegc.test"
MANY_NAME = "apiserver.many-addresses.nodegc.test"
MANY = [f"10.253.0.{i}" for i in range(2, 10)]


def _bind_over(target: str, content: str, tmp_path: Path) -> Iterator[None]:
    source = tmp_path / Path(target).name
    source.write_text(content)
    subprocess.run(["mount", "--bind", str(source), target], check=True, timeout=10)
    try:
        yield
    finally:
        subprocess.run(["umount", target], check=True, timeout=10)


@pytest.fixture
def silent_resolver(tmp_path: Path) -> Iterator[list[int]]:
    """A DNS server on 127.0.0.1:53 that counts the queries it reads and answers none; /etc/resolv.conf
    names it (the C library's defaults spelled out: five seconds an attempt, two attempts)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 53))
    sock.settimeout(0.2)
    queries = [0]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            queries[0] += 1

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        for _ in _bind_over("/etc/resolv.conf", "nameserver 127.0.0.1\noptions timeout:5 attempts:2\n", tmp_path):
            yield queries
    finally:
        stop.set()
        sock.close()
        thread.join(5)


@pytest.fixture
def many_silent_addresses(tmp_path: Path) -> Iterator[None]:
    """MANY_NAME resolves (through /etc/hosts) to eight addresses behind a veth pair whose neighbour entries
    name a MAC address nobody has: a SYN sent there is dropped, never refused, so each connection attempt
    waits its whole timeout."""
    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, timeout=10, capture_output=True)

    ip("link", "add", "nodegc-drop0", "type", "veth", "peer", "name", "nodegc-drop1")
    try:
        ip("addr", "add", "10.253.0.1/24", "dev", "nodegc-drop0")
        ip("link", "set", "nodegc-drop0", "up")
        ip("link", "set", "nodegc-drop1", "up")
        for address in MANY:
            ip("neigh", "replace", address, "lladdr", "02:00:00:00:fd:99", "dev", "nodegc-drop0", "nud",
               "permanent")
        hosts = "127.0.0.1 localhost\n" + "".join(f"{a} {MANY_NAME}\n" for a in MANY)
        yield from _bind_over("/etc/hosts", hosts, tmp_path)
    finally:
        subprocess.run(["ip", "link", "del", "nodegc-drop0"], check=False, timeout=10, capture_output=True)


def _client(tmp_path: Path, server: str) -> lightkube.Client:
    return make_client(write_kubeconfig(tmp_path / "kubeconfig", f"https://{server}:6443"), timeout=TIMEOUT)


def _calls(client: lightkube.Client) -> dict[str, object]:
    return {
        "live GET": lambda: get_live(client, Pod, namespace="default", name="web", what="live GET"),
        "list": lambda: list_all(client, Pod, what="pod list", timeout=TIMEOUT),
    }


def test_a_resolver_that_never_answers_fails_the_call_within_the_connect_timeout(
        silent_resolver: list[int], tmp_path: Path) -> None:
    with _client(tmp_path, SILENT_NAME) as client:
        for what, call in _calls(client).items():
            took, _, error = bounded(call)  # type: ignore[arg-type]
            assert isinstance(error, KubeError), (what, error)
            assert took < BOUND, f"{what}: {took:.1f}s"
            assert "resolving" in str(error) and SILENT_NAME in str(error), (what, error)
    assert silent_resolver[0], "the resolver was never asked"


def test_a_name_of_many_silent_addresses_fails_the_call_within_the_connect_timeout(
        many_silent_addresses: None, tmp_path: Path) -> None:
    assert {a[4][0] for a in socket.getaddrinfo(MANY_NAME, 6443, type=socket.SOCK_STREAM)} == set(MANY)
    with _client(tmp_path, MANY_NAME) as client:
        for what, call in _calls(client).items():
            took, _, error = bounded(call)  # type: ignore[arg-type]
            assert isinstance(error, KubeError), (what, error)
            assert took < BOUND, f"{what}: {took:.1f}s"
            assert MANY_NAME in str(error) and "address(es) tried" in str(error), (what, error)
