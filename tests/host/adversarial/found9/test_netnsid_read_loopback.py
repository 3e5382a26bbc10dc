"""Adversarial, with real namespaces: the address read through a namespace's netnsid (from the node's
namespace) leaves out the loopback as entering the namespace does, by link 1 and IFF_LOOPBACK, whatever a
pod with CAP_NET_ADMIN names its links: a renamed loopback, a veth renamed `lo`, a veth given the
alternative name `lo`. Each read must go through the netnsid (not fall back to entering) and say what `ip`
says."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nodegc.inventory import netns as netns_mod
from nodegc.inventory.netns import NetnsReadError, read_netns_addresses_many
from tests.host.test_netns_addresses_by_netnsid import Node, _by_netnsid, _ip

pytestmark = pytest.mark.host


def _oracle(ns: Path) -> list[str]:
    """`ip`'s addresses on every link but the one flagged LOOPBACK, pod addresses only."""
    links = json.loads(subprocess.run(["nsenter", f"--net={ns}", "ip", "-j", "addr", "show"], capture_output=True,
                                      text=True, timeout=30, check=True).stdout)
    out = []
    for link in links:
        if "LOOPBACK" in link.get("flags", []):
            assert link["ifindex"] == 1
            continue
        for a in link.get("addr_info", []):
            if not a["local"].startswith(("127.", "fe80")) and a["local"] != "::1":
                out.append(a["local"])
    return sorted(out)


def _read(node: Node, ns: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    assert _by_netnsid(node, [ns]) == [True]

    def entered(paths: list[Path]) -> list[object]:
        assert not paths, "the netnsid read fell back to entering the namespace"
        return []

    with monkeypatch.context() as m:
        m.setattr(netns_mod, "open_many", entered)
        (found,) = read_netns_addresses_many([ns], node_ns=node.ns)
    assert not isinstance(found, NetnsReadError), found
    (entered_read,) = read_netns_addresses_many([ns], by_netnsid=False)
    assert not isinstance(entered_read, NetnsReadError)
    assert sorted(found) == sorted(entered_read)
    return sorted(found)


def test_a_veth_renamed_lo_hides_nothing(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = node.pod("p1", "10.9.0.3/24")
    _ip(ns, "link", "set", "lo", "name", "lo0")
    _ip(ns, "addr", "add", "10.9.0.7/32", "dev", "lo0")
    _ip(ns, "link", "set", "eth0", "name", "lo")
    assert _read(node, ns, monkeypatch) == _oracle(ns) == ["10.9.0.3"]


def test_a_veth_with_the_alternative_name_lo(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = node.pod("p1", "10.9.0.3/24", "fd00::3/64")
    _ip(ns, "link", "set", "lo", "name", "lo0")
    _ip(ns, "link", "property", "add", "dev", "eth0", "altname", "lo")
    assert _read(node, ns, monkeypatch) == _oracle(ns) == ["10.9.0.3", "fd00::3"]


def test_a_vip_on_the_renamed_loopback_is_the_loopbacks(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    ns = node.pod("p1", "10.9.0.3/24")
    _ip(ns, "link", "set", "lo", "down")
    _ip(ns, "link", "set", "lo", "name", "eth9")
    _ip(ns, "addr", "add", "10.9.0.9/32", "dev", "eth9")
    assert _read(node, ns, monkeypatch) == _oracle(ns) == ["10.9.0.3"]
