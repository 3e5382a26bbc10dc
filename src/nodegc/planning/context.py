"""What every correlation domain shares: the indexes, the clock and the time rule, the findings so far.

Pure: no I/O. A domain module (kubelet objects, CNI attachments, ...) reads the inventory through this
context and appends findings; `correlate` runs the domains in order and then the cross-domain rules.
"""

from __future__ import annotations

import functools
import operator
from collections import defaultdict
from dataclasses import dataclass, field, fields
from datetime import datetime

from nodegc import defaults
from nodegc.model.findings import Finding, FindingClass
from nodegc.model.pods import DesiredState, OwnerState, Pod
from nodegc.model.resources import (
    CNICacheEntry,
    Inventory,
    IPReservation,
    Kind,
    NetnsEntry,
    ReadProblem,
    StaticPodManifest,
)
from nodegc.planning.owners import (
    CacheIndex,
    PodIndex,
    Resolution,
    entry_key,
    normalize_ip,
    resolve_cache_owner,
)

HOLDING = frozenset({OwnerState.LIVE, OwnerState.PENDING, OwnerState.UNKNOWN})
"""Owner states in which the resource may be in use."""
GONE = frozenset({OwnerState.TERMINAL, OwnerState.ABSENT})


@dataclass(frozen=True)
class CorrelationPolicy:
    min_age_seconds: float = defaults.MIN_AGE_SECONDS
    add_settle_seconds: float = defaults.ADD_SETTLE_SECONDS
    """A reservation no cache entry explains is kept this long (counted back from the photo): its ADD may
    still be running. Never less than the minimum age."""
    runtime_gave_up: frozenset[str] = frozenset()
    """NotReady sandboxes whose removal through the runtime failed repeatedly (its teardown, CNI DEL, keeps
    failing): the runtime has had its turn, and their network parts are judged as if it did not know them."""
    stop_orphan_shims: bool = False
    """Opt-in: a shim process whose id the runtime does not list is residue (stopped), not only reported."""


@dataclass
class Clock:
    """A correlation's time, and what its verdicts asked of it.

    `now` (the scan's time), `photo` (the desired state's) and `read` (the runtime view's, when there is
    one with a date): a verdict compares a record's age with min(now, photo) less an offset through
    `since`, `after` or `before`, or with min(now, photo, read) less an offset through `viewed_after` (the
    runtime's horizons: a sandbox born after its view was read is not in it), which keep the extreme record
    time of each (offset, comparison, answer); anything else that reads the time itself (an evidence text
    that names an age) goes through `Context.now` and `Context.photo`, which mark the correlation as
    reading the exact time. `answers_alike` says whether another time would have given every answer the
    same: then the correlation's findings are those of that time (`planning.remembered`)."""

    now: float
    photo: float
    exact: bool = False
    """The time itself was read: only the very same time answers alike."""
    asked: dict[tuple[float, str, bool], float] = field(default_factory=dict)
    """(offset, comparison, answer) -> the record time nearest to the threshold that gave that answer."""
    read: float | None = None
    """When the runtime's view was read (None: no view, or one without a date: no bound of its own)."""

    def since(self, t: float, offset: float) -> bool:
        """t >= min(now, photo) - offset."""
        got = t >= min(self.now, self.photo) - offset
        # `_asked`, inlined: every young() of a scan asks this
        key = (offset, ">=", got)
        kept = self.asked.get(key)
        if t == t and (kept is None or (t < kept if got else t > kept)):  # noqa: PLR0124 (NaN: see _asked)
            self.asked[key] = t
        return got

    def after(self, t: float, offset: float) -> bool:
        """t > min(now, photo) - offset."""
        got = t > min(self.now, self.photo) - offset
        self._asked(offset, ">", got, t)
        return got

    def before(self, t: float, offset: float) -> bool:
        """t < min(now, photo) - offset."""
        got = t < min(self.now, self.photo) - offset
        self._asked(offset, "<", got, t)
        return got

    def viewed_after(self, t: float, offset: float) -> bool:
        """t > min(now, photo, read) - offset: younger than the runtime's and the API's photographs allow
        to judge."""
        base = min(self.now, self.photo)
        if self.read is not None and self.read < base:
            base = self.read
        got = t > base - offset
        self._asked(offset, "r>", got, t)
        return got

    def _asked(self, offset: float, op: str, got: bool, t: float) -> None:
        if t != t:  # noqa: PLR0124 (NaN: every such comparison is False, whatever the threshold)
            return
        key = (offset, op, got)
        kept = self.asked.get(key)
        # The answer holds for another threshold when it holds for the record time nearest to it: the
        # smallest time answering "at or after" / "after" yes, or "before" no; the largest otherwise.
        smallest = got is (op != "<")
        if kept is None or (t < kept if smallest else t > kept):
            self.asked[key] = t

    def answers_alike(self, now: float, photo: float, read: float | None = None) -> bool:
        """Whether (now, photo, read) answers every question this clock was asked as it did."""
        if self.exact:
            return now == self.now and photo == self.photo and read == self.read
        viewed = min(now, photo) if read is None else min(now, photo, read)
        for (offset, op, got), t in self.asked.items():
            if op == "r>":
                threshold = viewed - offset
                same = t > threshold if got else t <= threshold
                if not same:
                    return False
                continue
            threshold = min(now, photo) - offset
            if op == ">=":
                same = t >= threshold if got else t < threshold
            elif op == ">":
                same = t > threshold if got else t <= threshold
            else:
                same = t < threshold if got else t >= threshold
            if not same:
                return False
        return True

    def copy(self) -> Clock:
        return Clock(self.now, self.photo, self.exact, dict(self.asked), self.read)

    def blank(self) -> Clock:
        """A clock of the same time, asked nothing yet (a domain's own, merged into this one after)."""
        return Clock(self.now, self.photo, read=self.read)

    def answers_as(self, other: Clock) -> bool:
        """Whether `other`'s time answers every question this clock was asked alike."""
        return self.answers_alike(other.now, other.photo, other.read)

    def merge(self, other: Clock) -> None:
        """Carry on the questions `other` was asked, as if this clock had been asked them (a domain's verdicts
        asked of its own clock, or taken from an earlier correlation that asked them)."""
        self.exact = self.exact or other.exact
        for (offset, op, got), t in other.asked.items():
            self._asked(offset, op, got, t)


@dataclass(frozen=True)
class Earlier:
    """What a correlation leaves for the next scan's (`planning.remembered` keeps the last one made): a
    verdict whose every input is provably the same (the same records, the very pods it looks up, the same
    policy, a time that answers its questions alike) is taken from it instead of being made again."""

    inv: Inventory
    node: str
    policy: CorrelationPolicy
    by_uid: dict[str, Pod]
    by_name: dict[tuple[str, str], list[Pod]]
    resolutions: tuple[Resolution, ...]
    """The owner of every cache entry, in the inventory's order (`resolve_cache_owner`)."""
    mirrored: tuple[tuple[StaticPodManifest, Pod], ...]
    unmirrored: tuple[StaticPodManifest, ...]
    kubelet: tuple[Finding, ...]
    """The kubelet domain's findings, and what they asked of the time."""
    kubelet_clock: Clock
    network: object | None = None
    """The network domain's pass (`planning.network.NetworkPass`)."""
    second: bool = False
    """Made as a second pass (from a first pass of the same scan, with more namespaces' addresses read)."""
    claims: dict[str, list[Pod]] = field(default_factory=dict)
    terminal_claims: dict[str, list[Pod]] = field(default_factory=dict)
    pending_note: str | None = None
    listed: tuple[Pod, ...] = ()
    """The pods its indexes were built from, in order (`Context.listed`)."""
    cache: CacheIndex | None = None
    """Its index of `inv.cni_cache` (a function of those records alone)."""
    explained: frozenset[str] | None = None
    """`Context.explained` (a function of the cache entries and their owners alone)."""
    netns_keys: tuple[str, ...] = ()
    """`Context.netns_keys`."""
    index: PodIndex | None = None
    """Its index of the pods (`listed`): the next one is made from it when few pods came or went."""
    stood: object | None = None
    """What the rule that an attachment's parts stand or fall together was given and made
    (`planning.network.Stood`): its next run works out again only the groups whose parts changed."""


def as_before(pods: tuple[Pod, ...], before: dict[str, Pod]) -> tuple[Pod, ...]:
    """`pods`, each one equal to the pod of its UID in `before` (an earlier scan's index) replaced by that
    very object: a source that makes new objects at every fetch (a list, a snapshot parsed again) lists
    the same pods as new objects, and the reuse of verdicts looks pods up by identity. Equal by value is
    the same to every verdict: they read a pod's fields only (its times through `timestamp()`, which equal
    datetimes answer alike)."""
    out: list[Pod] | None = None
    for i, pod in enumerate(pods):
        then = before.get(pod.uid)
        if then is None or then is pod or then != pod:
            if out is not None:
                out.append(pod)
            continue
        if out is None:
            out = list(pods[:i])
        out.append(then)
    return pods if out is None else tuple(out)


def same_policy(a: CorrelationPolicy, b: CorrelationPolicy) -> bool:
    # repr too: equal floats may print apart (-0.0 and 0.0), and evidence texts print the policy's ages
    return a is b or (a == b and repr(a) == repr(b))


@dataclass
class Context:
    inv: Inventory
    desired: DesiredState
    pods: PodIndex
    cache: CacheIndex
    clock: Clock
    """The scan's time and the desired state's (`now`, `photo`), and what the verdicts asked of them."""
    policy: CorrelationPolicy
    findings: list[Finding] = field(default_factory=list)
    reservations_by_cid: dict[str, list[tuple[IPReservation, Finding]]] = field(
        default_factory=lambda: defaultdict(list))
    netns_class: dict[str, Finding] = field(default_factory=dict)
    network_ips: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """Reserved IPs of each CNI network."""
    chain_ips: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Pod IPs the CNI rules of each container id name (sorted, each once)."""
    backed_networks: dict[str, bool] = field(default_factory=dict)
    """Whether a live pod's status IP is reserved in each network, once asked (network_ips is complete then)."""

    unaccounted: list[Pod] = field(default_factory=list)
    """Running pods (not hostNetwork) that no readable cache entry leads to: their sandbox's attachments
    are on the node but cannot be told apart (an entry truncated, a sandbox being re-created, a runtime
    that writes no cache)."""
    unreadable_cache: tuple[str, ...] = ()
    """File names of cache entries that exist but could not be read."""
    netns_by_key: dict[str, NetnsEntry] = field(default_factory=dict)
    netns_keys: tuple[str, ...] = ()
    """The key of each of `inv.netns` (`entry_key`), in order."""
    netns_unreadable: frozenset[str] = frozenset()
    """Paths of netns files the scan reported a problem for (their addresses, say, could not be read)."""
    cache_findings: dict[int, Finding] = field(default_factory=dict)
    """The finding of each cache entry, by the entry's identity, once the network domain has made them."""
    unexplained_pod_dir: str | None = None
    """Why reservations no cache entry explains may be a left-out pod's: one of its pod directories."""
    resolutions: tuple[Resolution, ...] = ()
    """The owner of every cache entry, in the inventory's order, resolved once a scan (`owner_of`)."""
    entry_at: dict[int, int] = field(default_factory=dict)
    """The place of every cache entry of the inventory, by its identity: an entry's owner is its own, never
    that of another entry read at the same path."""
    shared_paths: frozenset[str] = frozenset()
    """Paths read as several entries that name different owners: which one the file is cannot be told."""
    runtime_unusable: tuple[str | None] | None = None
    """Why the runtime's view carries no evidence (planning.runtime), once worked out: (reason or None,)."""
    runtime_pass: object | None = None
    """The runtime domain's pass of this correlation (planning.runtime), or of the one this context was
    built from: a second pass of the same scan takes from it what does not depend on the namespaces."""
    unmirrored: list[StaticPodManifest] = field(default_factory=list)
    mirrored: list[tuple[StaticPodManifest, Pod]] = field(default_factory=list)
    reused: int = 0
    """How many verdicts (and owners of cache entries) were taken from an earlier scan's (`Earlier`)."""
    listed: tuple[Pod, ...] = ()
    """The desired state's pods as the indexes hold them: each pod equal to one of an earlier scan's is
    that scan's object (`as_before`), so that lookups of the same pods find the very same objects."""
    explained: frozenset[str] = frozenset()
    """The UIDs of the pods whose current sandbox a readable cache entry accounts for."""
    """Manifests with their mirror pod in the desired state: the mirror may lag behind an edited manifest."""
    """Static pod manifests whose mirror pod the desired state does not show (or that cannot be read)."""

    @classmethod
    def build(cls, inv: Inventory, desired: DesiredState, now: datetime, policy: CorrelationPolicy,
              previous: Context | None = None, *, earlier: Earlier | None = None) -> Context:
        """`previous`: the context of a correlation of the same desired state at the same time whose
        inventory may differ in its network namespaces only (detect's second pass, after it read their
        addresses): what depends on nothing else is taken from it instead of being built again.
        `earlier`: what a correlation of an earlier scan leaves (`Earlier`): the owners of cache entries
        that look up the very same pods are taken from it."""
        if previous is not None and previous.same_but_netns(inv, desired, now, policy):
            # What is taken from the previous correlation answered its clock's questions: this one's
            # clock carries them on.
            return cls(inv=inv, desired=desired, pods=previous.pods, cache=previous.cache,
                       clock=previous.clock.copy(), policy=policy, unaccounted=previous.unaccounted,
                       unreadable_cache=_unreadable_cache(inv), netns_keys=(keys := _netns_keys(inv, previous)),
                       netns_by_key=dict(zip(keys, inv.netns, strict=True)), resolutions=previous.resolutions,
                       entry_at=previous.entry_at, shared_paths=previous.shared_paths,
                       unexplained_pod_dir=previous.unexplained_pod_dir,
                       netns_unreadable=_netns_unreadable(inv), unmirrored=previous.unmirrored,
                       mirrored=previous.mirrored, runtime_unusable=previous.runtime_unusable,
                       runtime_pass=previous.runtime_pass, listed=previous.listed, explained=previous.explained)
        listed = as_before(desired.pods, earlier.by_uid) if earlier is not None else desired.pods
        pods = PodIndex.build(desired, listed, earlier=(earlier.index, earlier.listed)
                              if earlier is not None and earlier.index is not None else None)
        same_entries = earlier is not None and inv.cni_cache == earlier.inv.cni_cache
        # The index holds the entries themselves, which are looked up by identity (a second pass redoes the
        # entries of the namespaces it read by id, `_shared_netns` skips the entry itself, and `entry_at` and
        # `cache_findings` are kept by entry): the very same records only, not equal ones.
        cache = (earlier.cache if earlier is not None and earlier.cache is not None
                 and _very_same(inv.cni_cache, earlier.inv.cni_cache) else CacheIndex.build(inv.cni_cache))
        entry_at = {id(entry): i for i, entry in enumerate(inv.cni_cache)}
        resolutions, reused, shared_paths = _resolutions(inv.cni_cache, pods, earlier)
        if earlier is not None and same_entries and earlier.explained is not None and reused == len(inv.cni_cache):
            explained = earlier.explained  # the same entries, each with the very same owner: the same answer
        else:
            explained = _explained(inv.cni_cache, resolutions)
        unaccounted = [p for p in listed if p.state is OwnerState.LIVE and not p.host_network
                       and p.uid not in explained]
        return cls(inv=inv, desired=desired, pods=pods, cache=cache, listed=listed, explained=explained,
                   clock=Clock(now.timestamp(), desired.fetched_at.timestamp(), read=_read_at(inv)), policy=policy,
                   unaccounted=unaccounted,
                   unreadable_cache=_unreadable_cache(inv), netns_keys=(keys := _netns_keys(inv, earlier)),
                   netns_by_key=dict(zip(keys, inv.netns, strict=True)), resolutions=resolutions,
                   entry_at=entry_at, shared_paths=shared_paths,
                   unexplained_pod_dir=next((f"pod directory {d.path} of a pod the desired state lacks is still there"
                                             for d in inv.pod_dirs
                                             if d.uid not in pods.by_uid and d.uid not in cache.by_uid), None),
                   netns_unreadable=_netns_unreadable(inv),
                   unmirrored=[m for m in inv.static_pods if _mirror_of(m, desired, pods) is None],
                   mirrored=[(m, p) for m in inv.static_pods if (p := _mirror_of(m, desired, pods)) is not None],
                   reused=reused)

    def same_but_netns(self, inv: Inventory, desired: DesiredState, now: datetime, policy: CorrelationPolicy) -> bool:
        """Whether a correlation of `inv` sees what this one saw, its network namespaces aside: the same
        desired state, time and policy, the very same records of every other kind and the same read
        problems of every other kind."""
        return (desired is self.desired and now.timestamp() == self.clock.now and policy == self.policy
                and all(getattr(inv, name) is getattr(self.inv, name) for name in _NOT_NETNS)
                and _not_netns(inv.problems) == _not_netns(self.inv.problems))

    def static_owner(self, *, uid: str | None, namespace: str | None = None, name: str | None = None,
                     containers: tuple[str, ...] | None = None, mtime: float | None = None) -> str | None:
        """Why a static pod the kubelet runs from a manifest may own this absent owner's resource, or None.

        The kubelet names a static pod by a config hash nodegc cannot recompute, so a manifest ties by its
        explicit uid, its mirror name, or (for a pod directory) container names that fit the manifest. A
        mirror pod in the desired state may lag behind an edited manifest (it shows the old hash): its name
        on another UID, or a directory that fits the manifest and is newer than the mirror, is kept too."""
        for m, mirror in self.mirrored:
            if uid is None or uid in (mirror.uid, mirror.static_uid):
                continue
            if namespace == mirror.namespace and name == mirror.name:
                return (f"named {namespace}/{name}, the mirror of static pod manifest {m.path}, whose mirror pod still"
                        f" shows config hash {mirror.static_uid}: the kubelet may run the edited manifest as {uid}")
            born = mirror.created_at.timestamp() if mirror.created_at else None
            if containers is not None and set(containers) <= set(m.containers) and (
                    born is None or mtime is None or mtime >= born):
                return (f"its containers fit static pod manifest {m.path} and it is newer than the mirror pod"
                        f" {mirror.namespace}/{mirror.name}: the mirror may lag behind an edited manifest")
        for m in self.unmirrored:
            if m.name is None:
                return f"static pod manifest {m.path} cannot be read; it may declare this pod"
            if uid is not None and uid == m.uid:
                return f"static pod manifest {m.path} declares uid {uid}"
            if namespace == m.namespace and name == f"{m.name}-{self.desired.node}":
                return f"static pod manifest {m.path} declares {namespace}/{name}"
            if containers is not None and set(containers) <= set(m.containers):
                what = "no container started yet" if not containers else "its containers"
                return (f"static pod manifest {m.path} declares {m.namespace}/{m.name}, which the desired state"
                        f" shows no mirror pod for, and {what} fit it")
        return None

    def owner_of(self, entry: CNICacheEntry) -> Resolution:
        """The owner this very entry names (by its identity, not its path: another entry read at the same
        path names its own)."""
        i = self.entry_at.get(id(entry))
        return self.resolutions[i] if i is not None else resolve_cache_owner(entry, self.pods)

    def add(self, finding: Finding) -> Finding:
        self.findings.append(finding)
        return finding

    @property
    def now(self) -> float:
        """The scan's time, read as such (an evidence text that names an age): see `Clock`."""
        self.clock.exact = True
        return self.clock.now

    @property
    def photo(self) -> float:
        """When the desired state was taken: nothing born after it (less the minimum age) is in it. Read as
        such: see `Clock`."""
        self.clock.exact = True
        return self.clock.photo

    def young(self, mtime: float | None) -> bool:
        """Missing age protects: a resource whose age is unknown might be brand new. Only what is older
        than the minimum age, counted back from the photo's time (the desired state cannot know a pod born
        after it was taken), never from a later scan, can be residue."""
        return mtime is None or self.clock.since(mtime, self.policy.min_age_seconds)

    def viewed_young(self, mtime: float | None) -> bool:
        """`young` for a verdict on the runtime's word: what is born after the view was read (less the
        minimum age) is not in it. Missing age protects."""
        return mtime is None or self.clock.viewed_after(mtime, self.policy.min_age_seconds)

    def age_note(self, mtime: float | None) -> str:
        if mtime is None:
            return "age unknown"
        note = f"{self.now - mtime:.0f}s old, minimum age {self.policy.min_age_seconds:.0f}s"
        if self.photo < self.now and mtime >= self.photo - self.policy.min_age_seconds:
            note += f"; the desired state was taken {self.now - self.photo:.0f}s ago and cannot show its owner"
        return note

    def pending_note(self) -> str | None:
        return self._pending_note

    @functools.cached_property
    def _pending_note(self) -> str | None:
        if not self.pods.unsettled:
            return None
        names = ", ".join(f"{p.namespace}/{p.name}" for p in self.pods.unsettled[:3])
        return f"pods still starting on this node (not Running with an IP) may own it: {names}"


_NOT_NETNS = tuple(f.name for f in fields(Inventory) if f.name not in ("netns", "problems"))
"""What a correlation reads of an inventory besides its namespaces and its read problems (compared apart)."""


def _resolutions(entries: tuple[CNICacheEntry, ...], pods: PodIndex,
                 earlier: Earlier | None) -> tuple[tuple[Resolution, ...], int, frozenset[str]]:
    """`resolve_cache_owner` of every entry, in order, how many were taken from `earlier`, and the paths
    read as entries naming different owners (`_shared_paths`). An entry of an earlier scan's very records
    whose lookup finds the very same pods (by its UID, or by its name without one) takes that scan's answer:
    `resolve_cache_owner` reads nothing else."""
    paths = {entry.path for entry in entries}
    if len(paths) != len(entries):
        # A path read as more than one entry (the scanner lists each file once): resolved afresh, whatever
        # an earlier scan answered, and what stays unclear kept.
        return _shared_paths(entries, tuple(resolve_cache_owner(entry, pods) for entry in entries))
    if earlier is None or entries != earlier.inv.cni_cache:
        return tuple(resolve_cache_owner(entry, pods) for entry in entries), 0, frozenset()
    out: list[Resolution] = []
    reused = 0
    by_uid, by_name, before = pods.by_uid, pods.by_name, earlier.resolutions
    then_uid, then_name = earlier.by_uid, earlier.by_name
    for i, entry in enumerate(entries):
        uid = entry.pod_uid
        if uid:
            same = by_uid.get(uid) is then_uid.get(uid)
        elif entry.pod_namespace and entry.pod_name:
            key = (entry.pod_namespace, entry.pod_name)
            now_named, then_named = by_name.get(key, ()), then_name.get(key, ())
            same = len(now_named) == len(then_named) and all(map(operator.is_, now_named, then_named))
        else:
            same = True
        if same:
            out.append(before[i])
            reused += 1
        else:
            out.append(resolve_cache_owner(entry, pods))
    return tuple(out), reused, frozenset()


def _shared_paths(entries: tuple[CNICacheEntry, ...],
                  resolved: tuple[Resolution, ...]) -> tuple[tuple[Resolution, ...], int, frozenset[str]]:
    """One file read as entries that name different owners (pods or sandboxes): nothing tells which one it
    is, so none of them is evidence that its owner is gone. An entry whose owner may hold it keeps that
    owner's word (what it names stays in use); one naming a gone owner says `unknown` instead."""
    owners: dict[str, set[tuple[str | None, ...]]] = defaultdict(set)
    count: dict[str, int] = defaultdict(int)
    for entry, res in zip(entries, resolved, strict=True):
        o = res.owner
        owners[entry.path].add((o.uid, o.namespace, o.name, o.container_id, res.state))
        count[entry.path] += 1
    shared = frozenset(path for path, named in owners.items() if len(named) > 1)
    out: list[Resolution] = []
    for entry, res in zip(entries, resolved, strict=True):
        if entry.path in shared:
            note = (f"cache file {entry.path} is read as {count[entry.path]} entries naming different owners:"
                    " which one it is cannot be told")
            state = res.state if res.state in HOLDING else OwnerState.UNKNOWN
            out.append(Resolution(res.owner, state, (*res.evidence, note), res.pod))
        else:
            out.append(res)
    return tuple(out), 0, shared


def _not_netns(problems: tuple[ReadProblem, ...]) -> tuple[ReadProblem, ...]:
    return tuple(p for p in problems if p.kind is not Kind.NETNS)


def _read_at(inv: Inventory) -> float | None:
    """When the runtime's view was read: only the clock holds it (see `Clock.read`)."""
    view = inv.runtime
    return view.read_at.timestamp() if view is not None and view.read_at is not None else None


def _very_same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return a is b or (len(a) == len(b) and all(map(operator.is_, a, b)))


def _explained(entries: tuple[CNICacheEntry, ...], resolutions: tuple[Resolution, ...]) -> frozenset[str]:
    explained: set[str] = set()
    for entry, res in zip(entries, resolutions, strict=True):
        # An entry accounts for the pod's current sandbox only when it holds the address the pod's status
        # shows: an old sandbox's entry says nothing about a new one still being set up.
        if res.pod is not None and (not res.pod.pod_ips or _ips(entry.ips) & _ips(res.pod.pod_ips)):
            explained.add(res.pod.uid)
    return frozenset(explained)


def _unreadable_cache(inv: Inventory) -> tuple[str, ...]:
    return tuple(pr.path.rstrip("/").rsplit("/", 1)[-1] for pr in inv.problems if pr.kind is Kind.CNI_CACHE)


def _netns_keys(inv: Inventory, before: Context | Earlier | None) -> tuple[str, ...]:
    """`entry_key` of each netns record, in order; `before`'s for the very records at the same places."""
    if before is None or len(before.netns_keys) != len(inv.netns) or len(before.inv.netns) != len(inv.netns):
        return tuple(entry_key(ns) for ns in inv.netns)
    return tuple(key if ns is then else entry_key(ns)
                 for ns, then, key in zip(inv.netns, before.inv.netns, before.netns_keys, strict=True))


def _netns_unreadable(inv: Inventory) -> frozenset[str]:
    return frozenset(pr.path for pr in inv.problems if pr.kind is Kind.NETNS)


def _ips(raw: tuple[str, ...]) -> set[str]:
    return {ip for x in raw if (ip := normalize_ip(x))}


def _mirror_of(m: StaticPodManifest, desired: DesiredState, pods: PodIndex) -> Pod | None:
    if m.name is None:
        return None
    if m.uid is not None and m.uid in pods.by_uid:
        return pods.by_uid[m.uid]
    mirrors = [p for p in pods.by_name.get((m.namespace or "default", f"{m.name}-{desired.node}"), []) if p.static_uid]
    return mirrors[0] if mirrors else None


def reclass(finding: Finding, cls: FindingClass, note: str) -> Finding:
    return Finding(cls, finding.kind, finding.id, finding.owner, finding.owner_state,
                   (*finding.evidence, note), netns=finding.netns, ip=finding.ip, sandbox=finding.sandbox)


def short(container_id: str | None) -> str:
    return container_id[:12] if container_id else "?"
