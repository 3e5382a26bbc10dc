"""Join a node's inventory with the pods bound to it into findings.

Pure: no I/O, no clock (``now`` is passed in). The rules follow DESIGN.md's ownership section; each
branch ends in a class only when the evidence supports it, and everything else is ``unknown`` or
``protected`` so that nothing is ever reclaimed on a guess.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from nodegc import defaults
from nodegc.model.findings import Finding, FindingClass, Owner
from nodegc.model.pods import DesiredState, OwnerState
from nodegc.model.resources import (
    CNICacheEntry,
    HostportRule,
    Inventory,
    IPReservation,
    Kind,
    NetnsEntry,
    PodDir,
    VethLink,
)
from nodegc.planning.owners import (
    CacheIndex,
    PodIndex,
    Resolution,
    netns_key,
    normalize_ip,
    resolve_cache_owner,
)
from nodegc.planning.phases import hostport_rule_id

_HOLDING = frozenset({OwnerState.LIVE, OwnerState.PENDING, OwnerState.UNKNOWN})
"""Owner states in which the resource may be in use."""
_GONE = frozenset({OwnerState.TERMINAL, OwnerState.ABSENT})
_EXCLUSIVE_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs"})


@dataclass(frozen=True)
class CorrelationPolicy:
    min_age_seconds: float = defaults.MIN_AGE_SECONDS


def correlate(
    inventory: Inventory,
    desired: DesiredState,
    *,
    now: datetime,
    policy: CorrelationPolicy | None = None,
) -> tuple[Finding, ...]:
    return _Correlator(inventory, desired, now, policy or CorrelationPolicy()).run()


class _Correlator:
    def __init__(self, inv: Inventory, desired: DesiredState, now: datetime, policy: CorrelationPolicy):
        self.inv = inv
        self.pods = PodIndex.build(desired)
        self.cache = CacheIndex.build(inv.cni_cache)
        self.now = now.timestamp()
        self.policy = policy
        self.findings: list[Finding] = []
        self.reservations_by_cid: dict[str, list[tuple[IPReservation, Finding]]] = defaultdict(list)
        self.netns_class: dict[str, Finding] = {}
        self.network_ips: dict[str, set[str]] = defaultdict(set)
        for r in inv.ip_reservations:
            self.network_ips[r.network].add(r.ip)
        self.chain_ips = _chain_ips(inv)

    def run(self) -> tuple[Finding, ...]:
        for pod_dir in self.inv.pod_dirs:
            self._pod_dir(pod_dir)
        self._volume_conflicts()
        reserved_ips = {r.ip for r in self.inv.ip_reservations}
        for reservation in self.inv.ip_reservations:
            self._reservation(reservation, reserved_ips)
        self._status_conflicts(reserved_ips)
        for entry in self.inv.cni_cache:
            self._cache_entry(entry)
        for ns in self.inv.netns:
            self._netns(ns)
        for link in self.inv.veths:
            self._veth(link)
        for chain in self.inv.chains:
            self._by_container(Kind.IPTABLES_CHAIN, chain.name, chain.container_id, chain.network)
        for rule in self.inv.hostport_rules:
            self._by_container(Kind.HOSTPORT_RULE, _rule_id(rule), rule.container_id, rule.network)
        return tuple(self.findings)

    def _container_mtime(self, container_id: str) -> float | None:
        """Rules carry no timestamp; they are as young as the youngest file of the same sandbox."""
        times = [e.mtime for e in self.cache.by_container.get(container_id, [])]
        times += [r.mtime for r, _ in self.reservations_by_cid.get(container_id, [])]
        return max(times) if times else None

    # -- helpers -------------------------------------------------------------------------------

    def _add(self, finding: Finding) -> Finding:
        self.findings.append(finding)
        return finding

    def _young(self, mtime: float | None) -> bool:
        """Missing age protects: a resource whose age is unknown might be brand new."""
        return mtime is None or self.now - mtime < self.policy.min_age_seconds

    def _age_note(self, mtime: float | None) -> str:
        if mtime is None:
            return "age unknown"
        return f"{self.now - mtime:.0f}s old, minimum age {self.policy.min_age_seconds:.0f}s"

    def _pending_note(self) -> str | None:
        if not self.pods.unsettled:
            return None
        names = ", ".join(f"{p.namespace}/{p.name}" for p in self.pods.unsettled[:3])
        return f"pods still starting on this node (not Running with an IP) may own it: {names}"

    # -- kubelet root ------------------------------------------------------------------------

    def _pod_dir(self, pod_dir: PodDir) -> None:
        res = self.pods.resolve_uid(pod_dir.uid)
        evidence = res.evidence
        if res.state is OwnerState.ABSENT:
            if self._young(pod_dir.mtime):
                cls = FindingClass.PROTECTED
                evidence += (self._age_note(pod_dir.mtime),)
            else:
                cls = FindingClass.ORPHANED_POD_DIR
                if pod_dir.mounts_below:
                    evidence += (f"{len(pod_dir.mounts_below)} mounts still below it; removal waits for them",)
        else:
            # The kubelet removes a pod's directory only after the pod is deleted, terminal or not.
            cls = FindingClass.IN_USE
        self._add(Finding(cls, Kind.POD_DIR, pod_dir.path, res.owner, res.state, evidence))
        for volume in pod_dir.volumes:
            if not volume.mounted:
                continue
            what = f"{volume.fs_type or '?'} mount id {volume.mount_id}"
            vev = (*res.evidence, what)
            # Terminal pods no longer use volumes: the kubelet tears them down at termination.
            vcls = FindingClass.ORPHANED_VOLUME_MOUNT if res.state in _GONE else FindingClass.IN_USE
            if vcls.is_residue and self._young(pod_dir.mtime):
                # A mount carries no age; a pod newer than the pod list has a young directory.
                vcls, vev = FindingClass.PROTECTED, (*vev, "pod directory " + self._age_note(pod_dir.mtime))
            self._add(Finding(vcls, Kind.VOLUME_MOUNT, volume.path, res.owner, res.state, vev))

    def _volume_conflicts(self) -> None:
        """One exclusive block filesystem mounted into two live pods is reported, never reclaimed."""
        mounts = {m.mount_id: m for m in self.inv.mounts}
        volume_mounts = {v.path: v.mount_id for d in self.inv.pod_dirs for v in d.volumes if v.mounted}
        holders: dict[str, list[int]] = defaultdict(list)
        for index, finding in enumerate(self.findings):
            if finding.kind is not Kind.VOLUME_MOUNT or finding.owner_state not in _HOLDING:
                continue
            mount_id = volume_mounts.get(finding.id)
            mount = mounts.get(mount_id) if mount_id is not None else None
            if mount is not None and mount.fs_type in _EXCLUSIVE_FS:
                holders[f"{mount.device}:{mount.root}"].append(index)
        for device, indexes in holders.items():
            uids = {self.findings[i].owner.uid for i in indexes}
            if len(uids) < 2:
                continue
            for i in indexes:
                old = self.findings[i]
                note = f"device {device} is mounted by {len(uids)} live pods"
                self.findings[i] = Finding(
                    FindingClass.CONFLICT, old.kind, old.id, old.owner, old.owner_state, (*old.evidence, note)
                )

    # -- CNI -----------------------------------------------------------------------------------

    def _cache_for(self, container_id: str | None, network: str | None) -> list[CNICacheEntry]:
        if not container_id:
            return []
        entries = self.cache.by_container.get(container_id, [])
        same_net = [e for e in entries if network is None or e.network == network]
        return same_net or entries

    def _resolve_container(self, container_id: str, network: str | None) -> Resolution | None:
        """The most protective resolution among the cache entries of one sandbox."""
        entries = self._cache_for(container_id, network)
        if not entries:
            return None
        resolutions = [resolve_cache_owner(e, self.pods) for e in entries]
        for res in resolutions:
            if res.state in _HOLDING:
                return res
        return resolutions[0]

    def _reservation(self, r: IPReservation, reserved_ips: set[str]) -> None:
        where = f"{r.network}/{r.ip}"
        evidence: tuple[str, ...] = (f"reservation names container {_short(r.container_id)}",)
        finding: Finding
        if r.container_id is None:
            finding = Finding(FindingClass.UNKNOWN, Kind.IP_RESERVATION, where, Owner(), OwnerState.UNKNOWN,
                              ("reservation file names no container id",), ip=r.ip)
        elif (res := self._resolve_container(r.container_id, r.network)) is not None:
            finding = self._reservation_with_cache(r, where, res, evidence)
        else:
            finding = self._reservation_without_cache(r, where, evidence)
        if finding.cls.is_residue and self._young(r.mtime):
            finding = _reclass(finding, FindingClass.PROTECTED, self._age_note(r.mtime))
        self._add(finding)
        if r.container_id:
            self.reservations_by_cid[r.container_id].append((r, finding))

    def _reservation_with_cache(
        self, r: IPReservation, where: str, res: Resolution, evidence: tuple[str, ...]
    ) -> Finding:
        others = [p for p in self.pods.claims.get(r.ip, []) if p.uid != res.owner.uid]
        evidence = evidence + res.evidence
        if others:
            names = ", ".join(f"{p.namespace}/{p.name}" for p in others)
            evidence += (f"status of {names} claims {r.ip} but the reservation leads to {res.owner.label()}",)
            return Finding(FindingClass.CONFLICT, Kind.IP_RESERVATION, where, res.owner, res.state, evidence,
                           ip=r.ip)
        if res.state in _HOLDING:
            return Finding(FindingClass.IN_USE, Kind.IP_RESERVATION, where, res.owner, res.state, evidence, ip=r.ip)
        return Finding(FindingClass.LEAKED_IP, Kind.IP_RESERVATION, where, res.owner, res.state, evidence, ip=r.ip)

    def _reservation_without_cache(
        self,
        r: IPReservation,
        where: str,
        evidence: tuple[str, ...],
    ) -> Finding:
        owner = Owner(container_id=r.container_id)
        evidence += ("no cni cache entry for that container",)
        pods = self.pods.claims.get(r.ip, [])
        if len(pods) > 1:
            names = ", ".join(f"{p.namespace}/{p.name}" for p in pods)
            return Finding(FindingClass.CONFLICT, Kind.IP_RESERVATION, where, owner, OwnerState.UNKNOWN,
                           (*evidence, f"{r.ip} claimed by {len(pods)} live pods: {names}"), ip=r.ip)
        if pods:
            pod = pods[0]
            tied = Owner(uid=pod.uid, namespace=pod.namespace, name=pod.name, container_id=r.container_id)
            return Finding(FindingClass.IN_USE, Kind.IP_RESERVATION, where, tied, pod.state,
                           (*evidence, f"status of {pod.namespace}/{pod.name} claims {r.ip}"), ip=r.ip)
        pending = self._pending_note()
        if pending:
            return Finding(FindingClass.PROTECTED, Kind.IP_RESERVATION, where, owner, OwnerState.UNKNOWN,
                           (*evidence, pending), ip=r.ip)
        if not self._network_backed_by_status(r.network):
            note = f"network {r.network} holds no IP that a live pod's status shows; it may be a secondary network"
            return Finding(FindingClass.UNKNOWN, Kind.IP_RESERVATION, where, owner, OwnerState.UNKNOWN,
                           (*evidence, note), ip=r.ip)
        terminal = self.pods.terminal_claims.get(r.ip, [])
        if terminal:
            pod = terminal[0]
            owner = Owner(uid=pod.uid, namespace=pod.namespace, name=pod.name, container_id=r.container_id)
            evidence += (f"only terminal pod {pod.namespace}/{pod.name} still shows {r.ip}",)
        else:
            evidence += (f"no pod on this node claims {r.ip}",)
        state = OwnerState.TERMINAL if terminal else OwnerState.ABSENT
        return Finding(FindingClass.LEAKED_IP, Kind.IP_RESERVATION, where, owner, state, evidence, ip=r.ip)

    def _network_backed_by_status(self, network: str) -> bool:
        """A network reflects pod status when a live pod's status IP is reserved in it (or no pod runs)."""
        if not self.pods.claims:
            return True
        return any(ip in self.network_ips[network] for ip in self.pods.claims)

    def _status_conflicts(self, reserved_ips: set[str]) -> None:
        """Two live pods claiming one IP are reported even when no reservation file backs it."""
        for ip, pods in self.pods.claims.items():
            if len(pods) < 2 or ip in reserved_ips:
                continue
            names = ", ".join(f"{p.namespace}/{p.name}" for p in pods)
            self._add(Finding(FindingClass.CONFLICT, Kind.IP_RESERVATION, ip, Owner(), OwnerState.LIVE,
                              (f"{ip} claimed by {len(pods)} live pods: {names}",), ip=ip))

    def _claimed_elsewhere(self, ips: Iterable[str], owner_uid: str | None) -> str | None:
        """A dead sandbox whose IP a live pod claims is a conflict: which one is right is not ours to guess."""
        for ip in ips:
            others = [p for p in self.pods.claims.get(ip, []) if p.uid != owner_uid]
            if others:
                names = ", ".join(f"{p.namespace}/{p.name}" for p in others)
                return f"{ip} of this sandbox is claimed by live pod {names}"
        return None

    def _shared_netns(self, entry: CNICacheEntry, owner_uid: str | None) -> str | None:
        """A dead entry naming the namespace a holding entry also names: its DEL would run in a live pod."""
        key = netns_key(entry.netns)
        if key is None:
            return None
        for other in self.cache.by_netns.get(key, []):
            if other is entry:
                continue
            res = resolve_cache_owner(other, self.pods)
            if res.state in _HOLDING and res.owner.uid != owner_uid:
                return f"its netns {entry.netns} is also named by {res.owner.label()}'s sandbox"
        return None

    def _cache_entry(self, entry: CNICacheEntry) -> None:
        res = resolve_cache_owner(entry, self.pods)
        conflict = None
        if res.state in _GONE:
            conflict = self._claimed_elsewhere(entry.ips, res.owner.uid) or self._shared_netns(entry, res.owner.uid)
        if conflict:
            self._add(Finding(FindingClass.CONFLICT, Kind.CNI_CACHE, entry.path, res.owner, res.state,
                              (*res.evidence, conflict), netns=entry.netns, ip=entry.ips[0] if entry.ips else None))
            return
        if res.state in _HOLDING:
            cls = FindingClass.IN_USE if res.state is not OwnerState.UNKNOWN else FindingClass.UNKNOWN
        else:
            cls = FindingClass.STALE_CNI_CACHE
        finding = Finding(cls, Kind.CNI_CACHE, entry.path, res.owner, res.state, res.evidence,
                          netns=entry.netns, ip=entry.ips[0] if entry.ips else None)
        if cls.is_residue and self._young(entry.mtime):
            finding = _reclass(finding, FindingClass.PROTECTED, self._age_note(entry.mtime))
        self._add(finding)

    def _netns(self, ns: NetnsEntry) -> None:
        entries = self.cache.by_netns.get(ns.name, [])
        finding: Finding
        if entries:
            resolutions = [resolve_cache_owner(e, self.pods) for e in entries]
            holding = [r for r in resolutions if r.state in _HOLDING]
            res = holding[0] if holding else resolutions[0]
            conflict = None if holding else self._claimed_elsewhere(
                [ip for e in entries for ip in e.ips], res.owner.uid)
            evidence = res.evidence
            if res.state is OwnerState.UNKNOWN:
                cls = FindingClass.UNKNOWN
            elif conflict:
                cls, evidence = FindingClass.CONFLICT, (*evidence, conflict)
            else:
                cls = FindingClass.IN_USE if holding else FindingClass.LEAKED_NETNS
            finding = Finding(cls, Kind.NETNS, ns.path, res.owner, res.state, evidence, netns=ns.path)
        elif not ns.mounted:
            finding = Finding(FindingClass.LEAKED_NETNS, Kind.NETNS, ns.path, Owner(), OwnerState.ABSENT,
                              ("not a mounted namespace: an empty leftover file",), netns=ns.path)
        else:
            finding = self._netns_by_addresses(ns)
        if finding.cls.is_residue and self._young(ns.mtime):
            finding = _reclass(finding, FindingClass.PROTECTED, self._age_note(ns.mtime))
        self.netns_class[ns.path] = finding
        self._add(finding)

    def _netns_by_addresses(self, ns: NetnsEntry) -> Finding:
        evidence: tuple[str, ...] = ("no cni cache entry names it",)
        if not ns.addresses:
            return Finding(FindingClass.UNKNOWN, Kind.NETNS, ns.path, Owner(), OwnerState.UNKNOWN,
                           (*evidence, "no addresses inside to match against pods"), netns=ns.path)
        for address in ns.addresses:
            for pod in self.pods.claims.get(address, []):
                owner = Owner(uid=pod.uid, namespace=pod.namespace, name=pod.name)
                return Finding(FindingClass.IN_USE, Kind.NETNS, ns.path, owner, pod.state,
                               (*evidence, f"holds {address}, claimed by {owner.label()}"), netns=ns.path)
        pending = self._pending_note()
        if pending:
            # A terminal pod's address may already be reused by a sandbox still being created.
            return Finding(FindingClass.PROTECTED, Kind.NETNS, ns.path, Owner(), OwnerState.UNKNOWN,
                           (*evidence, pending), netns=ns.path)
        for address in ns.addresses:
            for pod in self.pods.terminal_claims.get(address, []):
                owner = Owner(uid=pod.uid, namespace=pod.namespace, name=pod.name)
                return Finding(FindingClass.LEAKED_NETNS, Kind.NETNS, ns.path, owner, OwnerState.TERMINAL,
                               (*evidence, f"holds {address} of terminal pod {owner.label()}"), netns=ns.path)
        return Finding(FindingClass.UNKNOWN, Kind.NETNS, ns.path, Owner(), OwnerState.UNKNOWN,
                       (*evidence, f"holds {', '.join(ns.addresses)}, claimed by no pod"), netns=ns.path)

    def _veth(self, link: VethLink) -> None:
        ns_finding = self.netns_class.get(link.peer_netns_path or "")
        if ns_finding is None:
            where = "in this namespace" if link.peer_netnsid is None else f"in netns id {link.peer_netnsid}"
            self._add(Finding(FindingClass.UNKNOWN, Kind.VETH, link.name, Owner(), OwnerState.UNKNOWN,
                              (f"peer lives {where}, not in a namespace of the netns directory",)))
            return
        cls = {
            FindingClass.IN_USE: FindingClass.IN_USE,
            FindingClass.LEAKED_NETNS: FindingClass.DANGLING_VETH,
            FindingClass.PROTECTED: FindingClass.PROTECTED,
        }.get(ns_finding.cls, FindingClass.UNKNOWN)
        evidence = (f"peer in {link.peer_netns_path}", *ns_finding.evidence)
        self._add(Finding(cls, Kind.VETH, link.name, ns_finding.owner, ns_finding.owner_state, evidence,
                          netns=link.peer_netns_path))

    def _by_container(
        self,
        kind: Kind,
        ident: str,
        container_id: str | None,
        network: str | None,
    ) -> None:
        before = len(self.findings)
        self._classify_by_container(kind, ident, container_id, network)
        added = self.findings[before:]
        mtime = self._container_mtime(container_id) if container_id else None
        if added and added[0].cls.is_residue and mtime is not None and self._young(mtime):
            self.findings[before] = _reclass(added[0], FindingClass.PROTECTED, self._age_note(mtime))

    def _classify_by_container(
        self,
        kind: Kind,
        ident: str,
        container_id: str | None,
        network: str | None,
    ) -> None:
        leaked = FindingClass.LEAKED_CHAIN if kind is Kind.IPTABLES_CHAIN else FindingClass.LEAKED_HOSTPORT_RULE
        if not container_id:
            self._add(Finding(FindingClass.UNKNOWN, kind, ident, Owner(), OwnerState.UNKNOWN,
                              ("no container id in the rule comments",)))
            return
        evidence: tuple[str, ...] = (f"comment names network {network} container {_short(container_id)}",)
        res = self._resolve_container(container_id, network)
        if res is not None:
            ips = [ip for e in self._cache_for(container_id, network) for ip in e.ips]
            ips += sorted(self.chain_ips.get(container_id, ()))
            conflict = self._claimed_elsewhere(ips, res.owner.uid) if res.state in _GONE else None
            evidence += res.evidence
            if res.state is OwnerState.UNKNOWN:
                cls = FindingClass.UNKNOWN
            elif conflict:
                cls, evidence = FindingClass.CONFLICT, (*evidence, conflict)
            else:
                cls = FindingClass.IN_USE if res.state in _HOLDING else leaked
            self._add(Finding(cls, kind, ident, res.owner, res.state, evidence))
            return
        reservations = self.reservations_by_cid.get(container_id, [])
        if reservations:
            # No cache entry: the chain shares the fate of the IP reservation of the same container.
            ip_findings = [f for _, f in reservations]
            if any(f.cls is FindingClass.IN_USE for f in ip_findings):
                cls = FindingClass.IN_USE
            elif all(f.cls is FindingClass.LEAKED_IP for f in ip_findings):
                cls = leaked
            else:
                cls = FindingClass.UNKNOWN
            ref = ip_findings[0]
            self._add(Finding(cls, kind, ident, ref.owner, ref.owner_state,
                              (*evidence, f"follows IP reservation {ref.id}: {ref.cls}")))
            return
        chain_ips = self.chain_ips.get(container_id, set())
        claimed = sorted(ip for ip in chain_ips if ip in self.pods.claims)
        if claimed:
            pod = self.pods.claims[claimed[0]][0]
            owner = Owner(uid=pod.uid, namespace=pod.namespace, name=pod.name, container_id=container_id)
            self._add(Finding(FindingClass.IN_USE, kind, ident, owner, pod.state,
                              (*evidence, f"its rules match {claimed[0]}, claimed by {owner.label()}")))
            return
        if chain_ips and network and self.cache.networks.get(network, 0) > 0 and not self.pods.unsettled:
            note = (f"no cache entry or IP reservation for that container and no live pod claims"
                    f" {', '.join(sorted(chain_ips))}, while {self.cache.networks[network]} other attachments of"
                    f" {network} have cache entries")
            self._add(Finding(leaked, kind, ident, Owner(container_id=container_id), OwnerState.ABSENT,
                              (*evidence, note)))
            return
        self._add(Finding(FindingClass.UNKNOWN, kind, ident, Owner(container_id=container_id),
                          OwnerState.UNKNOWN, (*evidence, "no cache entry or IP reservation to tie it to a pod")))


_RULE_IP = re.compile(r"(?:^|\s)(?:-s|-d|--to-destination)\s+\[?([0-9a-fA-F.:]+?)\]?(?:/(?:32|128))?(?::\d+)?(?=\s|$)")


def _chain_ips(inv: Inventory) -> dict[str, set[str]]:
    """Pod IPs the CNI rules of each container name (-s in the masquerade jump, DNAT destinations)."""
    found: dict[str, set[str]] = defaultdict(set)
    texts: list[tuple[str | None, str]] = [(c.container_id, r) for c in inv.chains for r in (*c.rules, *c.jumps)]
    texts += [(r.container_id, r.rule) for r in inv.hostport_rules]
    for cid, text in texts:
        if not cid:
            continue
        for match in _RULE_IP.finditer(text):
            ip = normalize_ip(match.group(1))
            if ip:
                found[cid].add(ip)
    return found


def _reclass(finding: Finding, cls: FindingClass, note: str) -> Finding:
    return Finding(cls, finding.kind, finding.id, finding.owner, finding.owner_state,
                   (*finding.evidence, note), netns=finding.netns, ip=finding.ip)


def _short(container_id: str | None) -> str:
    return container_id[:12] if container_id else "?"


def _rule_id(rule: HostportRule) -> str:
    return hostport_rule_id(rule)
