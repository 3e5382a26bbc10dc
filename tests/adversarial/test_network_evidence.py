"""Network evidence: siblings of one container id, reservations no cache entry explains, what a netns holds."""

from __future__ import annotations

from dataclasses import replace

from nodegc.model.findings import Finding, FindingClass
from nodegc.model.pods import Pod
from nodegc.model.resources import Inventory, Kind, ReadProblem
from nodegc.planning.correlate import correlate
from tests.unit.factories import NET, NOW, cache, desired, netns, pod, reservation, veth


def _classes(findings: tuple[Finding, ...], kind: Kind) -> dict[str, FindingClass]:
    return {f.id: f.cls for f in findings if f.kind is kind}


def test_second_range_address_of_a_live_sandbox_is_in_use() -> None:
    """Two IPv4 ranges: host-local reserves one address in each under the same container id; status lists
    one. No cache entry is readable."""
    inv = Inventory(taken_at=NOW, ip_reservations=(reservation("10.0.0.2", "c1"), reservation("10.1.0.2", "c1")))
    f = _classes(correlate(inv, desired(pod("p", "u1", ip="10.0.0.2")), now=NOW), Kind.IP_RESERVATION)
    assert f == {f"{NET}/10.0.0.2": FindingClass.IN_USE, f"{NET}/10.1.0.2": FindingClass.IN_USE}


def test_ipv6_address_of_a_live_sandbox_is_in_use_when_status_shows_only_pod_ip() -> None:
    inv = Inventory(taken_at=NOW, ip_reservations=(reservation("10.0.0.2", "c1"), reservation("fd00::2", "c1")))
    f = _classes(correlate(inv, desired(pod("p", "u1", ip="10.0.0.2")), now=NOW), Kind.IP_RESERVATION)
    assert set(f.values()) == {FindingClass.IN_USE}


def test_new_sandbox_of_a_running_pod_is_kept_while_its_add_runs() -> None:
    """The pod re-creates its sandbox: the new reservation exists, the cache entry not yet, status still
    shows the old sandbox's address (whose entry was already removed)."""
    inv = Inventory(taken_at=NOW, ip_reservations=(reservation("10.0.0.2", "cold"), reservation("10.0.0.9", "cnew")))
    f = _classes(correlate(inv, desired(pod("p", "u1", ip="10.0.0.2")), now=NOW), Kind.IP_RESERVATION)
    assert not any(c.is_residue for c in f.values()), f


def test_reservation_whose_cache_entry_is_truncated_is_kept() -> None:
    """Another pod is accounted for, so only the unreadable entry of this container protects it."""
    inv = Inventory(taken_at=NOW, ip_reservations=(reservation("10.0.0.2", "c1"), reservation("10.0.0.7", "c2")),
                    cni_cache=(cache("c1", uid="u1", ip="10.0.0.2"),),
                    problems=(ReadProblem(Kind.CNI_CACHE, f"/cni/results/{NET}-c2-eth0", "truncated JSON"),))
    f = _classes(correlate(inv, desired(pod("p", "u1", ip="10.0.0.2")), now=NOW), Kind.IP_RESERVATION)
    assert f[f"{NET}/10.0.0.7"] is FindingClass.PROTECTED


def test_siblings_stand_or_fall_together() -> None:
    """A dead pod's entry, but one reservation of the same container is young: nothing of it goes yet."""
    inv = Inventory(taken_at=NOW, ip_reservations=(reservation("10.0.0.5", "cd"),
                                                   reservation("fd00::5", "cd", mtime=NOW.timestamp() - 1)),
                    cni_cache=(cache("cd", uid="u-dead", ip="10.0.0.5"),), netns=(netns("cd"),), veths=(veth("cd"),))
    findings = correlate(inv, desired(pod("p", "u1", ip="10.0.0.2")), now=NOW)
    assert not [f for f in findings if f.cls.is_residue], [(f.kind.value, f.cls.value) for f in findings]


def test_dead_entry_naming_a_netns_that_holds_a_live_address_is_a_conflict() -> None:
    """Restored /var/lib/cni: the dead sandbox's entry names the live pod's netns; the live pod's own
    entry is unreadable. The namespace's addresses decide."""
    live_ns = replace(netns("clive", addresses=("10.0.0.2",)), addresses_read=True)
    dead = cache("cdead", uid="u-dead", ip="10.0.0.5", netns=live_ns.path)
    inv = Inventory(taken_at=NOW, cni_cache=(dead,), netns=(live_ns,), veths=(veth("clive"),),
                    ip_reservations=(reservation("10.0.0.2", "clive"),))
    findings = correlate(inv, desired(pod("web", "u-live", ip="10.0.0.2")), now=NOW)
    assert not [f for f in findings if f.cls.is_residue], [(f.kind.value, f.cls.value, f.evidence) for f in findings]
    assert _classes(findings, Kind.CNI_CACHE)[dead.path] is FindingClass.CONFLICT


def test_dead_entry_naming_a_netns_with_foreign_addresses_is_not_residue() -> None:
    """The holder of the address is a pod still starting (no IP in status yet)."""
    ns = replace(netns("cx", addresses=("10.0.0.44",)), addresses_read=True)
    dead = cache("cdead", uid="u-dead", ip="10.0.0.5", netns=ns.path)
    starting = Pod(uid="u-s", namespace="default", name="s", node_name="n1", phase="Pending")
    findings = correlate(Inventory(taken_at=NOW, cni_cache=(dead,), netns=(ns,)), desired(starting), now=NOW)
    assert not [f for f in findings if f.cls.is_residue], [(f.kind.value, f.cls.value) for f in findings]
