"""Findings: the runtime's revision (planning/runtime.py) runs after the sibling rule and the netns rules of
planning/network.py and undoes them. Each test states what must hold and fails today."""

from __future__ import annotations

from dataclasses import replace

from nodegc.model.findings import Finding, FindingClass
from nodegc.model.resources import CNICacheEntry, Inventory, IptablesChain, Kind, NetnsEntry
from nodegc.planning.correlate import correlate
from nodegc.planning.owners import cni_chain_name
from tests.unit.factories import NET, NOW, OLD, cache, desired, netns, pod, reservation, veth
from tests.unit.test_runtime_ownership import sandbox, view


def _by_key(findings: tuple[Finding, ...]) -> dict[tuple[Kind, str], Finding]:
    return {(f.kind, f.id): f for f in findings}


def _residue(findings: tuple[Finding, ...], cid: str) -> list[tuple[str, str, str]]:
    return [(f.kind.value, f.id, f.cls.value) for f in findings if f.cls.is_residue
            and cid in (f.owner.container_id, f.sandbox)]


def _live_c1_unknown_to_runtime(first: str, second: str) -> tuple[IptablesChain, tuple[Finding, ...]]:
    """Pod p (u1) runs with status IP 10.0.0.5 from sandbox c1: id-only host-local files `first` and
    `second` (in this order), no cache entry, c1's masquerade chain. The runtime lists q's sandbox c2, not c1."""
    chain = IptablesChain(table="nat", name=cni_chain_name(NET, "c1"), network=NET, container_id="c1",
                          rules=("-A X -d 10.0.0.0/24 -j ACCEPT",),
                          jumps=('-A POSTROUTING -s 10.0.0.5/32 -m comment --comment "name: \\"k8s-pod-network\\"'
                                 ' id: \\"c1\\"" -j X',))
    inv = Inventory(
        taken_at=NOW,
        ip_reservations=(reservation(first, "c1"), reservation(second, "c1"), reservation("10.0.0.7", "c2")),
        cni_cache=(cache("c2", uid="u2", ip="10.0.0.7"),),
        chains=(chain,),
        runtime=view(sandbox("c2", "u2", ips=("10.0.0.7",), name="q")),
    )
    return chain, correlate(inv, desired(pod("p", "u1", ip="10.0.0.5"), pod("q", "u2", ip="10.0.0.7")), now=NOW)


def test_second_range_address_of_a_live_pod_unknown_to_runtime_is_not_taken() -> None:
    """Pod p runs with status IP 10.0.0.5 from sandbox c1 (id-only host-local files in two ranges, no
    cache entry; masquerade chain of c1). The runtime lists other sandboxes of the network but not c1
    (it lost c1's metadata, or lists partially). The design keeps "a live pod's address" and "siblings
    stand or fall together": 10.0.0.5 stays, so must 10.1.0.5 and the chain. Today 10.1.0.5 becomes
    leaked_ip (host-local hands it to the next pod: a duplicate address) and the chain leaked_chain."""
    _, findings = _live_c1_unknown_to_runtime("10.1.0.5", "10.0.0.5")
    f = _by_key(findings)
    assert f[(Kind.IP_RESERVATION, f"{NET}/10.0.0.5")].cls is FindingClass.IN_USE
    assert _residue(findings, "c1") == [], _residue(findings, "c1")


def test_dual_stack_address_of_live_sandbox_with_cache_entry_unknown_to_runtime() -> None:
    """Same split with a readable cache entry of p (IPv4 and IPv6), status shows only the IPv4 pod IP."""
    entry = cache("c1", uid="u1", ip="10.0.0.5")
    entry = replace(entry, ips=("10.0.0.5", "fd00::5"))
    inv = Inventory(
        taken_at=NOW,
        ip_reservations=(reservation("10.0.0.5", "c1"), reservation("fd00::5", "c1"), reservation("10.0.0.7", "c2")),
        cni_cache=(entry, cache("c2", uid="u2", ip="10.0.0.7")),
        runtime=view(sandbox("c2", "u2", ips=("10.0.0.7",), name="q")),
    )
    findings = correlate(inv, desired(pod("p", "u1", ip="10.0.0.5"), pod("q", "u2", ip="10.0.0.7")), now=NOW)
    assert _residue(findings, "c1") == [], _residue(findings, "c1")


def test_old_entry_naming_a_ready_sandboxs_netns_is_never_deld() -> None:
    """Live pod p runs in READY sandbox c2 (netns cni-shared, 10.0.0.7). A stale entry of an old sandbox
    c1 of the same pod (unknown to the runtime) names the same namespace file. network.py keeps dead
    entries that share a live namespace (conflict), but only when the entry's owner is gone; here the
    owner is live, so network.py says in_use and runtime.py turns it into stale_cni_cache: its CNI DEL
    (bridge: delete eth0 in CNI_NETNS) would run inside the live pod's namespace, and terminate skips the
    live GET (sandbox set, owner live)."""
    shared = "/var/run/netns/cni-shared"
    ns = NetnsEntry(name="cni-shared", path="/run/netns/cni-shared", mounted=True, ns_inode=7, mtime=OLD,
                    addresses=("10.0.0.7",), addresses_read=True)
    inv = Inventory(
        taken_at=NOW,
        ip_reservations=(reservation("10.0.0.2", "c1"), reservation("10.0.0.7", "c2")),
        cni_cache=(cache("c1", uid="u1", ip="10.0.0.2", netns=shared),
                   cache("c2", uid="u1", ip="10.0.0.7", netns=shared)),
        netns=(ns,),
        runtime=view(sandbox("c2", "u1", ips=("10.0.0.7",), netns_path=shared)),
    )
    findings = correlate(inv, desired(pod("p", "u1", ip="10.0.0.7")), now=NOW)
    f = _by_key(findings)
    assert f[(Kind.NETNS, "/run/netns/cni-shared")].cls is FindingClass.IN_USE
    old = f[(Kind.CNI_CACHE, f"/cni/results/{NET}-c1-eth0")]
    assert not old.cls.is_residue, (old.cls, old.evidence)


def test_entry_of_another_live_pod_naming_a_ready_sandboxs_netns() -> None:
    """The same with the planted entry naming another live pod q (uid u2) whose current sandbox is c3."""
    shared = "/var/run/netns/cni-p"
    ns = NetnsEntry(name="cni-p", path="/run/netns/cni-p", mounted=True, ns_inode=7, mtime=OLD,
                    addresses=("10.0.0.7",), addresses_read=True)
    inv = Inventory(
        taken_at=NOW,
        ip_reservations=(reservation("10.0.0.7", "c2"), reservation("10.0.0.8", "c3")),
        cni_cache=(cache("c1", uid="u2", name="q", ip="10.0.0.2", netns=shared),
                   cache("c2", uid="u1", ip="10.0.0.7", netns=shared), cache("c3", uid="u2", name="q", ip="10.0.0.8")),
        netns=(ns, netns("c3")),
        runtime=view(sandbox("c2", "u1", ips=("10.0.0.7",), netns_path=shared),
                     sandbox("c3", "u2", ips=("10.0.0.8",), name="q", netns_path="/var/run/netns/cni-c3")),
    )
    findings = correlate(inv, desired(pod("p", "u1", ip="10.0.0.7"), pod("q", "u2", ip="10.0.0.8")), now=NOW)
    old = _by_key(findings)[(Kind.CNI_CACHE, f"/cni/results/{NET}-c1-eth0")]
    assert not old.cls.is_residue, (old.cls, old.evidence)


def test_masquerade_chain_of_a_live_sandbox_takes_the_ip_of_its_last_file_only() -> None:
    """runtime.py gives a chain the IPs of one file of its container (the last one in a dict built from all
    of them), not all of them: with the second-range reservation listed last, the live pod's masquerade
    chain is judged by 10.1.0.5 alone and becomes leaked_chain (its removal cuts the pod's egress NAT)."""
    chain, findings = _live_c1_unknown_to_runtime("10.0.0.5", "10.1.0.5")
    f = _by_key(findings)
    assert not f[(Kind.IPTABLES_CHAIN, chain.name)].cls.is_residue, f[(Kind.IPTABLES_CHAIN, chain.name)]


def test_add_still_running_for_a_starting_pod_outlives_the_minimum_age() -> None:
    """Pod s is Pending: RunPodSandbox is in CNI ADD (a slow chained plugin, a slow delegate); host-local
    wrote 10.0.0.9 for the new sandbox cnew more than --min-age ago, containerd adds the sandbox to its
    store only after ADD returns, and libcni writes the cache entry only then. Without the runtime, "a pod
    on the node is still starting" keeps every id-only reservation; runtime.py drops that protection and
    calls it leaked_ip on age alone (min-age 60 s + grace 120 s against a kubelet runtime-request-timeout
    that is often raised to minutes), so the address of the sandbox being born is released under it."""
    inv = Inventory(
        taken_at=NOW,
        ip_reservations=(reservation("10.0.0.9", "cnew", mtime=NOW.timestamp() - 240),
                         reservation("10.0.0.7", "c2")),
        cni_cache=(cache("c2", uid="u2", ip="10.0.0.7"),),
        runtime=view(sandbox("c2", "u2", ips=("10.0.0.7",), name="q")),
    )
    without = correlate(replace(inv, runtime=None), desired(pod("s", "u1", phase="Pending"),
                                                          pod("q", "u2", ip="10.0.0.7")), now=NOW)
    assert _by_key(without)[(Kind.IP_RESERVATION, f"{NET}/10.0.0.9")].cls is FindingClass.PROTECTED
    findings = correlate(inv, desired(pod("s", "u1", phase="Pending"), pod("q", "u2", ip="10.0.0.7")), now=NOW)
    f = _by_key(findings)[(Kind.IP_RESERVATION, f"{NET}/10.0.0.9")]
    assert not f.cls.is_residue, (f.cls, f.evidence)


def test_a_container_of_another_cni_user_keeps_its_netns_veth_and_chain() -> None:
    """A running container that is not Kubernetes' (nerdctl, podman, a CNI-networked VM) on network
    "other": its libcni entry names no pod, its netns is in the same netns directory, its chain carries
    the comment of network "other". docs/ownership.md: an attachment of a network no runtime sandbox uses
    "may belong to something other than Kubernetes and the rules above stand". runtime.py checks the
    network only for reservations and cache entries (network is None for chains, netns and veths), so
    the container's chain, netns and veth become leaked_chain / leaked_netns / dangling_veth."""
    other = "other"
    entry = CNICacheEntry(path=f"/cni/results/{other}-x1-eth0", inode=2, mtime=OLD, network=other,
                          container_id="x1", ifname="eth0", netns="/var/run/netns/cni-x1", ips=("10.88.0.5",))
    chain = IptablesChain(table="nat", name=cni_chain_name(other, "x1"), network=other, container_id="x1",
                          jumps=(f'-A POSTROUTING -s 10.88.0.5/32 -m comment --comment "name: \\"{other}\\" id:'
                                 f' \\"x1\\"" -j {cni_chain_name(other, "x1")}',))
    ns = NetnsEntry(name="cni-x1", path="/run/netns/cni-x1", mounted=True, ns_inode=7, mtime=OLD,
                    addresses=("10.88.0.5",), addresses_read=True)
    inv = Inventory(
        taken_at=NOW,
        ip_reservations=(reservation("10.88.0.5", "x1", network=other), reservation("10.0.0.7", "c2")),
        cni_cache=(entry, cache("c2", uid="u2", ip="10.0.0.7")),
        chains=(chain,), netns=(ns,), veths=(veth("x1"),),
        runtime=view(sandbox("c2", "u2", ips=("10.0.0.7",), name="q")),
    )
    findings = correlate(inv, desired(pod("q", "u2", ip="10.0.0.7")), now=NOW)
    without = correlate(replace(inv, runtime=None), desired(pod("q", "u2", ip="10.0.0.7")), now=NOW)
    assert not [f for f in without if f.cls.is_residue]
    residue = [(f.kind.value, f.cls.value) for f in findings if f.cls.is_residue]
    assert residue == [], residue
