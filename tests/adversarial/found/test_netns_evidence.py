"""Findings: the rule "read a namespace's addresses before acting inside it" and the unaccounted rule."""

from __future__ import annotations

from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory, Kind, NetnsEntry, ReadProblem
from nodegc.planning.correlate import correlate
from tests.unit.factories import NET, NOW, OLD, cache, desired, pod, reservation, veth


def test_a_namespace_whose_addresses_cannot_be_read_is_not_acted_in() -> None:
    """Restored /var/lib/cni: a dead pod's entry names /run/netns/cni-x, which is live pod p's namespace
    (10.0.0.7 inside; p's own entry is unreadable). Detect asks for the addresses, the read fails
    (setns or the netlink dump errs or times out: a ReadProblem NETNS) and the namespace is treated as
    holding nothing: the entry is stale_cni_cache (CNI DEL runs inside cni-x and deletes eth0 there),
    the namespace leaked_netns and its veth dangling_veth. An unread namespace holds unknown addresses."""
    ns = NetnsEntry(name="cni-x", path="/run/netns/cni-x", mounted=True, ns_inode=7, mtime=OLD,
                    addresses=(), addresses_read=False)
    inv = Inventory(
        taken_at=NOW,
        ip_reservations=(reservation("10.0.0.2", "cdead"), reservation("10.0.0.7", "cp")),
        cni_cache=(cache("cdead", uid="u-dead", ip="10.0.0.2", netns="/var/run/netns/cni-x"),),
        netns=(ns,), veths=(veth("x"),),
        problems=(ReadProblem(Kind.NETNS, "/run/netns/cni-x", "cannot read addresses: timed out"),
                  ReadProblem(Kind.CNI_CACHE, f"/cni/results/{NET}-cp-eth0", "truncated JSON")),
    )
    findings = correlate(inv, desired(pod("p", "u1", ip="10.0.0.7")), now=NOW)
    acting = [(f.kind.value, f.cls.value) for f in findings
              if f.cls.is_residue and f.kind in (Kind.CNI_CACHE, Kind.NETNS, Kind.VETH)]
    assert acting == [], acting


def test_an_old_sandboxs_entry_does_not_account_for_the_new_one() -> None:
    """Pod p's sandbox is being re-created: the old sandbox's entry (uid u1, 10.0.0.2) is still there
    (its DEL failed), the new sandbox's reservation 10.0.0.9 exists and its entry does not yet (ADD still
    running: a slow chained plugin), status still shows 10.0.0.2. docs/ownership.md promises to keep
    reservations while "its sandbox [is] being re-created with ADD still running"; the old entry makes p
    look accounted for (Context.build counts any entry that leads to the pod), so 10.0.0.9 is leaked_ip
    (shown here 90 s in: past the minimum age, within the kubelet's runtime request timeout)."""
    inv = Inventory(taken_at=NOW,
                    ip_reservations=(reservation("10.0.0.2", "cold"),
                                     reservation("10.0.0.9", "cnew", mtime=NOW.timestamp() - 90)),
                    cni_cache=(cache("cold", uid="u1", ip="10.0.0.2"),))
    findings = correlate(inv, desired(pod("p", "u1", ip="10.0.0.2")), now=NOW)
    cls = {f.id: f.cls for f in findings if f.kind is Kind.IP_RESERVATION}
    assert cls[f"{NET}/10.0.0.9"] is not FindingClass.LEAKED_IP, cls


def test_a_namespace_two_sandboxes_name_follows_only_the_first() -> None:
    """A namespace file named by two container ids' entries: an old dead one (d1) and a young one (d2,
    its pod not in the list yet: the photo cannot show it). The young entry is protected, but the
    namespace takes the owner (and so the sibling group) of the first entry only and is leaked_netns:
    removing it and its veth cuts the sandbox still being set up. Any entry naming a namespace that is
    kept for any reason should keep the namespace."""
    ns = NetnsEntry(name="cni-x", path="/run/netns/cni-x", mounted=True, ns_inode=7, mtime=OLD,
                    addresses=("10.0.0.2", "10.0.0.3"), addresses_read=True)
    d1 = cache("d1", uid="u-dead", ip="10.0.0.2", netns="/var/run/netns/cni-x")
    d2 = cache("d2", uid="u-new", ip="10.0.0.3", netns="/var/run/netns/cni-x", mtime=NOW.timestamp() - 5)
    inv = Inventory(taken_at=NOW, cni_cache=(d1, d2), netns=(ns,), veths=(veth("x"),),
                    ip_reservations=(reservation("10.0.0.2", "d1"), reservation("10.0.0.3", "d2", mtime=d2.mtime)))
    findings = correlate(inv, desired(pod("q", "u-q", ip="10.0.0.9")), now=NOW)
    cls = {(f.kind.value, f.id): f.cls.value for f in findings}
    assert cls[("cni_cache", d2.path)] == "protected"
    acting = {k: v for k, v in cls.items() if k[0] in ("netns", "veth")}
    assert acting == {("netns", "/run/netns/cni-x"): "protected", ("veth", "veth0"): "protected"}, acting


def test_a_name_only_dead_entry_sharing_a_starting_pods_namespace_is_not_deld() -> None:
    """Entries without K8S_POD_UID (runtimes that pass only namespace/name). web is Running, its status
    shows no IP yet; its entry names /run/netns/cni-w and cannot be tied (owner unknown, so holding).
    A dead entry of pod "gone" (no such pod) names the same namespace. `_shared_netns` asks for a holding
    entry of another owner with `res.owner.uid != owner_uid`, and both uids are None: the dead entry is
    stale_cni_cache and its DEL would delete eth0 inside web's namespace. (Found by the property of
    tests/adversarial/found/test_safety_property_extended.py::test_network_rules_alone.)"""
    ns = NetnsEntry(name="cni-w", path="/run/netns/cni-w", mounted=True, ns_inode=7, mtime=OLD,
                    addresses=("10.0.0.2",), addresses_read=True)
    web = cache("cw", uid=None, name="web", ip="10.0.0.2", netns="/var/run/netns/cni-w")
    gone = cache("cg", uid=None, name="gone", ip="10.0.0.3", netns="/var/run/netns/cni-w")
    inv = Inventory(taken_at=NOW, cni_cache=(web, gone), netns=(ns,),
                    ip_reservations=(reservation("10.0.0.2", "cw"), reservation("10.0.0.3", "cg")))
    findings = correlate(inv, desired(pod("web", "u1")), now=NOW)
    cls = {f.id: f.cls for f in findings if f.kind is Kind.CNI_CACHE}
    assert cls[web.path] is FindingClass.UNKNOWN
    assert not cls[gone.path].is_residue, cls
