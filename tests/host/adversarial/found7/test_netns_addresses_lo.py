"""Adversarial, with real namespaces: detect's namespace address read leaves out the link called `lo` by
looking it up by name in the address dump's datagram (`RtnlSocket.addresses_off_link`). Whatever is named
`lo` (the loopback renamed, a veth renamed to `lo`, no link of that name, addresses only on other links,
a dump over many datagrams), it reads what a link dump filtered by that name reads."""

from __future__ import annotations

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


def _by_a_link_dump(ns: Path) -> tuple[str, ...]:
    """What the reader did before: a dump of every link to find those called lo."""
    with RtnlSocket.open(ns) as rtnl:
        links, _ = rtnl.dump_links()
        addresses = rtnl.dump_addresses()
    lo = {link.index for link in links if link.name == "lo"}
    out: list[str] = []
    for index, raw in addresses:
        if index in lo or raw.startswith(("127.", "::1", "fe80")) or raw in out:
            continue
        out.append(raw)
    return tuple(out)


def _same(ns: Path) -> tuple[str, ...]:
    read = read_netns_addresses(ns)
    assert sorted(read) == sorted(_by_a_link_dump(ns))
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
    assert _same(ns) == ("10.9.0.1",)  # no link is called lo: nothing left out
    _ip(ns, "link", "add", "v0", "type", "veth", "peer", "name", "eth0")
    _ip(ns, "link", "set", "v0", "name", "lo")
    _ip(ns, "addr", "add", "10.9.0.2/24", "dev", "lo")
    _ip(ns, "addr", "add", "10.9.0.5/24", "dev", "eth0")
    assert sorted(_same(ns)) == ["10.9.0.1", "10.9.0.5"]


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
