"""Indexes over the desired state and the CNI cache that answer "who owns this?".

Every lookup is written so that a missing or ambiguous answer protects: a name-only match, a pod
without status IPs, or two claimants never make a resource look free.
"""

from __future__ import annotations

import hashlib
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from nodegc.model.addresses import normalized_ip
from nodegc.model.findings import Owner
from nodegc.model.memo import remembered
from nodegc.model.pods import DesiredState, OwnerState, Pod
from nodegc.model.resources import CNICacheEntry, NetnsEntry

_CHAIN_NAME_MAX = 28
K = TypeVar("K")
V = TypeVar("V")


def cni_chain_name(network: str, container_id: str, prefix: str = "") -> str:
    """The chain name CNI plugins derive from network name and container id (libcni's FormatChainName)."""
    digest = hashlib.sha512((network + container_id).encode()).hexdigest()
    head = "CNI-" + prefix
    return head + digest[: _CHAIN_NAME_MAX - len(head)]


@remembered(65536)
def normalize_ip(text: str) -> str | None:
    try:
        return normalized_ip(text.split("/", 1)[0])
    except ValueError:
        return None


CRI_NETNS_SUBDIR = "io.containerd.grpc.v1.cri/netns"
"""Where containerd keeps netns files under its state dir (`netns_mounts_under_state_dir = true`)."""


@remembered(16384)
def netns_key(path: str | None) -> str | None:
    """Runtimes name the same namespace as /var/run/netns/x or /run/netns/x; the file name is the key.
    A file of containerd's state dir (`<state>/io.containerd.grpc.v1.cri/netns/x`) keys as
    `io.containerd.grpc.v1.cri/netns/x`: the state dir may be seen at another path than the runtime's
    (a container's mount), but it is never the same file as /run/netns/x. Any other path (e.g.
    /proc/<pid>/ns/net, whose file name says nothing) keys by the full path. Remembered: the same paths
    come back scan after scan, and every correlation asks for each several times."""
    if not path:
        return None
    path = path.rstrip("/")
    head, _, name = path.rpartition("/")
    if not name:
        return None
    if head.endswith("/" + CRI_NETNS_SUBDIR):
        return f"{CRI_NETNS_SUBDIR}/{name}"
    return sys.intern(name) if head.endswith("/netns") else path  # the netns entries' names


def entry_key(ns: NetnsEntry) -> str:
    """The key of a scanned netns file, by the directory it was read from (whatever that is called): the
    runtime's under its state dir, or a `--netns-dir` that is that very directory, keys as its paths do."""
    in_state_dir = (ns.runtime_dir or ns.runtime_keyed
                    or ns.path.rstrip("/").rpartition("/")[0].endswith("/" + CRI_NETNS_SUBDIR))
    return f"{CRI_NETNS_SUBDIR}/{ns.name}" if in_state_dir else ns.name


class Resolution(NamedTuple):
    """An owner, its state, and the reasons we believe it (a tuple: a scan makes one per cache entry and
    per pod directory, and a tuple is the cheapest immutable record to make)."""

    owner: Owner
    state: OwnerState
    evidence: tuple[str, ...]
    pod: Pod | None = None


@dataclass
class PodIndex:
    by_uid: dict[str, Pod] = field(default_factory=dict)
    by_name: dict[tuple[str, str], list[Pod]] = field(default_factory=lambda: defaultdict(list))
    claims: dict[str, list[Pod]] = field(default_factory=lambda: defaultdict(list))
    """Non-terminal, non-hostNetwork pods by the IPs their status claims."""
    terminal_claims: dict[str, list[Pod]] = field(default_factory=lambda: defaultdict(list))
    unsettled: list[Pod] = field(default_factory=list)
    """Non-terminal pods that are not Running with an IP: a sandbox may be in creation for them, and its
    status may show no IP or an old one (the creation race)."""

    @classmethod
    def build(cls, desired: DesiredState, pods: tuple[Pod, ...] | None = None, *,
              earlier: tuple[PodIndex, tuple[Pod, ...]] | None = None) -> PodIndex:
        """`pods`: the desired state's pods as the index is to hold them (`planning.context.as_before`).
        `earlier`: an index and the pods it was built from, for `_again`."""
        listed = desired.pods if pods is None else pods
        if earlier is not None and (changes := pod_changes(listed, earlier[1])) is not None and (
                8 * (len(changes[0]) + len(changes[1])) <= len(listed)):
            return cls._again(listed, earlier[0], changes)
        index = cls()
        for pod in listed:
            index.by_uid[pod.uid] = pod
            if pod.static_uid:
                _mirror(index.by_uid, pod.static_uid, pod)
            index.by_name[(pod.namespace, pod.name)].append(pod)
            if pod.host_network:
                continue
            ips = [ip for ip in (normalize_ip(raw) for raw in pod.pod_ips) if ip]
            if pod.state is OwnerState.TERMINAL:
                for ip in ips:
                    index.terminal_claims[ip].append(pod)
                continue
            if not ips or pod.state is not OwnerState.LIVE:
                index.unsettled.append(pod)
            for ip in ips:
                index.claims[ip].append(pod)
        _right_sized(index.by_name)
        _right_sized(index.claims)
        _right_sized(index.terminal_claims)
        return index

    @classmethod
    def _again(cls, pods: tuple[Pod, ...], then: PodIndex, changes: tuple[list[Pod], list[Pod]]) -> PodIndex:
        """The index of `pods` made from `then`'s, the pods listed both times the very same objects in the
        same order (`changes`: `pod_changes`, the pods added and removed; `build` asks this when they are
        few, an eighth of the pods at most).

        Each map's value for a key is a function of the pods that bear that key, in their order (by_uid:
        the last pod of that UID, else the first mirror of that config hash not finished, else the first;
        by_name: the pods of that name;
        claims and terminal_claims: the pods claiming that address), so only the keys of the pods added or
        removed can differ: they are dropped and made again over the pods in order, the rest kept. The
        order of the addresses in `claims` is read (the conflicts of pod status are reported in it), so the
        claims are taken whole only when no pod added or removed names an address, and made again otherwise;
        `unsettled` is `then`'s when no pod added or removed is one, else filtered again in order."""
        added, removed = changes
        both = (*added, *removed)
        uids = {u for p in both for u in (p.uid, p.static_uid) if u}
        names = {(p.namespace, p.name) for p in both}
        by_uid = dict(then.by_uid)
        by_name = defaultdict(list, then.by_name)
        for uid in uids:
            by_uid.pop(uid, None)
        for key in names:
            by_name.pop(key, None)
        named = {name for _, name in names}
        for pod in pods:
            if pod.uid in uids:
                by_uid[pod.uid] = pod
            if pod.static_uid and pod.static_uid in uids:
                _mirror(by_uid, pod.static_uid, pod)
            if pod.name in named and (key := (pod.namespace, pod.name)) in names:
                by_name[key].append(pod)
        if any(p.pod_ips for p in both):
            claims, terminal_claims = _claims(pods)
        else:
            claims, terminal_claims = then.claims, then.terminal_claims
        unsettled = then.unsettled
        if any(_unsettled(p) for p in both):
            keep = {id(p) for p in unsettled} - {id(p) for p in removed}
            keep.update(id(p) for p in added if _unsettled(p))
            unsettled = [p for p in pods if id(p) in keep]
        return cls(by_uid, by_name, claims, terminal_claims, unsettled)

    resolved: dict[str, Resolution] = field(default_factory=dict, repr=False, compare=False)
    """`resolve_uid`'s answers so far: the index does not change once built."""

    def resolve_uid(self, uid: str) -> Resolution:
        found = self.resolved.get(uid)
        if found is None:
            found = self.resolved[uid] = self._resolve_uid(uid)
        return found

    def _resolve_uid(self, uid: str) -> Resolution:
        pod = self.by_uid.get(uid)
        if pod is None:
            return Resolution(Owner(uid=uid), OwnerState.ABSENT, (f"no pod with uid {uid} on this node",), None)
        # The owner keeps the UID the node knows (a static pod's config hash), so the engine compares alike.
        owner = Owner(uid=uid, namespace=pod.namespace, name=pod.name)
        what = "static pod mirror" if uid != pod.uid else "pod"
        return Resolution(owner, pod.state, (f"{what} {pod.namespace}/{pod.name} uid {uid} is {pod.phase}",), pod)


def _ips(pod: Pod) -> list[str]:
    return [ip for ip in (normalize_ip(raw) for raw in pod.pod_ips) if ip]


def _unsettled(pod: Pod) -> bool:
    """As `PodIndex.build` tells a pod still starting."""
    if pod.host_network or pod.state is OwnerState.TERMINAL:
        return False
    return not _ips(pod) or pod.state is not OwnerState.LIVE


def _claims(pods: Iterable[Pod]) -> tuple[dict[str, list[Pod]], dict[str, list[Pod]]]:
    """`PodIndex.claims` and `terminal_claims`, as `PodIndex.build` makes them."""
    claims: dict[str, list[Pod]] = defaultdict(list)
    terminal: dict[str, list[Pod]] = defaultdict(list)
    for pod in pods:
        if pod.host_network:
            continue
        into = terminal if pod.state is OwnerState.TERMINAL else claims
        for ip in _ips(pod):
            into[ip].append(pod)
    return claims, terminal


def pod_changes(now: tuple[Pod, ...], then: tuple[Pod, ...]) -> tuple[list[Pod], list[Pod]] | None:
    """The pods listed now but not then, and then but not now (by identity), when the pods listed both
    times are in the same order and no pod object is listed twice; None otherwise."""
    now_ids, then_ids = set(map(id, now)), set(map(id, then))  # both alive: no id stands for two pods
    if len(now_ids) != len(now) or len(then_ids) != len(then):
        return None
    if [i for i in map(id, now) if i in then_ids] != [i for i in map(id, then) if i in now_ids]:
        return None
    return [p for p in now if id(p) not in then_ids], [p for p in then if id(p) not in now_ids]


@dataclass
class CacheIndex:
    by_container: dict[str, list[CNICacheEntry]] = field(default_factory=lambda: defaultdict(list))
    by_netns: dict[str, list[CNICacheEntry]] = field(default_factory=lambda: defaultdict(list))
    by_uid: dict[str, list[CNICacheEntry]] = field(default_factory=lambda: defaultdict(list))
    networks: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @classmethod
    def build(cls, entries: Iterable[CNICacheEntry]) -> CacheIndex:
        index = cls()
        for entry in entries:
            index.by_container[entry.container_id].append(entry)
            key = netns_key(entry.netns)
            if key:
                index.by_netns[key].append(entry)
            if entry.pod_uid:
                index.by_uid[entry.pod_uid].append(entry)
            index.networks[entry.network] += 1
        _right_sized(index.by_container)
        _right_sized(index.by_netns)
        _right_sized(index.by_uid)
        return index


def _right_sized(index: dict[K, list[V]]) -> None:
    """Each list of the index replaced by a copy of its own length: a list grown by append keeps room for
    four, and an index holds one list of one item per pod or per cache entry, kept from one scan to the
    next (`planning.context.Earlier`): 104 bytes each, 80 as copied (at 1,000 pods 5,000 of them)."""
    for key, items in index.items():
        index[key] = items.copy()


def resolve_cache_owner(entry: CNICacheEntry, pods: PodIndex) -> Resolution:
    """The pod a cache entry names: by UID when present, else by name only when status confirms it."""
    cid = entry.container_id
    base = f"cni cache {entry.network}-{cid[:12]}-{entry.ifname}"
    if entry.pod_uid:
        res = pods.resolve_uid(entry.pod_uid)
        owner = Owner(entry.pod_uid, entry.pod_namespace or res.owner.namespace, entry.pod_name or res.owner.name,
                      cid)
        return Resolution(owner, res.state, (base, f"names pod uid {entry.pod_uid}", *res.evidence), res.pod)
    if entry.pod_namespace and entry.pod_name:
        owner = Owner(namespace=entry.pod_namespace, name=entry.pod_name, container_id=cid)
        candidates = pods.by_name.get((entry.pod_namespace, entry.pod_name), [])
        if not candidates:
            return Resolution(owner, OwnerState.ABSENT, (base, f"names pod {owner.label()} without uid",
                                                         "no pod of that name on this node"))
        # Without a UID the pod of that name may be a newer incarnation: only its status can tie it.
        for pod in candidates:
            if pod.state is not OwnerState.TERMINAL and set(entry.ips) & set(pod.pod_ips):
                tied = Owner(uid=pod.uid, namespace=pod.namespace, name=pod.name, container_id=cid)
                return Resolution(tied, pod.state, (base, f"names pod {owner.label()} without uid",
                                                    "that pod's status claims the same IP"), pod)
        return Resolution(owner, OwnerState.UNKNOWN, (base, f"names pod {owner.label()} without uid",
                                                      "a pod of that name exists; cannot tie it"))
    return Resolution(Owner(container_id=cid), OwnerState.UNKNOWN, (base, "names no pod"))


def _mirror(by_uid: dict[str, Pod], static_uid: str, pod: Pod) -> None:
    """`pod` claims `static_uid` (a config hash, from annotations anyone may set on a pod): a pod of that UID
    keeps it, and of several claimants the first that is not finished wins over a finished one (two pods
    claiming one identity are a doubt: the one that still holds decides, as keeping does)."""
    held = by_uid.get(static_uid)
    if held is None or (held.uid != static_uid and held.state is OwnerState.TERMINAL
                        and pod.state is not OwnerState.TERMINAL):
        by_uid[static_uid] = pod
