"""The safety property of tests/unit/test_safety_property.py, extended with what the unit property does not
generate: a second address per sandbox (two ranges, or dual stack; status lists one), the runtime's word
(READY, NotReady or unknown sandboxes), cache entries that name another sandbox's namespace, and
unreadable namespaces. Fails today (see the other tests of this directory for the minimal cases)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodegc.model.pods import OwnerState, Pod
from nodegc.model.resources import CNICacheEntry, Inventory, IptablesChain, Kind, NetnsEntry, ReadProblem
from nodegc.planning.correlate import correlate
from nodegc.planning.owners import cni_chain_name
from tests.unit.factories import NET, NOW, OLD, desired, reservation, veth
from tests.unit.test_runtime_ownership import sandbox, view

UIDS = [f"u{i}" for i in range(4)]
PHASES = ["Running", "Running", "Pending", "Succeeded", "Failed"]


@dataclass(frozen=True)
class Box:
    n: int
    uid: str
    second_ip: bool
    cache: bool
    netns_of: int  # index of the sandbox whose namespace the cache entry names
    runtime: str  # "ready", "notready", "unknown"
    chain: bool

    @property
    def cid(self) -> str:
        return f"c{self.n}"

    @property
    def ips(self) -> tuple[str, ...]:
        return (f"10.0.0.{self.n + 2}", *((f"10.1.0.{self.n + 2}",) if self.second_ip else ()))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Box], list[Pod], bool]:
    count = draw(st.integers(1, 5))
    boxes = [Box(n=i, uid=draw(st.sampled_from(UIDS)), second_ip=draw(st.booleans()), cache=draw(st.booleans()),
                 netns_of=draw(st.sampled_from([i, i, *range(count)])),
                 runtime=draw(st.sampled_from(["ready", "notready", "unknown"])), chain=draw(st.booleans()))
             for i in range(count)]
    pods = []
    for uid in UIDS:
        if draw(st.booleans()):
            continue
        phase = draw(st.sampled_from(PHASES))
        own = [b.ips[0] for b in boxes if b.uid == uid]
        ip = draw(st.sampled_from([None, *own])) if own else None
        pods.append(Pod(uid=uid, namespace="default", name=f"pod-{uid}", node_name="n1", phase=phase,
                        pod_ips=(ip,) if ip else ()))
    return boxes, pods, draw(st.booleans())


def build(boxes: list[Box], with_runtime: bool) -> Inventory:
    res, caches, nss, chains, sbs = [], [], [], [], []
    for b in boxes:
        res += [reservation(ip, b.cid) for ip in b.ips]
        if b.cache:
            caches.append(CNICacheEntry(path=f"/r/{b.cid}", inode=1, mtime=OLD, network=NET, container_id=b.cid,
                                        ifname="eth0", netns=f"/var/run/netns/cni-c{b.netns_of}",
                                        pod_namespace="default", pod_name=f"pod-{b.uid}", pod_uid=b.uid, ips=b.ips))
        nss.append(NetnsEntry(name=f"cni-{b.cid}", path=f"/run/netns/cni-{b.cid}", mounted=True, ns_inode=7,
                              mtime=OLD, addresses=b.ips, addresses_read=True))
        if b.chain:
            jump = f"-A POSTROUTING -s {b.ips[0]}/32 -j {cni_chain_name(NET, b.cid)}"
            chains.append(IptablesChain("nat", cni_chain_name(NET, b.cid), NET, b.cid, jumps=(jump,)))
        if b.runtime != "unknown":
            sbs.append(sandbox(b.cid, b.uid, ready=b.runtime == "ready", ips=b.ips, name=f"pod-{b.uid}",
                               netns_path=f"/var/run/netns/cni-{b.cid}"))
    inv = Inventory(taken_at=NOW, ip_reservations=tuple(res), cni_cache=tuple(caches), netns=tuple(nss),
                    chains=tuple(chains))
    return replace(inv, runtime=view(*sbs)) if with_runtime and sbs else inv


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_nothing_of_a_live_sandbox_is_residue_or_acted_in(scenario: tuple[list[Box], list[Pod], bool]) -> None:
    boxes, pods, with_runtime = scenario
    findings = correlate(build(boxes, with_runtime), desired(*pods), now=NOW)
    by_uid = {p.uid: p for p in pods}
    live: set[int] = set()
    for b in boxes:
        owner = by_uid.get(b.uid)
        # The current sandbox of a live pod is the one whose address its status shows; a READY one is live.
        if (owner is not None and owner.state is OwnerState.LIVE and b.ips[0] in owner.pod_ips) or (
                with_runtime and b.runtime == "ready"):
            live.add(b.n)
    bound: set[tuple[Kind, str]] = set()
    for b in boxes:
        if b.n in live:
            bound |= {(Kind.IP_RESERVATION, f"{NET}/{ip}") for ip in b.ips}
            bound |= {(Kind.NETNS, f"/run/netns/cni-{b.cid}"), (Kind.IPTABLES_CHAIN, cni_chain_name(NET, b.cid))}
            if b.cache:
                bound.add((Kind.CNI_CACHE, f"/r/{b.cid}"))
        if b.cache and b.netns_of in live:
            bound.add((Kind.CNI_CACHE, f"/r/{b.cid}"))  # its DEL would run in a live namespace
    bad = [(f.kind.value, f.id, f.cls.value) for f in findings if f.cls.is_residue and (f.kind, f.id) in bound]
    assert not bad, bad


# Without the runtime: unreadable and name-only entries, pods still starting, entries naming another
# sandbox's namespace (fails: a name-only dead entry sharing a starting pod's namespace).
NET_PHASES = ["Running", "Running", "Pending", "Succeeded", "Failed", None]


@dataclass(frozen=True)
class NetBox:
    n: int
    uid: str
    ip: int
    second_ip: bool
    cache: str  # none, uid, name, unreadable
    netns_of: int
    chain: bool
    young: bool

    @property
    def cid(self) -> str:
        return f"c{self.n}"

    @property
    def ips(self) -> tuple[str, ...]:
        return (f"10.0.0.{self.ip}", *((f"fd00::{self.ip}",) if self.second_ip else ()))


@st.composite
def net_scenarios(draw: st.DrawFn) -> tuple[list[NetBox], list[Pod]]:
    count = draw(st.integers(1, 5))
    boxes = [NetBox(n=i, uid=draw(st.sampled_from(UIDS)), ip=i + 2, second_ip=draw(st.booleans()),
                 cache=draw(st.sampled_from(["none", "uid", "uid", "name", "unreadable"])),
                 netns_of=draw(st.sampled_from([i, i, *range(count)])), chain=draw(st.booleans()),
                 young=draw(st.booleans()))
             for i in range(count)]
    pods = []
    for uid in UIDS:
        if draw(st.booleans()):
            continue
        phase = draw(st.sampled_from(NET_PHASES))
        own = [b.ips[0] for b in boxes if b.uid == uid]
        ip = draw(st.sampled_from([None, *own])) if own else None
        pods.append(Pod(uid=uid, namespace="default", name=f"pod-{uid}", node_name="n1", phase=phase,
                        pod_ips=(ip,) if ip else ()))
    return boxes, pods


def build_net(boxes: list[NetBox]) -> Inventory:
    res, caches, nss, chains, links, problems = [], [], [], [], [], []
    used_ips: set[str] = set()
    for b in boxes:
        mtime = NOW.timestamp() - 1 if b.young else OLD
        for ip in b.ips:
            if ip not in used_ips:  # one file per address
                res.append(reservation(ip, b.cid, mtime=mtime))
                used_ips.add(ip)
        if b.cache in ("uid", "name"):
            caches.append(CNICacheEntry(path=f"/r/{NET}-{b.cid}-eth0", inode=1, mtime=mtime, network=NET,
                                        container_id=b.cid, ifname="eth0", netns=f"/var/run/netns/cni-c{b.netns_of}",
                                        pod_namespace="default", pod_name=f"pod-{b.uid}",
                                        pod_uid=b.uid if b.cache == "uid" else None, ips=b.ips))
        elif b.cache == "unreadable":
            problems.append(ReadProblem(Kind.CNI_CACHE, f"/r/{NET}-{b.cid}-eth0", "truncated JSON"))
        nss.append(NetnsEntry(name=f"cni-{b.cid}", path=f"/run/netns/cni-{b.cid}", mounted=True, ns_inode=7,
                              mtime=mtime, addresses=b.ips, addresses_read=True))
        links.append(veth(b.cid, name=f"veth-{b.cid}"))
        if b.chain:
            jump = f"-A POSTROUTING -s {b.ips[0]}/32 -j {cni_chain_name(NET, b.cid)}"
            chains.append(IptablesChain("nat", cni_chain_name(NET, b.cid), NET, b.cid, jumps=(jump,)))
    return Inventory(taken_at=NOW, ip_reservations=tuple(res), cni_cache=tuple(caches), netns=tuple(nss),
                     chains=tuple(chains), veths=tuple(links), problems=tuple(problems))


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(net_scenarios())
def test_network_rules_alone(scenario: tuple[list[NetBox], list[Pod]]) -> None:
    boxes, pods = scenario
    inv = build_net(boxes)
    findings = correlate(inv, desired(*pods), now=NOW)
    by_uid = {p.uid: p for p in pods}
    live: set[int] = set()
    for b in boxes:
        owner = by_uid.get(b.uid)
        if owner is None or owner.state is OwnerState.TERMINAL:
            continue
        if owner.state is not OwnerState.LIVE or not owner.pod_ips or b.ips[0] in owner.pod_ips:
            live.add(b.n)
    bound: set[tuple[Kind, str]] = set()
    files = {r.ip: r.container_id for r in inv.ip_reservations}
    for b in boxes:
        if b.n in live:
            bound |= {(Kind.IP_RESERVATION, f"{NET}/{ip}") for ip in b.ips if files.get(ip) == b.cid}
            bound |= {(Kind.NETNS, f"/run/netns/cni-{b.cid}"), (Kind.IPTABLES_CHAIN, cni_chain_name(NET, b.cid)),
                      (Kind.VETH, f"veth-{b.cid}"), (Kind.CNI_CACHE, f"/r/{NET}-{b.cid}-eth0")}
    for b in boxes:
        if b.cache in ("uid", "name") and b.netns_of in live:
            bound.add((Kind.CNI_CACHE, f"/r/{NET}-{b.cid}-eth0"))
    bad = [(f.kind.value, f.id, f.cls.value) for f in findings if f.cls.is_residue and (f.kind, f.id) in bound]
    assert not bad, bad
