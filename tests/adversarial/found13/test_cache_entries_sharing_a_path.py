"""Two libcni cache entries read at one path. The owners of cache entries were looked up by path, so every
entry of a path took the owner of the last one: a live pod's entry followed by a dead pod's at the same path
resolved to the dead pod, and the live pod's reservation, namespace, veth and chain (tied to its sandbox
through its entry) were planned for reclaim. An entry's owner is its own; and a file read as two entries
naming different owners cannot be told apart: it is a conflict, and nothing tied to either entry is
reclaimed on its word."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nodegc.model.findings import Finding, FindingClass
from nodegc.model.resources import CNICacheEntry, Inventory, IptablesChain, Kind
from nodegc.planning.correlate import correlate, correlation
from nodegc.planning.owners import cni_chain_name
from tests.unit.factories import NET, NOW, cache, desired, netns, pod, reservation, veth

LIVE_IP, DEAD_IP = "10.0.0.2", "10.0.0.9"


def entries() -> tuple[CNICacheEntry, CNICacheEntry]:
    live = cache("c1", uid="u1", name="web", ip=LIVE_IP)
    dead = replace(cache("c2", uid="u9", name="gone", ip=DEAD_IP), path=live.path)
    return live, dead


def node(*cache_entries: CNICacheEntry) -> Inventory:
    return Inventory(taken_at=NOW, ip_reservations=(reservation(LIVE_IP, "c1"), reservation(DEAD_IP, "c2")),
                     cni_cache=cache_entries,
                     netns=(netns("c1", addresses=(LIVE_IP,)), netns("c2", addresses=(DEAD_IP,))),
                     veths=(veth("c1"), veth("c2", "veth1")),
                     chains=(IptablesChain("nat", cni_chain_name(NET, "c1"), NET, "c1"),
                             IptablesChain("nat", cni_chain_name(NET, "c2"), NET, "c2")))


def residue(findings: tuple[Finding, ...]) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(f.kind.value, f.id, f.evidence) for f in findings if f.cls.is_residue]


@pytest.mark.parametrize("live_first", [True, False])
@pytest.mark.parametrize("status_ip", [LIVE_IP, None])
def test_nothing_is_reclaimed_on_the_word_of_a_path_read_twice(live_first: bool, status_ip: str | None) -> None:
    live, dead = entries()
    inv = node(*((live, dead) if live_first else (dead, live)))
    findings = correlate(inv, desired(pod("web", "u1", ip=status_ip)), now=NOW)
    assert residue(findings) == []
    by_path = [f for f in findings if f.kind is Kind.CNI_CACHE]
    assert [f.cls for f in by_path] == [FindingClass.CONFLICT, FindingClass.CONFLICT], by_path
    assert all(any("read as 2 entries" in e for e in f.evidence) for f in by_path), by_path


@pytest.mark.parametrize("live_first", [True, False])
def test_each_entry_keeps_its_own_owner(live_first: bool) -> None:
    live, dead = entries()
    inv = node(*((live, dead) if live_first else (dead, live)))
    ctx = correlation(inv, desired(pod("web", "u1")), now=NOW).context
    assert ctx.owner_of(live).owner.uid == "u1"
    assert ctx.owner_of(dead).owner.uid == "u9"
    # the live pod's network parts are its own, not the dead pod's
    findings = correlate(inv, desired(pod("web", "u1")), now=NOW)
    for f in findings:
        if f.id in (f"{NET}/{LIVE_IP}", "/run/netns/cni-c1", "veth0", cni_chain_name(NET, "c1")):
            assert f.owner.uid == "u1" and f.cls is FindingClass.IN_USE, f


def test_a_path_read_twice_naming_one_owner_is_no_conflict() -> None:
    _, dead = entries()
    twin = replace(dead, inode=dead.inode + 1)
    inv = replace(node(dead, twin), ip_reservations=(reservation(DEAD_IP, "c2"),),
                  netns=(netns("c2", addresses=(DEAD_IP,)),), veths=(veth("c2", "veth1"),),
                  chains=(IptablesChain("nat", cni_chain_name(NET, "c2"), NET, "c2"),))
    findings = correlate(inv, desired(pod("web", "u1", ip=LIVE_IP)), now=NOW)
    assert {f.cls for f in findings if f.kind is Kind.CNI_CACHE} == {FindingClass.STALE_CNI_CACHE}
    assert {f.cls for f in findings if f.kind is Kind.IP_RESERVATION} == {FindingClass.LEAKED_IP}
