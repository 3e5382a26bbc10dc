"""Adversarial, with real namespaces: detect's namespace address read leaves out the namespace's loopback
by looking up link 1 in the address dump's datagram (`RtnlSocket.addresses_off_loopback`). Whatever is
named `lo` (the loopback renamed, a veth renamed to `lo`, a veth given the alternative name `lo`, which
the kernel's lookup by name matches; addresses only on other links, a dump over many datagrams), it reads
what `ip` reports on every link but the one flagged LOOPBACK."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.hostio.netlink import RtnlSocket
from nodegc.inventory.netns import read_netns_addresses, read_netns_addresses_many

pytestmark = pytest.mark.host


def _run(*argv: str | Path) -> None:
    proc = subprocess.run([os.fspath(a) for a in argv], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, f"{argv}: {proc.stdout} {proc.stderr}"


@pytest.fixture
def ns(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "ns"
    path.touch()
    _run("unshare", f"--net={path}", "true")
    yield path
    subprocess.run(["umount", str(path)], capture_output=True, timeout=30, check=False)


def _ip(ns: Path, *args: str) -> None:
    _run("nsenter", f"--net={ns}", "ip", *args)


def _by_ip(ns: Path) -> tuple[str, ...]:
    """The oracle: `ip` says which link is the loopback (its LOOPBACK flag), nodegc's dump the addresses."""
    proc = subprocess.run(["nsenter", f"--net={ns}", "ip", "-j", "link", "show"], capture_output=True, text=True,
                          timeout=30, check=True)
    lo = {link["ifindex"] for link in json.loads(proc.stdout) if "LOOPBACK" in link.get("flags", [])}
    assert lo == {1}
    with RtnlSocket.open(ns) as rtnl:
        addresses = rtnl.dump_addresses()
    out: list[str] = []
    for index, raw in addresses:
        if index in lo or raw.startswith(("127.", "::1", "fe80")) or raw in out:
            continue
        out.append(raw)
    return tuple(out)


def _same(ns: Path) -> tuple[str, ...]:
    read = read_netns_addresses(ns)
    assert sorted(read) == sorted(_by_ip(ns))
    assert read_netns_addresses_many([ns]) == [read]
    return read


def test_addresses_on_the_loopback_are_left_out(ns: Path) -> None:
    _ip(ns, "link", "set", "lo", "up")
    _ip(ns, "addr", "add", "10.9.0.4/32", "dev", "lo")  # a VIP on lo
    _ip(ns, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
    _ip(ns, "addr", "add", "10.9.0.3/24", "dev", "eth0")
    assert _same(ns) == ("10.9.0.3",)


def test_a_renamed_loopback_and_a_veth_called_lo(ns: Path) -> None:
    _ip(ns, "link", "set", "lo", "name", "lo0")
    _ip(ns, "addr", "add", "10.9.0.1/32", "dev", "lo0")
    assert _same(ns) == ()  # the loopback, whatever its name
    _ip(ns, "link", "add", "v0", "type", "veth", "peer", "name", "eth0")
    _ip(ns, "link", "set", "v0", "name", "lo")
    _ip(ns, "addr", "add", "10.9.0.2/24", "dev", "lo")
    _ip(ns, "addr", "add", "10.9.0.5/24", "dev", "eth0")
    assert sorted(_same(ns)) == ["10.9.0.2", "10.9.0.5"]  # a veth called lo hides nothing


def test_a_veth_given_the_alternative_name_lo(ns: Path) -> None:
    """The kernel's lookup by name matches alternative names: by name, the read would fail (the answer is
    eth0) and the namespace stay unread. Link 1 is the loopback whatever names the others carry."""
    _ip(ns, "link", "set", "lo", "name", "lo0")
    _ip(ns, "link", "set", "lo0", "up")
    _ip(ns, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
    _ip(ns, "link", "property", "add", "dev", "eth0", "altname", "lo")
    _ip(ns, "addr", "add", "10.9.0.3/24", "dev", "eth0")
    _ip(ns, "addr", "add", "10.9.0.4/32", "dev", "lo0")
    assert _same(ns) == ("10.9.0.3",)


def test_no_addresses_but_the_loopbacks(ns: Path) -> None:
    _ip(ns, "link", "set", "lo", "up")
    assert _same(ns) == ()


def test_a_dump_over_many_datagrams(ns: Path) -> None:
    _ip(ns, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
    _ip(ns, "link", "set", "lo", "up")
    batch = "".join(f"addr add 10.8.{i // 250}.{i % 250 + 1}/32 dev eth0\naddr add 10.7.{i // 250}.{i % 250 + 1}/32"
                    " dev lo\n" for i in range(600))
    proc = subprocess.run(["nsenter", f"--net={ns}", "ip", "-batch", "-"], input=batch, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    read = _same(ns)
    assert len(read) == 600 and all(a.startswith("10.8.") for a in read)
