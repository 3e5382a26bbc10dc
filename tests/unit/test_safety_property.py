"""Property: whatever the inventory and the pod list, nothing a live or pending pod uses is residue."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.model.findings import FindingClass
from nodegc.model.items import Phase
from nodegc.model.pods import OwnerState, Pod
from nodegc.model.resources import CNICacheEntry, HostportRule, Inventory, IptablesChain, Kind
from nodegc.planning.correlate import correlate
from nodegc.planning.owners import cni_chain_name
from nodegc.planning.phases import PhasePolicy, identities, reconcile
from tests.unit.factories import NET, NOW, OLD, desired, netns, pod_dir, reservation, veth

UIDS = [f"u{i}" for i in range(5)]
IPS = [f"10.0.0.{i}" for i in range(2, 8)]
PHASES = [None, "Running", "Pending", "Succeeded", "Failed", "Unknown"]


@dataclass(frozen=True)
class Sandbox:
    cid: str
    uid: str
    ip: str
    cache: bool
    cache_uid: bool
    reservation: bool
    netns: bool
    netns_mounted: bool
    chain: bool
    young: bool


sandboxes = st.builds(
    Sandbox,
    cid=st.sampled_from([f"c{i}" for i in range(8)]),
    uid=st.sampled_from(UIDS),
    ip=st.sampled_from(IPS),
    cache=st.booleans(),
    cache_uid=st.booleans(),
    reservation=st.booleans(),
    netns=st.booleans(),
    netns_mounted=st.booleans(),
    chain=st.booleans(),
    young=st.booleans(),
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Sandbox], list[Pod], dict[str, bool]]:
    boxes = draw(st.lists(sandboxes, max_size=6, unique_by=(lambda s: s.cid, lambda s: s.ip)))
    pods = []
    for uid in UIDS:
        if draw(st.booleans()):
            continue
        phase = draw(st.sampled_from(PHASES))
        own = [s.ip for s in boxes if s.uid == uid]
        ip_choice = draw(st.sampled_from([None, *own, *IPS]))
        # A running pod shows an IP; a pending one may not yet.
        ip = ip_choice if phase != "Pending" or draw(st.booleans()) else None
        pods.append(Pod(uid=uid, namespace="default", name=f"pod-{uid}", node_name="n1", phase=phase,
                        pod_ips=(ip,) if ip else ()))
    dirs = {uid: draw(st.booleans()) for uid in UIDS}
    return boxes, pods, dirs


def build(boxes: list[Sandbox], dirs: dict[str, bool]) -> Inventory:
    res, caches, nss, links, chains, rules = [], [], [], [], [], []
    for s in boxes:
        mtime = NOW.timestamp() - 1 if s.young else OLD
        if s.reservation:
            res.append(reservation(s.ip, s.cid, mtime=mtime))
        if s.cache:
            caches.append(CNICacheEntry(path=f"/r/{s.cid}", inode=1, mtime=mtime, network=NET, container_id=s.cid,
                                        ifname="eth0", netns=f"/var/run/netns/cni-{s.cid}", pod_namespace="default",
                                        pod_name=f"pod-{s.uid}", pod_uid=s.uid if s.cache_uid else None,
                                        ips=(s.ip,)))
        if s.netns:
            nss.append(netns(s.cid, mounted=s.netns_mounted, addresses=(s.ip,) if s.netns_mounted else (),
                             mtime=mtime))
            if s.netns_mounted:
                links.append(veth(s.cid, name=f"veth-{s.cid}"))
        if s.chain:
            jump = f"-A POSTROUTING -s {s.ip}/32 -j {cni_chain_name(NET, s.cid)}"
            chains.append(IptablesChain("nat", cni_chain_name(NET, s.cid), NET, s.cid, jumps=(jump,)))
            rules.append(HostportRule("nat", "CNI-HOSTPORT-DNAT", f"-A CNI-HOSTPORT-DNAT -j CNI-DN-{s.cid}", NET,
                                      s.cid, f"CNI-DN-{s.cid}"))
    pod_dirs = tuple(pod_dir(uid, mounted=True) for uid, present in dirs.items() if present)
    return Inventory(taken_at=NOW, pod_dirs=pod_dirs, ip_reservations=tuple(res), cni_cache=tuple(caches),
                     netns=tuple(nss), veths=tuple(links), chains=tuple(chains), hostport_rules=tuple(rules))


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_nothing_of_a_live_or_pending_pod_is_residue(
    scenario: tuple[list[Sandbox], list[Pod], dict[str, bool]],
) -> None:
    boxes, pods, dirs = scenario
    inventory = build(boxes, dirs)
    findings = correlate(inventory, desired(*pods), now=NOW)
    holding = {p.uid for p in pods if p.state is not OwnerState.TERMINAL}
    existing = {p.uid for p in pods}
    claimed_ips = {ip for p in pods if p.state is not OwnerState.TERMINAL for ip in p.pod_ips}
    # Ground truth: which resource ids belong to a sandbox of a pod that still holds resources.
    bound: set[str] = set()
    by_uid = {p.uid: p for p in pods}
    for s in boxes:
        owner = by_uid.get(s.uid)
        # A live pod uses its current sandbox: the one whose IP its status shows. A pod still starting
        # may be using any sandbox made for it; an IP a live pod claims is used whoever reserved it.
        current = owner is not None and owner.state is not OwnerState.TERMINAL and (
            owner.state is not OwnerState.LIVE or not owner.pod_ips or s.ip in owner.pod_ips)
        if current or s.ip in claimed_ips:
            bound |= {f"{NET}/{s.ip}", f"/r/{s.cid}", f"veth-{s.cid}", cni_chain_name(NET, s.cid)}
            if s.netns_mounted:
                # An unmounted netns file is not a namespace: no pod can be using it.
                bound.add(f"/run/netns/cni-{s.cid}")
            bound |= {f.id for f in findings if f.kind is Kind.HOSTPORT_RULE and f.owner.container_id == s.cid}
    for uid in holding:
        bound |= {f"/kubelet/pods/{uid}", f"/kubelet/pods/{uid}/volumes/kubernetes.io~empty-dir/data"}
    for uid in existing:
        bound.add(f"/kubelet/pods/{uid}")
    for f in findings:
        if f.cls.is_residue:
            assert f.id not in bound, f
            assert f.owner_state not in (OwnerState.LIVE, OwnerState.PENDING), f
            assert f.ip not in claimed_ips, f
        if f.cls is FindingClass.IN_USE:
            assert f.owner_state is not OwnerState.ABSENT, f
    # And the plan: even with the most eager policy (mark on first sight), nothing bound is marked.
    eager = PhasePolicy(consecutive_scans=1, grace_seconds=0)
    transitions = reconcile({}, findings, identities(inventory), now=NOW.timestamp(), policy=eager)
    marked = {t.item.resource_id for t in transitions if t.item.phase is Phase.MARKED}
    assert not marked & bound, marked & bound
