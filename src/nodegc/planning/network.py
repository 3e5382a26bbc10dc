"""Correlation of CNI attachments: IP reservations, libcni cache entries, netns, veths, chains and rules.

An attachment is tied to its pod through the libcni cache entry of its container id; without one, through
the pod IPs it carries, and only as far as the evidence goes (everything else stays unknown or protected).
"""

from __future__ import annotations

import operator
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import compress
from typing import TypeVar

from nodegc.model.findings import Finding, FindingClass, Owner
from nodegc.model.memo import remembered
from nodegc.model.pods import OwnerState, Pod
from nodegc.model.resources import (
    CNICacheEntry,
    HostportRule,
    Inventory,
    IPReservation,
    Kind,
    NetnsEntry,
    VethLink,
)
from nodegc.planning.context import GONE, HOLDING, Clock, Context, Earlier, reclass, same_policy, short
from nodegc.planning.owners import Resolution, netns_key, normalize_ip, pod_changes
from nodegc.planning.phases import hostport_rule_id

_T = TypeVar("_T")


@dataclass(frozen=True)
class NetworkPass:
    """What the network domain decided without looking at any namespace: the reservations (and the
    conflicts of pod status), and the chains and hostport rules, which follow the reservations and the
    cache entries' owners. A second pass over the same scan with more namespace addresses read takes them.

    The verdicts on cache entries, namespaces and veths depend on the namespaces, but each only on the
    netns records of its own keys (and a veth on its peer namespace's verdict): a second pass takes the
    verdicts of this one but for the keys whose record changed (`_changed_keys`)."""

    reservations: tuple[Finding, ...]
    reservations_by_cid: dict[str, list[tuple[IPReservation, Finding]]]
    rules: tuple[Finding, ...]
    network_ips: dict[str, set[str]] = field(default_factory=dict)
    chain_ips: dict[str, tuple[str, ...]] = field(default_factory=dict)
    netns: tuple[NetnsEntry, ...] = ()
    """The netns records this pass judged, and what it looked up of them."""
    netns_by_key: dict[str, NetnsEntry] = field(default_factory=dict)
    netns_unreadable: frozenset[str] = frozenset()
    netns_class: dict[str, Finding] = field(default_factory=dict)
    cache_findings: tuple[Finding, ...] = ()
    """The verdicts on `inv.cni_cache`, `inv.netns` and `inv.veths`, one per record, in order."""
    netns_findings: tuple[Finding, ...] = ()
    veth_findings: tuple[Finding, ...] = ()
    clock: Clock | None = None
    """What the verdicts a later scan may take again (`_Again`) asked of the time (None: not known)."""
    once: frozenset[int] = frozenset()
    """The verdicts (by id) a later scan may not take again: they read the time itself, or facts of the
    whole node (a reservation or rule no cache entry explains)."""
    second: bool = False
    """A second pass (made from a first pass of the same scan, `previous`): a later scan's second pass
    takes from it what its own first pass cannot give (the verdicts on the namespaces whose addresses
    were read, and on what names them)."""
    reads: _Reads | None = None
    """Which records each of its verdicts reads (`_Reads`), once a later pass worked it out: a later scan
    whose network records are equal to these takes it on."""


def correlate_network(ctx: Context, previous: NetworkPass | None = None,
                      earlier: Earlier | None = None) -> NetworkPass:
    """`previous`: the pass of a correlation whose inventory differs from this one's in its namespaces
    only (`Context.same_but_netns`): its verdicts on what no changed namespace touches are taken. `earlier`:
    what a correlation of an earlier scan left (for a second pass, an earlier second pass's): its verdicts
    whose every input is the same are taken again (`_Again`), where `previous` has none to give."""
    main = ctx.clock
    # The verdicts a later scan may take again ask a clock of their own; the others, the correlation's.
    ctx.clock = part = main.blank()
    again = _Again.of(ctx, earlier, main, part)
    try:
        made = _network(ctx, previous, again, _Once(main, part))
    finally:
        ctx.clock = main
    main.merge(part)
    if again is not None:
        ctx.reused += again.taken
    return made


class _Once:
    """Keeps apart the verdicts a later scan may not take again (`NetworkPass.once`)."""

    def __init__(self, main: Clock, part: Clock) -> None:
        self.main, self.part = main, part
        self.ids: set[int] = set()

    def judged(self, ctx: Context, before: int) -> None:
        """The verdict just added at `before`: one that read the time itself is made once (and the
        correlation reads the exact time)."""
        if self.part.exact:
            self.part.exact = False
            self.main.exact = True
            self.ids.add(id(ctx.findings[before]))

    def whole_node(self, ctx: Context, before: int) -> None:
        self.ids.add(id(ctx.findings[before]))


def _network(ctx: Context, previous: NetworkPass | None, again: _Again | None, once: _Once) -> NetworkPass:
    if previous is None and again is not None and again.aligned():
        return _network_again(ctx, again, once)
    if again is not None:
        # The same reservations, chains and hostport rules as the earlier pass (`_Again.of`): what they
        # name is the same (read only, from here on).
        ctx.network_ips.update(again.net.network_ips)
        ctx.chain_ips.update(again.net.chain_ips)
    elif previous is None:
        for r in ctx.inv.ip_reservations:
            ctx.network_ips[r.network].add(r.ip)
        ctx.chain_ips.update(_chain_ips(ctx.inv))
    else:
        ctx.network_ips.update(previous.network_ips)
        ctx.chain_ips.update(previous.chain_ips)
    start = len(ctx.findings)
    if previous is None:
        reserved_ips = {r.ip for r in ctx.inv.ip_reservations}
        for i, reservation in enumerate(ctx.inv.ip_reservations):
            _reservation_once(ctx, i, reservation, reserved_ips, again=again, once=once)
        before = len(ctx.findings)
        _status_conflicts(ctx, reserved_ips)
        for i in range(before, len(ctx.findings)):
            once.whole_node(ctx, i)
    else:
        ctx.findings.extend(previous.reservations)
        ctx.reservations_by_cid.update(previous.reservations_by_cid)
    reservations = tuple(ctx.findings[start:])
    changed = _changed_keys(previous, ctx) if previous is not None else None
    cache_findings = _cache_entries(ctx, previous, changed, again, once)
    netns_findings = _namespaces(ctx, previous, changed, again, once)
    veth_findings = _veths(ctx, previous, again)
    start = len(ctx.findings)
    if previous is None:
        index = 0
        for chain in ctx.inv.chains:
            _rule_once(ctx, index, Kind.IPTABLES_CHAIN, chain.name, container_id=chain.container_id,
                       network=chain.network, again=again, once=once)
            index += 1
        for rule in ctx.inv.hostport_rules:
            _rule_once(ctx, index, Kind.HOSTPORT_RULE, _rule_id(rule), container_id=rule.container_id,
                       network=rule.network, again=again, once=once)
            index += 1
    else:
        ctx.findings.extend(previous.rules)
    clock: Clock | None = once.part
    ids = frozenset(once.ids)
    if previous is not None:
        # What it took from `previous` asked that pass's clock, and is made once where that one's was.
        clock = previous.clock.copy() if previous.clock is not None else None
        if clock is not None:
            clock.merge(once.part)
        ids |= previous.once
    # Each container's list copied to its own length (one reservation, where append left room for four):
    # the pass is kept from one scan to the next.
    by_cid = {cid: found.copy() for cid, found in ctx.reservations_by_cid.items()}
    return NetworkPass(reservations, by_cid, tuple(ctx.findings[start:]),
                       network_ips=dict(ctx.network_ips), chain_ips=dict(ctx.chain_ips), netns=ctx.inv.netns,
                       netns_by_key=ctx.netns_by_key, netns_unreadable=ctx.netns_unreadable,
                       netns_class=dict(ctx.netns_class), cache_findings=cache_findings,
                       netns_findings=netns_findings, veth_findings=veth_findings,
                       clock=clock, once=ids, second=previous is not None)


def _network_again(ctx: Context, again: _Again, once: _Once) -> NetworkPass:
    """A first pass taking from an earlier scan's (`_Again`) in bulk: every verdict is the earlier one but at
    the places `_Again.redo` names, where each is asked as the record-by-record pass asks it (taken again
    if its `_Again` check allows, else judged anew). A place it does not name is one whose check cannot
    refuse (`_Reads`), so the findings, their order and what the clock was asked are those of asking every
    record. The places of the namespaces follow from the cache entries' verdicts that changed, and those of
    the veths from the namespaces' verdicts that changed."""
    net, inv, findings = again.net, ctx.inv, ctx.findings
    # The same reservations, chains and hostport rules as the earlier pass (`_Again.of`): what they name is
    # the same (read only, from here on).
    ctx.network_ips.update(net.network_ips)
    ctx.chain_ips.update(net.chain_ips)
    redo = again.redo()
    reads = again.reads
    reservations = _reservations_again(ctx, again, once, redo.reservations)
    entries = inv.cni_cache

    def entry(i: int) -> None:
        if (taken := again.cache_entry(i, entries[i])) is not None:
            findings.append(taken)
        else:
            at = len(findings)
            _cache_entry(ctx, entries[i])
            once.judged(ctx, at)

    made, changed = _again_at(again, net.cache_findings, redo.entries, entry)
    ctx.cache_findings = dict(zip(map(id, entries), made, strict=True))
    findings.extend(made)
    cache_findings = tuple(made)

    spaces, keys = inv.netns, ctx.netns_keys

    def space(i: int) -> None:
        if (taken := again.netns(i, spaces[i])) is not None:
            findings.append(taken)
        else:
            at = len(findings)
            _netns(ctx, spaces[i], keys[i])
            once.judged(ctx, at)

    made, changed = _again_at(again, net.netns_findings, redo.netns | reads.netns_naming(changed), space)
    ctx.netns_class.update(zip(reads.netns_paths, made, strict=True))
    findings.extend(made)
    netns_findings = tuple(made)

    links = inv.veths

    def veth(i: int) -> None:
        if (taken := again.veth(i, links[i])) is not None:
            findings.append(taken)
        else:
            _veth(ctx, links[i])

    made, _ = _again_at(again, net.veth_findings, reads.veths_peering(changed), veth)
    findings.extend(made)
    veth_findings = tuple(made)

    chains, hostport = inv.chains, inv.hostport_rules

    def rule(i: int) -> None:
        if i < len(chains):
            c = chains[i]
            _rule_once(ctx, i, Kind.IPTABLES_CHAIN, c.name, container_id=c.container_id, network=c.network,
                       again=again, once=once)
        else:
            h = hostport[i - len(chains)]
            _rule_once(ctx, i, Kind.HOSTPORT_RULE, _rule_id(h), container_id=h.container_id, network=h.network,
                       again=again, once=once)

    made, _ = _again_at(again, net.rules, redo.rules, rule)
    findings.extend(made)
    return NetworkPass(reservations, dict(ctx.reservations_by_cid), tuple(made), network_ips=dict(ctx.network_ips),
                       chain_ips=dict(ctx.chain_ips), netns=spaces, netns_by_key=ctx.netns_by_key,
                       netns_unreadable=ctx.netns_unreadable, netns_class=dict(ctx.netns_class),
                       cache_findings=cache_findings, netns_findings=netns_findings, veth_findings=veth_findings,
                       clock=once.part, once=frozenset(once.ids), reads=reads)


def _reservations_again(ctx: Context, again: _Again, once: _Once, places: set[int]) -> tuple[Finding, ...]:
    """`_network_again`'s reservations, and then the conflicts of pod status (made anew: the whole node's)."""
    findings, held, reserved_ips = ctx.findings, ctx.inv.ip_reservations, again.reads.reserved_ips
    made, _ = _again_at(again, again.net.reservations[:len(held)], places, lambda i: _reservation_once(
        ctx, i, held[i], reserved_ips, again=again, once=once))
    by_cid = ctx.reservations_by_cid
    by_cid.clear()  # in the reservations' order, whichever were asked again
    for r, f in zip(held, made, strict=True):
        if r.container_id:
            by_cid[r.container_id].append((r, f))
    start = len(findings)
    findings.extend(made)
    _status_conflicts(ctx, reserved_ips)
    for i in range(start + len(made), len(findings)):
        once.whole_node(ctx, i)
    return tuple(findings[start:])


def _again_at(again: _Again, earlier: Sequence[Finding], places: Iterable[int],
              one: Callable[[int], object]) -> tuple[list[Finding], set[int]]:
    """`earlier`'s verdicts, but at each of `places` the one `one(place)` appends to the findings (and takes
    back off them); and the places whose verdict is not the earlier one. The others count as taken again."""
    out = list(earlier)
    findings = again.ctx.findings
    changed: set[int] = set()
    asked = 0
    for i in sorted(places):
        one(i)
        out[i] = found = findings.pop()
        asked += 1
        if found is not earlier[i]:
            changed.add(i)
    again.taken += len(out) - asked
    return out, changed


def _cache_entries(ctx: Context, previous: NetworkPass | None, changed: set[str] | None,
                   again: _Again | None, once: _Once) -> tuple[Finding, ...]:
    """A verdict per cache entry; the previous pass's where no key the entry's netns path reads changed."""
    start = len(ctx.findings)
    add = ctx.findings.append  # a few thousand a scan: the loops below are the domain's cost
    # By path: whatever objects the cache index holds, an entry of a namespace that changed is judged again,
    # and so is every other entry read at its path (two entries may share one): never fewer than by identity.
    redo = None if previous is None or changed is None else {
        e.path for key in changed for e in ctx.cache.by_netns.get(key, ())}
    for i, entry in enumerate(ctx.inv.cni_cache):
        if redo is not None and previous is not None and entry.path not in redo:
            add(previous.cache_findings[i])  # a second pass: the very same entries as `previous` judged
        elif again is not None and (taken := again.cache_entry(i, entry)) is not None:
            add(taken)
        else:
            at = len(ctx.findings)
            _cache_entry(ctx, entry)
            once.judged(ctx, at)
    made = tuple(ctx.findings[start:])
    # one verdict per entry, in order: each entry's own (two entries may be read at one path)
    ctx.cache_findings = {id(e): f for e, f in zip(ctx.inv.cni_cache, made, strict=True)}
    return made


def _namespaces(ctx: Context, previous: NetworkPass | None, changed: set[str] | None,
                again: _Again | None, once: _Once) -> tuple[Finding, ...]:
    start = len(ctx.findings)
    aligned = previous is not None and changed is not None and len(previous.netns) == len(ctx.inv.netns)
    keys, add, classes = ctx.netns_keys, ctx.findings.append, ctx.netns_class
    for i, ns in enumerate(ctx.inv.netns):
        if aligned and previous is not None and changed is not None and not _netns_changed(
                ns, previous.netns[i], changed, keys[i]):
            add(finding := previous.netns_findings[i])
        elif again is not None and (taken := again.netns(i, ns)) is not None:
            add(finding := taken)
        else:
            at = len(ctx.findings)
            finding = _netns(ctx, ns, keys[i])
            once.judged(ctx, at)
        classes[ns.path] = finding
    return tuple(ctx.findings[start:])


def _veths(ctx: Context, previous: NetworkPass | None, again: _Again | None) -> tuple[Finding, ...]:
    """A veth follows its peer's namespace: the previous verdict stands while that namespace's does (and
    an earlier scan's, for the same record, while that scan's verdict on the namespace is the one here)."""
    start = len(ctx.findings)
    add, classes = ctx.findings.append, ctx.netns_class
    for i, link in enumerate(ctx.inv.veths):  # a second pass: the very same veths as `previous` judged
        if previous is not None and classes.get(
                peer := link.peer_netns_path or "") is previous.netns_class.get(peer):
            add(previous.veth_findings[i])
        elif again is not None and (taken := again.veth(i, link)) is not None:
            add(taken)
        else:
            _veth(ctx, link)
    return tuple(ctx.findings[start:])


def _reservation_once(ctx: Context, i: int, r: IPReservation, reserved_ips: AbstractSet[str], *, again: _Again | None,
                      once: _Once) -> None:
    if again is not None and (taken := again.reservation(i, r)) is not None:
        ctx.findings.append(taken)
        if r.container_id:
            ctx.reservations_by_cid[r.container_id].append((r, taken))
        return
    before = len(ctx.findings)
    _reservation(ctx, r, reserved_ips)
    once.judged(ctx, before)
    if r.container_id and not ctx.cache.by_container.get(r.container_id):
        once.whole_node(ctx, before)  # no cache entry explains it: the whole node's facts decide


def _rule_once(ctx: Context, i: int, kind: Kind, ident: str, *, container_id: str | None,
               network: str | None, again: _Again | None, once: _Once) -> None:
    if again is not None and (taken := again.rule(i, container_id, network)) is not None:
        ctx.findings.append(taken)
        return
    before = len(ctx.findings)
    _by_container(ctx, kind, ident, container_id, network)
    once.judged(ctx, before)
    if container_id and not _cache_for(ctx, container_id, network):
        once.whole_node(ctx, before)  # follows reservations and the whole node's facts


def _same_pods(now: Sequence[Pod], then: Sequence[Pod]) -> bool:
    return len(now) == len(then) and all(map(operator.is_, now, then))


class _Again:
    """The verdicts of the first pass of an earlier scan (`Earlier`) that this one takes again: each for the
    record at the same place of the same records, when everything it reads is the same. What a verdict
    reads of the pods is a few lookups (the owners the cache entries resolved to, which are the very same
    objects when they looked up the very same pods; the pods whose status claims the addresses it names);
    a verdict that reads a fact of the whole node (a reservation or rule no cache entry explains, the
    conflicts of pod status) or the time itself is never taken again (`NetworkPass.once`). The time: every
    verdict that may be taken again asked a clock of its own, which must answer alike now (and carries on)."""

    def __init__(self, ctx: Context, earlier: Earlier, network: NetworkPass) -> None:
        self.ctx, self.then, self.net = ctx, earlier, network
        self.once = network.once
        self.taken = 0
        """How many verdicts were taken."""
        self.pending_same = ctx.pending_note() == earlier.pending_note
        self.static_same = (ctx.desired.node == earlier.node and tuple(ctx.mirrored) == earlier.mirrored
                            and tuple(ctx.unmirrored) == earlier.unmirrored)
        # What a verdict's lookups may find otherwise than they did, worked out once: the cache entries (by
        # place: the same records, `of`; never by path, which two entries may share) whose owner is not the
        # very same, the addresses whose claimants are not the very same.
        self.moved = {i for i, (now, then) in enumerate(zip(ctx.resolutions, earlier.resolutions, strict=True))
                      if now is not then}
        touched = _touched_ips(ctx.listed, earlier.listed)
        self.claimed = _moved_claims(ctx.pods.claims, earlier.claims, touched)
        self.terminal = _moved_claims(ctx.pods.terminal_claims, earlier.terminal_claims, touched)
        self._reads = network.reads

    def aligned(self) -> bool:
        """Whether the earlier pass holds one verdict per record, in the records' order (it does: the same
        records, `of`, each judged once and in order; checked, as `_network_again` relies on it)."""
        inv, net = self.ctx.inv, self.net
        return (len(net.reservations) >= len(inv.ip_reservations) and len(net.cache_findings) == len(inv.cni_cache)
                and len(net.netns_findings) == len(inv.netns) and len(net.veth_findings) == len(inv.veths)
                and len(net.rules) == len(inv.chains) + len(inv.hostport_rules))

    @property
    def reads(self) -> _Reads:
        """Which records each verdict reads: the earlier pass's, or worked out from this one's records (equal
        to the earlier's, `of`)."""
        if self._reads is None:
            self._reads = _Reads.build(self.ctx)
        return self._reads

    def redo(self) -> _Redo:
        """The places of the reservations, cache entries, namespaces and rules whose check (`reservation`,
        `cache_entry`, `netns`, `rule`) may refuse: every record whose verdict the earlier pass made once
        (`NetworkPass.once`), and every record a verdict of which reads a cache entry whose owner moved
        (`moved`), an address whose claimants moved (`claimed`, and `terminal` for the namespaces no cache
        entry names), the pods still starting (`pending_same`) or the static pods (`static_same`). The
        namespaces whose cache entries' verdicts changed, and the veths whose namespace's verdict changed,
        are added as those verdicts are made (`_Reads.netns_naming`, `_Reads.veths_peering`)."""
        reads, entries = self.reads, self.ctx.inv.cni_cache
        net = self.net
        reservations: set[int] = set(reads.res_unbacked)
        rules: set[int] = set(reads.rules_unbacked)
        keyed: set[int] = set()
        """Cache entries whose netns key the verdicts of that key (entries and namespaces) must read again."""
        for m in self.moved:
            cid = entries[m].container_id
            reservations.update(reads.res_by_cid.get(cid, ()))
            rules.update(reads.rules_by_cid.get(cid, ()))
            keyed.add(m)
        keys: set[str] = set()
        for ip in self.claimed:
            reservations.update(reads.res_by_ip.get(ip, ()))
            for j in reads.entries_by_ip.get(ip, ()):
                keyed.add(j)
                rules.update(reads.rules_by_cid.get(entries[j].container_id, ()))
            for cid in reads.cids_by_chain_ip.get(ip, ()):
                rules.update(reads.rules_by_cid.get(cid, ()))
            keys.update(reads.keys_by_address.get(ip, ()))
        for ip in self.terminal:
            keys.update(reads.keys_by_address.get(ip, ()))
        keys.update(k for j in keyed if (k := reads.entry_keys[j]) is not None)
        cache: set[int] = set(keyed)
        netns: set[int] = set()
        for key in keys:
            cache.update(reads.entries_of_key.get(key, ()))
            netns.update(reads.netns_of_key.get(key, ()))
        if not self.static_same:
            cache = set(range(len(entries)))
        if not self.pending_same:
            netns.update(reads.bare_netns)
        if self.once:
            reservations.update(_made_once(net.reservations[:len(self.ctx.inv.ip_reservations)], self.once))
            cache.update(_made_once(net.cache_findings, self.once))
            netns.update(_made_once(net.netns_findings, self.once))
            rules.update(_made_once(net.rules, self.once))
        return _Redo(reservations, cache, netns, rules)

    @classmethod
    def of(cls, ctx: Context, earlier: Earlier | None, main: Clock, part: Clock) -> _Again | None:
        """The verdicts to take again from `earlier`, if its records of every network kind and its policy
        are the same and the time answers its verdicts' questions alike."""
        network = earlier.network if earlier is not None else None
        if earlier is None or not isinstance(network, NetworkPass) or network.clock is None:
            return None
        inv, then = ctx.inv, earlier.inv
        if not (same_policy(ctx.policy, earlier.policy) and network.clock.answers_as(main)
                and ctx.netns_unreadable == network.netns_unreadable
                and all(getattr(inv, name) == getattr(then, name) for name in _NETWORK_READS)):
            return None
        part.merge(network.clock)
        return cls(ctx, earlier, network)

    def _resolved_alike(self, entries: Iterable[CNICacheEntry]) -> bool:
        """Every entry's owner is the very same as then (an entry's place is that of the earlier scan's entry
        it equals: the same records)."""
        moved, at = self.moved, self.ctx.entry_at
        return not moved or all(at[id(e)] not in moved for e in entries)

    def _claims_alike(self, ips: Iterable[str]) -> bool:
        """The pods whose status claims each address are the very same, in the same order, as then."""
        return not self.claimed or self.claimed.isdisjoint(ips)

    def _terminal_alike(self, ips: Iterable[str]) -> bool:
        return not self.terminal or self.terminal.isdisjoint(ips)

    def _held_alike(self, key: str | None) -> bool:
        """What `_netns_held` reads of a key: its record (the same records: the same one), the entries
        naming it (the same), the pods claiming its addresses."""
        ns = self.ctx.netns_by_key.get(key) if key else None
        return ns is None or self._claims_alike(ns.addresses)

    def _taken(self, found: Finding) -> Finding | None:
        if id(found) in self.once:
            return None
        self.taken += 1
        return found

    def reservation(self, i: int, r: IPReservation) -> Finding | None:
        found = self.net.reservations[i] if i < len(self.net.reservations) else None
        if found is None or found.kind is not Kind.IP_RESERVATION or found.id != f"{r.network}/{r.ip}":
            return None
        if r.container_id is None:
            return self._taken(found)
        entries = _cache_for(self.ctx, r.container_id, r.network)
        if not entries or not self._resolved_alike(entries) or not self._claims_alike((r.ip,)):
            return None
        return self._taken(found)

    def cache_entry(self, i: int, entry: CNICacheEntry) -> Finding | None:
        found = self.net.cache_findings[i]
        res = self.ctx.owner_of(entry)
        if res is not self.then.resolutions[i]:
            return None
        if res.state is OwnerState.ABSENT and not self.static_same:
            return None
        if res.state in GONE:
            key = netns_key(entry.netns)
            if not self._claims_alike(entry.ips):
                return None
            if key is not None and not (self._resolved_alike(self.ctx.cache.by_netns.get(key, ()))
                                        and self._held_alike(key)):
                return None
        return self._taken(found)

    def netns(self, i: int, ns: NetnsEntry) -> Finding | None:
        found = self.net.netns_findings[i]
        key = self.ctx.netns_keys[i]
        entries = self.ctx.cache.by_netns.get(key, [])
        if entries:
            if not self._resolved_alike(entries):
                return None
            cache_now, cache_then, at = self.ctx.cache_findings, self.net.cache_findings, self.ctx.entry_at
            if not all(cache_now.get(id(e)) is cache_then[at[id(e)]] for e in entries):
                return None
            if not (all(self._claims_alike(e.ips) for e in entries) and self._held_alike(key)) and not any(
                    self.ctx.owner_of(e).state in HOLDING for e in entries):
                return None
        elif ns.mounted and not (self.pending_same and self._claims_alike(ns.addresses)
                                 and self._terminal_alike(ns.addresses)):
            return None
        return self._taken(found)

    def veth(self, i: int, link: VethLink) -> Finding | None:
        peer = link.peer_netns_path or ""
        if self.ctx.netns_class.get(peer) is not self.net.netns_class.get(peer):
            return None
        self.taken += 1
        return self.net.veth_findings[i]

    def rule(self, i: int, container_id: str | None, network: str | None) -> Finding | None:
        found = self.net.rules[i]
        if not container_id:
            return self._taken(found)
        entries = _cache_for(self.ctx, container_id, network)
        if not entries or not self._resolved_alike(entries):
            return None
        res = _resolve_container(self.ctx, container_id, network)
        if res is not None and res.state in GONE and not (
                all(self._claims_alike(e.ips) for e in entries)
                and self._claims_alike(self.ctx.chain_ips.get(container_id, ()))):
            return None
        return self._taken(found)


def _made_once(found: Sequence[Finding], once: frozenset[int]) -> list[int]:
    """The places of the verdicts among `found` that the earlier pass made once (`NetworkPass.once`)."""
    return list(compress(range(len(found)), map(once.__contains__, map(id, found))))


@dataclass(frozen=True)
class _Redo:
    """The places whose verdict `_network_again` asks again (`_Again.redo`)."""

    reservations: set[int]
    entries: set[int]
    netns: set[int]
    rules: set[int]
    """Of the chains, then of the hostport rules (one run of places, as the pass reads them)."""


@dataclass(frozen=True)
class _Reads:
    """Which records the `_Again` check of each network verdict reads, by place: a function of the records'
    values and places alone, so it serves every scan whose network records equal the ones it was built from
    (`_Again.of` takes verdicts only then), and a pass that takes verdicts from an earlier one hands it on.

    What each check reads, and so where a change must send `_Again.redo`:
    - a reservation (with a container id): the owners of its container's cache entries, the claimants of its
      address; one whose container no cache entry has is never taken (`res_unbacked`);
    - a cache entry: its own owner; if that owner is gone, the claimants of its addresses, the owners of
      the entries naming its netns key, and the claimants of the addresses inside that key's namespace;
      if absent, the static pods;
    - a namespace with cache entries naming its key: those entries' owners and verdicts, the claimants of
      their addresses and of the addresses inside the key's namespace; one no entry names, if mounted: the
      pods still starting and the (terminal) claimants of its own addresses;
    - a veth: the verdict on its peer namespace (by path);
    - a rule (chain or hostport rule) with a container id: the owners of its container's cache entries and
      the claimants of their addresses and of the addresses its rules name (`chain_ips`); one whose
      container no cache entry has is never taken (`rules_unbacked`).
    The maps below hold those records by what names them, over-approximated where that is simpler (every
    entry of a container rather than those of its network, every record of a key rather than the one the
    key's lookup finds): a place named needlessly is asked again, which costs a check, never a verdict."""

    reserved_ips: frozenset[str]
    res_by_cid: dict[str, tuple[int, ...]]
    res_by_ip: dict[str, tuple[int, ...]]
    """A reservation's address as written (as its check looks it up) -> its places."""
    res_unbacked: tuple[int, ...]
    entry_keys: tuple[str | None, ...]
    """The netns key each cache entry names (`netns_key`), in order."""
    entries_by_ip: dict[str, tuple[int, ...]]
    entries_of_key: dict[str, tuple[int, ...]]
    keys_by_address: dict[str, tuple[str, ...]]
    """An address inside a namespace record -> the keys of the records holding it."""
    netns_of_key: dict[str, tuple[int, ...]]
    netns_paths: tuple[str, ...]
    bare_netns: tuple[int, ...]
    """The mounted namespaces no cache entry names."""
    veths_by_peer: dict[str, tuple[int, ...]]
    rules_by_cid: dict[str, tuple[int, ...]]
    rules_unbacked: tuple[int, ...]
    """Rules naming a container id no cache entry has (their verdicts are made once too: `NetworkPass.once`)."""
    cids_by_chain_ip: dict[str, tuple[str, ...]]
    """An address the rules of a container name (`Context.chain_ips`) -> those containers."""

    @classmethod
    def build(cls, ctx: Context) -> _Reads:
        inv, by_container, by_netns = ctx.inv, ctx.cache.by_container, ctx.cache.by_netns
        res_by_cid: dict[str, list[int]] = defaultdict(list)
        res_by_ip: dict[str, list[int]] = defaultdict(list)
        res_unbacked: list[int] = []
        for i, r in enumerate(inv.ip_reservations):
            if r.container_id is None:
                continue
            if not (r.container_id and by_container.get(r.container_id)):
                res_unbacked.append(i)
            res_by_cid[r.container_id].append(i)
            res_by_ip[r.ip].append(i)
        entries_by_ip: dict[str, list[int]] = defaultdict(list)
        entries_of_key: dict[str, list[int]] = defaultdict(list)
        entry_keys: list[str | None] = []
        for i, e in enumerate(inv.cni_cache):
            entry_keys.append(key := netns_key(e.netns))
            if key is not None:
                entries_of_key[key].append(i)
            for ip in e.ips:
                entries_by_ip[ip].append(i)
        keys_by_address: dict[str, list[str]] = defaultdict(list)
        netns_of_key: dict[str, list[int]] = defaultdict(list)
        bare: list[int] = []
        for i, (ns, key) in enumerate(zip(inv.netns, ctx.netns_keys, strict=True)):
            netns_of_key[key].append(i)
            for address in ns.addresses:
                keys_by_address[address].append(key)
            if ns.mounted and not by_netns.get(key):
                bare.append(i)
        veths_by_peer: dict[str, list[int]] = defaultdict(list)
        for i, link in enumerate(inv.veths):
            veths_by_peer[link.peer_netns_path or ""].append(i)
        rules_by_cid: dict[str, list[int]] = defaultdict(list)
        rules_unbacked: list[int] = []
        named = [(c.container_id, c.network) for c in inv.chains]
        named += [(h.container_id, h.network) for h in inv.hostport_rules]
        for i, (cid, network) in enumerate(named):
            if not cid:
                continue
            if not _cache_for(ctx, cid, network):
                rules_unbacked.append(i)
            rules_by_cid[cid].append(i)
        cids_by_chain_ip: dict[str, list[str]] = defaultdict(list)
        for cid, ips in ctx.chain_ips.items():
            for ip in ips:
                cids_by_chain_ip[ip].append(cid)
        return cls(frozenset(r.ip for r in inv.ip_reservations), _held(res_by_cid), _held(res_by_ip),
                   tuple(res_unbacked), tuple(entry_keys), _held(entries_by_ip), _held(entries_of_key),
                   _held(keys_by_address), _held(netns_of_key), tuple(ns.path for ns in inv.netns), tuple(bare),
                   _held(veths_by_peer), _held(rules_by_cid), tuple(rules_unbacked), _held(cids_by_chain_ip))

    def netns_naming(self, entries: Iterable[int]) -> set[int]:
        """The namespaces of the keys the cache entries at these places name."""
        return {i for j in entries if (key := self.entry_keys[j]) is not None
                for i in self.netns_of_key.get(key, ())}

    def veths_peering(self, spaces: Iterable[int]) -> set[int]:
        """The veths whose peer is at the path of a namespace at one of these places."""
        return {i for j in spaces for i in self.veths_by_peer.get(self.netns_paths[j], ())}


def _held(made: dict[str, list[_T]]) -> dict[str, tuple[_T, ...]]:
    """A map of `_Reads` as it is kept from scan to scan: tuples, a third of the lists' size."""
    return {key: tuple(values) for key, values in made.items()}


def _touched_ips(now: tuple[Pod, ...], then: tuple[Pod, ...]) -> set[str] | None:
    """The addresses (normalized) of the pods listed now but not then or then but not now (`pod_changes`),
    when the pods listed both now and then are in the same order: the claimants of every other address
    are then the very same pods in the same order (whether a pod claims an address is a function of the
    pod alone). None otherwise (every address may have moved)."""
    changes = pod_changes(now, then)
    if changes is None:
        return None
    return {ip for pods in changes for pod in pods for raw in pod.pod_ips if (ip := normalize_ip(raw))}


def _moved_claims(now: dict[str, list[Pod]], then: dict[str, list[Pod]], touched: set[str] | None) -> set[str]:
    """The addresses whose claimants now are not the very same pods, in the same order, as then (looked
    for among `touched` only, when known: `_touched_ips`)."""
    among: Iterable[str] = now.keys() | then.keys() if touched is None else touched
    return {ip for ip in among if not _same_pods(now.get(ip, ()), then.get(ip, ()))}


_NETWORK_READS = ("ip_reservations", "cni_cache", "netns", "veths", "chains", "hostport_rules")
"""The records the network domain judges (with their namespaces' addresses and read problems)."""


def _changed_keys(previous: NetworkPass, ctx: Context) -> set[str]:
    """The netns keys whose lookup (`_netns_held`: the record of the key, and whether its addresses could
    not be read) differs between the previous pass and this one: only verdicts that read them can differ."""
    changed: set[str] = set()
    before, now = previous.netns_by_key, ctx.netns_by_key
    for key in before.keys() | now.keys():
        a, b = before.get(key), now.get(key)
        if a is not b or (a is not None and b is not None
                          and (a.path in previous.netns_unreadable) != (b.path in ctx.netns_unreadable)):
            changed.add(key)
    return changed


def _netns_changed(ns: NetnsEntry, before: NetnsEntry, changed: set[str], key: str) -> bool:
    """Whether the verdict on `ns` (of key `key`) may differ from the previous pass's on `before` (the record
    at its place): another record, or a key it reads (the entries naming it, the record `_netns_held` looks
    up) changed."""
    if ns is not before:
        return True
    return key in changed or (not key and netns_key(ns.path) in changed)


def shared_namespaces(ctx: Context) -> None:
    """A cache entry to be DEL'd whose netns another sandbox's entry (another container id) names, while
    that entry is kept for any reason: the DEL would run inside a namespace something may still use. Runs
    after every domain (the runtime's word may have kept or released either entry)."""
    shared = [(key, entries) for key, entries in ctx.cache.by_netns.items()
              if len(entries) > 1 and len({e.container_id for e in entries}) > 1]
    if not shared:
        return
    by_path = {f.id: i for i, f in enumerate(ctx.findings) if f.kind is Kind.CNI_CACHE}
    for key, entries in shared:
        kept = [e for e in entries if (i := by_path.get(e.path)) is not None and not ctx.findings[i].cls.is_residue]
        for e in entries:
            i = by_path.get(e.path)
            if i is None or not ctx.findings[i].cls.is_residue:
                continue
            other = next((k for k in kept if k.container_id != e.container_id), None)
            if other is not None:
                ctx.findings[i] = reclass(ctx.findings[i], FindingClass.CONFLICT,
                                          f"its netns {key} is also named by sandbox {short(other.container_id)}'s"
                                          f" entry, which is kept: a DEL would run inside it")


_ATTACHMENT = frozenset({Kind.IP_RESERVATION, Kind.CNI_CACHE, Kind.IPTABLES_CHAIN, Kind.HOSTPORT_RULE, Kind.NETNS,
                         Kind.VETH, Kind.FIREWALL_RULE})


@dataclass(frozen=True)
class Stood:
    """What `stand_or_fall_together` was given and made, and its groups (container id -> the places of its
    parts), for the next correlation of the same kind (`Earlier.stood`)."""

    before: tuple[Finding, ...]
    after: tuple[Finding, ...]
    groups: dict[str, tuple[int, ...]]


def stand_or_fall_together(ctx: Context, earlier: Stood | None = None) -> Stood:
    """The parts of one network attachment (reservations, cache entries, chains, rules, netns, veth of one
    container id) stand or fall together: one part in use makes every part in use, one part kept for any
    other reason keeps the rest. Runs last, over every domain's verdicts: a CNI DEL of a container id
    releases all its reservations, so no part may go while another is kept. (A runtime sandbox itself is
    not a part: the runtime removes it first, and its parts wait for that.)

    `earlier`: what it made of an earlier correlation's findings (`Stood`). A group's outcome is a function
    of its parts alone, in order (their places, their findings), and a group is the places of one container
    id's parts: where every part of a group is the very finding it was then, at the same place, and no
    other place joined or left it, its parts are what they became then. So with the findings as many as
    then, only the groups of the places whose finding is not the very same (the container ids of the
    finding there then and now) are worked out again; every other place takes what it became then."""
    findings = ctx.findings
    if earlier is not None and len(earlier.before) == len(findings):
        changed = list(compress(range(len(findings)), map(operator.is_not, findings, earlier.before)))
        if len(changed) * 4 < len(findings):
            return _stand_again(ctx, earlier, changed)
    before = tuple(findings)
    groups: dict[str, list[int]] = {}
    first_cls: dict[str, FindingClass] = {}
    mixed: dict[str, None] = {}
    """The container ids whose parts are not all of one class (parts of one class are all residue, none
    kept, or all kept alike, none weaker: nothing to do); in any order: a group reads and changes only its
    own parts."""
    for index, finding in enumerate(findings):
        if (cid := finding.owner.container_id) and finding.kind in _ATTACHMENT:
            group = groups.get(cid)
            if group is None:
                groups[cid] = [index]
                first_cls[cid] = finding.cls
            else:
                group.append(index)
                if finding.cls is not first_cls[cid]:
                    mixed[cid] = None
    for cid in mixed:
        _stand_group(findings, cid, groups[cid])
    return Stood(before, tuple(findings), {cid: tuple(places) for cid, places in groups.items()})


def _stand_again(ctx: Context, earlier: Stood, changed: list[int]) -> Stood:
    """`stand_or_fall_together` from `earlier`, the findings at the places `changed` not the very same."""
    findings = ctx.findings
    before = tuple(findings)
    out = list(earlier.after)
    moved: set[str] = set()
    for i in changed:
        out[i] = findings[i]
        for f in (earlier.before[i], findings[i]):
            if (cid := f.owner.container_id) and f.kind in _ATTACHMENT:
                moved.add(cid)
    groups = dict(earlier.groups)
    at = set(changed)
    for cid in moved:
        places = [i for i in earlier.groups.get(cid, ()) if i not in at]
        places += [i for i in changed if findings[i].owner.container_id == cid and findings[i].kind in _ATTACHMENT]
        places.sort()
        if not places:
            groups.pop(cid, None)
            continue
        groups[cid] = tuple(places)
        for i in places:
            out[i] = findings[i]  # as given: the group is worked out from its parts as they are now
        _stand_group(out, cid, places)
    findings[:] = out
    return Stood(before, tuple(out), groups)


def _stand_group(findings: list[Finding], cid: str, indexes: Sequence[int]) -> None:
    """One container id's parts (at `indexes`, in order): in use, or kept, all together."""
    members = [findings[i] for i in indexes]
    keeping = [f for f in members if not f.cls.is_residue]
    if not keeping:
        return
    in_use = next((f for f in keeping if f.cls is FindingClass.IN_USE), None)
    ref = in_use or keeping[0]
    cls = FindingClass.IN_USE if in_use else FindingClass.PROTECTED
    # In use wins over protected too: the part's own reason to wait is moot when its sandbox is live.
    weaker = {FindingClass.PROTECTED} if in_use else set()
    changed = [i for i in indexes if findings[i].cls.is_residue or findings[i].cls in weaker]
    if not changed:
        return
    note = f"{ref.kind.value} {ref.id} of the same container {short(cid)} is {ref.cls.value}"
    for i in changed:
        old = findings[i]
        findings[i] = Finding(cls, old.kind, old.id, ref.owner if in_use else old.owner,
                              ref.owner_state if in_use else old.owner_state, (*old.evidence, note),
                              netns=old.netns, ip=old.ip, sandbox=old.sandbox)


def _container_mtime(ctx: Context, container_id: str) -> float | None:
    """Rules carry no timestamp; they are as young as the youngest file of the same sandbox."""
    times = [e.mtime for e in ctx.cache.by_container.get(container_id, [])]
    times += [r.mtime for r, _ in ctx.reservations_by_cid.get(container_id, [])]
    return max(times) if times else None


def _cache_for(ctx: Context, container_id: str | None, network: str | None) -> list[CNICacheEntry]:
    entries = ctx.cache.by_container.get(container_id) if container_id else None
    if not entries:
        return []
    if network is None or len(entries) == 1:
        return entries  # one entry: of that network, or the only one there is
    same_net = [e for e in entries if e.network == network]
    return same_net or entries


def _resolve_container(ctx: Context, container_id: str, network: str | None) -> Resolution | None:
    """The most protective resolution among the cache entries of one sandbox."""
    first: Resolution | None = None
    for entry in _cache_for(ctx, container_id, network):
        res = ctx.owner_of(entry)
        if res.state in HOLDING:
            return res
        if first is None:
            first = res
    return first


def _reservation(ctx: Context, r: IPReservation, reserved_ips: AbstractSet[str]) -> None:
    where = f"{r.network}/{r.ip}"
    evidence: tuple[str, ...] = (f"reservation names container {short(r.container_id)}",)
    finding: Finding
    if r.container_id is None:
        finding = Finding(FindingClass.UNKNOWN, Kind.IP_RESERVATION, where, Owner(), OwnerState.UNKNOWN,
                          ("reservation file names no container id",), ip=r.ip)
    elif (res := _resolve_container(ctx, r.container_id, r.network)) is not None:
        finding = _reservation_with_cache(ctx, r, where, res, evidence)
    else:
        finding = _reservation_without_cache(ctx, r, where, evidence)
    if finding.cls.is_residue and ctx.young(r.mtime):
        finding = reclass(finding, FindingClass.PROTECTED, ctx.age_note(r.mtime))
    ctx.add(finding)
    if r.container_id:
        ctx.reservations_by_cid[r.container_id].append((r, finding))


def _reservation_with_cache(
    ctx: Context, r: IPReservation, where: str, res: Resolution, evidence: tuple[str, ...]
) -> Finding:
    others = [p for p in ctx.pods.claims.get(r.ip, []) if not _is_owner(p, res)]
    evidence = evidence + res.evidence
    if others:
        names = ", ".join(f"{p.namespace}/{p.name}" for p in others)
        evidence += (f"status of {names} claims {r.ip} but the reservation leads to {res.owner.label()}",)
        return Finding(FindingClass.CONFLICT, Kind.IP_RESERVATION, where, res.owner, res.state, evidence,
                       ip=r.ip)
    if res.state in HOLDING:
        return Finding(FindingClass.IN_USE, Kind.IP_RESERVATION, where, res.owner, res.state, evidence, ip=r.ip)
    return Finding(FindingClass.LEAKED_IP, Kind.IP_RESERVATION, where, res.owner, res.state, evidence, ip=r.ip)


def _is_owner(pod: Pod, res: Resolution) -> bool:
    """The claimant is the entry's owner: the same UID, or the very pod its UID resolved to (a static pod's
    mirror, whose API UID differs from the config hash the kubelet puts in the cache entry). Only the pod
    the resolution found counts: another mirror of the same hash is another claimant (a conflict), and a
    resolved pod that is terminal never claims an address, so this turns no conflict into a reclaim."""
    return pod.uid == res.owner.uid or (res.pod is not None and pod.uid == res.pod.uid)


def _reservation_without_cache(
    ctx: Context,
    r: IPReservation,
    where: str,
    evidence: tuple[str, ...],
) -> Finding:
    owner = Owner(container_id=r.container_id)
    evidence += ("no cni cache entry for that container",)
    pods = ctx.pods.claims.get(r.ip, [])
    if len(pods) > 1:
        names = ", ".join(f"{p.namespace}/{p.name}" for p in pods)
        return Finding(FindingClass.CONFLICT, Kind.IP_RESERVATION, where, owner, OwnerState.UNKNOWN,
                       (*evidence, f"{r.ip} claimed by {len(pods)} live pods: {names}"), ip=r.ip)
    if pods:
        pod = pods[0]
        tied = Owner(uid=pod.uid, namespace=pod.namespace, name=pod.name, container_id=r.container_id)
        return Finding(FindingClass.IN_USE, Kind.IP_RESERVATION, where, tied, pod.state,
                       (*evidence, f"status of {pod.namespace}/{pod.name} claims {r.ip}"), ip=r.ip)
    keep = (_unreadable_entry(ctx, r.container_id) or _settling(ctx, r) or ctx.pending_note()
            or _unaccounted_note(ctx) or _static_network_note(ctx) or _unexplained_pod_dir_note(ctx))
    if keep:
        return Finding(FindingClass.PROTECTED, Kind.IP_RESERVATION, where, owner, OwnerState.UNKNOWN,
                       (*evidence, keep), ip=r.ip)
    if not _network_backed_by_status(ctx, r.network):
        note = f"network {r.network} holds no IP that a live pod's status shows; it may be a secondary network"
        return Finding(FindingClass.UNKNOWN, Kind.IP_RESERVATION, where, owner, OwnerState.UNKNOWN,
                       (*evidence, note), ip=r.ip)
    terminal = ctx.pods.terminal_claims.get(r.ip, [])
    if terminal:
        pod = terminal[0]
        owner = Owner(uid=pod.uid, namespace=pod.namespace, name=pod.name, container_id=r.container_id)
        evidence += (f"only terminal pod {pod.namespace}/{pod.name} still shows {r.ip}",)
    else:
        evidence += (f"no pod on this node claims {r.ip}",)
    state = OwnerState.TERMINAL if terminal else OwnerState.ABSENT
    return Finding(FindingClass.LEAKED_IP, Kind.IP_RESERVATION, where, owner, state, evidence, ip=r.ip)


def _unreadable_entry(ctx: Context, container_id: str | None) -> str | None:
    """A cache entry of this container exists but cannot be read (truncated, being written): it may name
    a live pod, so the reservation is kept."""
    if not container_id:
        return None
    for name in ctx.unreadable_cache:
        if f"-{container_id}-" in name:
            return f"cache entry {name} of this container exists but cannot be read"
    return None


def _settling(ctx: Context, r: IPReservation) -> str | None:
    """The cache entry is written when ADD ends; until the kubelet would have given up on the ADD, a
    reservation without one may be a sandbox still being set up."""
    settle = max(ctx.policy.add_settle_seconds, ctx.policy.min_age_seconds)
    if ctx.clock.before(r.mtime, settle):
        return None
    return f"no cache entry yet and {ctx.now - r.mtime:.0f}s old: its CNI ADD may still run (kept {settle:.0f}s)"


def _static_network_note(ctx: Context) -> str | None:
    """A static pod without a mirror in the desired state, not on the host network (or one whose manifest
    cannot be read), may own any reservation no cache entry explains."""
    for m in ctx.unmirrored:
        if m.name is None or not m.host_network:
            what = "cannot be read" if m.name is None else f"declares {m.namespace}/{m.name} off the host network"
            return f"static pod manifest {m.path} {what}, and the desired state shows no mirror pod for it"
    return None


def _unexplained_pod_dir_note(ctx: Context) -> str | None:
    """A pod directory whose owner the desired state lacks and no cache entry names: if the list left a
    live pod out, its sandbox's reservations are ones no cache entry explains. They wait until that
    directory is gone (terminate's live GET keeps it while the pod exists)."""
    return ctx.unexplained_pod_dir


def _unaccounted_note(ctx: Context) -> str | None:
    """A Running pod that no readable cache entry leads to may own any reservation that no cache entry
    explains: its own entry may be truncated, or its sandbox being re-created (ADD not finished)."""
    if not ctx.unaccounted:
        return None
    names = ", ".join(f"{p.namespace}/{p.name}" for p in ctx.unaccounted[:3])
    more = f" and {len(ctx.unaccounted) - 3} more" if len(ctx.unaccounted) > 3 else ""
    return f"running pods no readable cache entry leads to may own it: {names}{more}"


def _network_backed_by_status(ctx: Context, network: str) -> bool:
    """A network reflects pod status when a live pod's status IP is reserved in it (or no pod runs)."""
    if not ctx.pods.claims:
        return True
    backed = ctx.backed_networks.get(network)
    if backed is None:
        ips = ctx.network_ips.get(network, set())
        backed = ctx.backed_networks[network] = any(ip in ips for ip in ctx.pods.claims)
    return backed


def _status_conflicts(ctx: Context, reserved_ips: AbstractSet[str]) -> None:
    """Two live pods claiming one IP are reported even when no reservation file backs it."""
    for ip, pods in ctx.pods.claims.items():
        if len(pods) < 2 or ip in reserved_ips:
            continue
        names = ", ".join(f"{p.namespace}/{p.name}" for p in pods)
        ctx.add(Finding(FindingClass.CONFLICT, Kind.IP_RESERVATION, ip, Owner(), OwnerState.LIVE,
                          (f"{ip} claimed by {len(pods)} live pods: {names}",), ip=ip))


def _claimed_elsewhere(ctx: Context, ips: Iterable[str], owner_uid: str | None) -> str | None:
    """A dead sandbox whose IP a live pod claims is a conflict: which one is right is not ours to guess."""
    for ip in ips:
        others = [p for p in ctx.pods.claims.get(ip, []) if p.uid != owner_uid]
        if others:
            names = ", ".join(f"{p.namespace}/{p.name}" for p in others)
            return f"{ip} of this sandbox is claimed by live pod {names}"
    return None


def _shared_netns(ctx: Context, entry: CNICacheEntry, owner_uid: str | None) -> str | None:
    """A dead entry naming the namespace a holding entry also names: its DEL would run in a live pod."""
    key = netns_key(entry.netns)
    if key is None:
        return None
    for other in ctx.cache.by_netns.get(key, []):
        if other is entry:
            continue
        res = ctx.owner_of(other)
        # Another sandbox (container id) naming the namespace while its owner may hold it: the owner UIDs
        # may both be missing (name-only entries), so the sandbox, not the UID, tells them apart.
        if res.state in HOLDING and (other.container_id != entry.container_id or res.owner.uid != owner_uid):
            return f"its netns {entry.netns} is also named by {res.owner.label()}'s sandbox"
    return None


def _netns_held(ctx: Context, netns: str | None, owner_uid: str | None, *, key: str | None = None) -> str | None:
    """What the namespace itself holds outweighs any cache entry: an address there that a holding pod
    claims makes it that pod's; an address that none of the entries naming it lists makes it someone's.
    `netns` is a path as a cache entry names it; a scanned file passes its own `key` (entry_key)."""
    key = key or netns_key(netns)
    ns = ctx.netns_by_key.get(key) if key else None
    if ns is not None and ns.mounted and not ns.addresses_read and ns.path in ctx.netns_unreadable:
        return f"the addresses inside netns {ns.path} could not be read; nothing acts inside it blind"
    if ns is None or not ns.addresses:
        return None
    for address in ns.addresses:
        others = [p for p in ctx.pods.claims.get(address, []) if p.uid != owner_uid]
        if others:
            return f"netns {ns.path} holds {address}, claimed by live pod {others[0].namespace}/{others[0].name}"
    listed = {ip for e in ctx.cache.by_netns.get(key or "", []) for ip in (normalize_ip(x) for x in e.ips) if ip}
    foreign = [a for a in ns.addresses if a not in listed]
    if foreign:
        return f"netns {ns.path} holds {', '.join(foreign)}, which no cache entry naming it lists"
    return None


def _cache_entry(ctx: Context, entry: CNICacheEntry) -> Finding:
    res = ctx.owner_of(entry)
    if entry.path in ctx.shared_paths:
        # One file read as entries naming different owners (its evidence says which): never reclaimed.
        return ctx.add(Finding(FindingClass.CONFLICT, Kind.CNI_CACHE, entry.path, res.owner, res.state, res.evidence,
                               netns=entry.netns, ip=entry.ips[0] if entry.ips else None))
    conflict = None
    if res.state is OwnerState.ABSENT:
        static = ctx.static_owner(uid=entry.pod_uid, namespace=entry.pod_namespace, name=entry.pod_name)
        if static is not None:
            return ctx.add(Finding(FindingClass.PROTECTED, Kind.CNI_CACHE, entry.path, res.owner, res.state,
                                   (*res.evidence, static), netns=entry.netns, ip=entry.ips[0] if entry.ips else None))
    if res.state in GONE:
        conflict = (_claimed_elsewhere(ctx, entry.ips, res.owner.uid) or _shared_netns(ctx, entry, res.owner.uid)
                    or _netns_held(ctx, entry.netns, res.owner.uid))
    if conflict:
        return ctx.add(Finding(FindingClass.CONFLICT, Kind.CNI_CACHE, entry.path, res.owner, res.state,
                               (*res.evidence, conflict), netns=entry.netns, ip=entry.ips[0] if entry.ips else None))
    if res.state in HOLDING:
        cls = FindingClass.IN_USE if res.state is not OwnerState.UNKNOWN else FindingClass.UNKNOWN
    else:
        cls = FindingClass.STALE_CNI_CACHE
    finding = Finding(cls, Kind.CNI_CACHE, entry.path, res.owner, res.state, res.evidence,
                      netns=entry.netns, ip=entry.ips[0] if entry.ips else None)
    if cls.is_residue and ctx.young(entry.mtime):
        finding = reclass(finding, FindingClass.PROTECTED, ctx.age_note(entry.mtime))
    return ctx.add(finding)


def _netns(ctx: Context, ns: NetnsEntry, key: str) -> Finding:
    """`key`: the record's (`entry_key`)."""
    entries = ctx.cache.by_netns.get(key, [])
    finding: Finding
    if entries:
        resolutions = [ctx.owner_of(e) for e in entries]
        holding = [r for r in resolutions if r.state in HOLDING]
        res = holding[0] if holding else resolutions[0]
        conflict = None if holding else (
            _claimed_elsewhere(ctx, [ip for e in entries for ip in e.ips], res.owner.uid)
            or _netns_held(ctx, ns.path, res.owner.uid, key=key))
        evidence = res.evidence
        if res.state is OwnerState.UNKNOWN:
            cls = FindingClass.UNKNOWN
        elif conflict:
            cls, evidence = FindingClass.CONFLICT, (*evidence, conflict)
        else:
            cls = FindingClass.IN_USE if holding else FindingClass.LEAKED_NETNS
        finding = Finding(cls, Kind.NETNS, ns.path, res.owner, res.state, evidence, netns=ns.path)
        kept = [f for e in entries if (f := ctx.cache_findings.get(id(e))) is not None and not f.cls.is_residue]
        if finding.cls.is_residue and kept:
            # Two sandboxes name it: it goes only when every entry naming it goes.
            finding = reclass(finding, FindingClass.PROTECTED,
                              f"cache entry {kept[0].id} naming it is {kept[0].cls.value}")
    elif not ns.mounted:
        finding = Finding(FindingClass.LEAKED_NETNS, Kind.NETNS, ns.path, Owner(), OwnerState.ABSENT,
                          ("not a mounted namespace: an empty leftover file",), netns=ns.path)
    else:
        finding = _netns_by_addresses(ctx, ns)
    if finding.cls.is_residue and ctx.young(ns.mtime):
        finding = reclass(finding, FindingClass.PROTECTED, ctx.age_note(ns.mtime))
    return ctx.add(finding)


def _netns_by_addresses(ctx: Context, ns: NetnsEntry) -> Finding:
    evidence: tuple[str, ...] = ("no cni cache entry names it",)
    if not ns.addresses:
        return Finding(FindingClass.UNKNOWN, Kind.NETNS, ns.path, Owner(), OwnerState.UNKNOWN,
                       (*evidence, "no addresses inside to match against pods"), netns=ns.path)
    for address in ns.addresses:
        for pod in ctx.pods.claims.get(address, []):
            owner = Owner(uid=pod.uid, namespace=pod.namespace, name=pod.name)
            return Finding(FindingClass.IN_USE, Kind.NETNS, ns.path, owner, pod.state,
                           (*evidence, f"holds {address}, claimed by {owner.label()}"), netns=ns.path)
    pending = ctx.pending_note()
    if pending:
        # A terminal pod's address may already be reused by a sandbox still being created.
        return Finding(FindingClass.PROTECTED, Kind.NETNS, ns.path, Owner(), OwnerState.UNKNOWN,
                       (*evidence, pending), netns=ns.path)
    for address in ns.addresses:
        for pod in ctx.pods.terminal_claims.get(address, []):
            owner = Owner(uid=pod.uid, namespace=pod.namespace, name=pod.name)
            return Finding(FindingClass.LEAKED_NETNS, Kind.NETNS, ns.path, owner, OwnerState.TERMINAL,
                           (*evidence, f"holds {address} of terminal pod {owner.label()}"), netns=ns.path)
    return Finding(FindingClass.UNKNOWN, Kind.NETNS, ns.path, Owner(), OwnerState.UNKNOWN,
                   (*evidence, f"holds {', '.join(ns.addresses)}, claimed by no pod"), netns=ns.path)


_VETH_CLASS = {
    FindingClass.IN_USE: FindingClass.IN_USE,
    FindingClass.LEAKED_NETNS: FindingClass.DANGLING_VETH,
    FindingClass.PROTECTED: FindingClass.PROTECTED,
}
"""A veth's class by its peer namespace's (anything else: unknown)."""


def _veth(ctx: Context, link: VethLink) -> Finding:
    ns_finding = ctx.netns_class.get(link.peer_netns_path or "")
    if ns_finding is None:
        where = "in this namespace" if link.peer_netnsid is None else f"in netns id {link.peer_netnsid}"
        return ctx.add(Finding(FindingClass.UNKNOWN, Kind.VETH, link.name, Owner(), OwnerState.UNKNOWN,
                               (f"peer lives {where}, not in a namespace of the netns directories",)))
    cls = _VETH_CLASS.get(ns_finding.cls, FindingClass.UNKNOWN)
    evidence = (f"peer in {link.peer_netns_path}", *ns_finding.evidence)
    return ctx.add(Finding(cls, Kind.VETH, link.name, ns_finding.owner, ns_finding.owner_state, evidence,
                           netns=link.peer_netns_path))


def _by_container(
    ctx: Context,
    kind: Kind,
    ident: str,
    container_id: str | None,
    network: str | None,
) -> None:
    before = len(ctx.findings)
    _classify_by_container(ctx, kind, ident, container_id, network)
    if len(ctx.findings) == before or not ctx.findings[before].cls.is_residue or not container_id:
        return
    added = ctx.findings[before]
    mtime = _container_mtime(ctx, container_id)
    if mtime is not None and ctx.young(mtime):
        ctx.findings[before] = reclass(added, FindingClass.PROTECTED, ctx.age_note(mtime))


def _classify_by_container(
    ctx: Context,
    kind: Kind,
    ident: str,
    container_id: str | None,
    network: str | None,
) -> None:
    leaked = FindingClass.LEAKED_CHAIN if kind is Kind.IPTABLES_CHAIN else FindingClass.LEAKED_HOSTPORT_RULE
    if not container_id:
        ctx.add(Finding(FindingClass.UNKNOWN, kind, ident, Owner(), OwnerState.UNKNOWN,
                          ("no container id in the rule comments",)))
        return
    evidence: tuple[str, ...] = (f"comment names network {network} container {short(container_id)}",)
    res = _resolve_container(ctx, container_id, network)
    if res is not None:
        conflict = None
        if res.state in GONE:
            ips = [ip for e in _cache_for(ctx, container_id, network) for ip in e.ips]
            ips += ctx.chain_ips.get(container_id, ())
            conflict = _claimed_elsewhere(ctx, ips, res.owner.uid)
        evidence += res.evidence
        if res.state is OwnerState.UNKNOWN:
            cls = FindingClass.UNKNOWN
        elif conflict:
            cls, evidence = FindingClass.CONFLICT, (*evidence, conflict)
        else:
            cls = FindingClass.IN_USE if res.state in HOLDING else leaked
        ctx.add(Finding(cls, kind, ident, res.owner, res.state, evidence))
        return
    reservations = ctx.reservations_by_cid.get(container_id, [])
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
        ctx.add(Finding(cls, kind, ident, ref.owner, ref.owner_state,
                          (*evidence, f"follows IP reservation {ref.id}: {ref.cls}")))
        return
    chain_ips = ctx.chain_ips.get(container_id, ())
    claimed = sorted(ip for ip in chain_ips if ip in ctx.pods.claims)
    if claimed:
        pod = ctx.pods.claims[claimed[0]][0]
        owner = Owner(uid=pod.uid, namespace=pod.namespace, name=pod.name, container_id=container_id)
        ctx.add(Finding(FindingClass.IN_USE, kind, ident, owner, pod.state,
                          (*evidence, f"its rules match {claimed[0]}, claimed by {owner.label()}")))
        return
    if chain_ips and network and ctx.cache.networks.get(network, 0) > 0 and not ctx.pods.unsettled:
        note = (f"no cache entry or IP reservation for that container and no live pod claims"
                f" {', '.join(chain_ips)}, while {ctx.cache.networks[network]} other attachments of"
                f" {network} have cache entries")
        ctx.add(Finding(leaked, kind, ident, Owner(container_id=container_id), OwnerState.ABSENT,
                          (*evidence, note)))
        return
    ctx.add(Finding(FindingClass.UNKNOWN, kind, ident, Owner(container_id=container_id),
                      OwnerState.UNKNOWN, (*evidence, "no cache entry or IP reservation to tie it to a pod")))


_IP_FLAGS = frozenset({"-s", "-d", "--to-destination"})
_RULE_IP_ARG = re.compile(r"\[?([0-9a-fA-F.:]+?)\]?(?:/(?:32|128))?(?::\d+)?")
"""The argument of an address flag that names one host: an address, bracketed or not, with an optional /32 or
/128 and port."""


def _chain_ips(inv: Inventory) -> dict[str, tuple[str, ...]]:
    """Pod IPs the CNI rules of each container name (-s in the masquerade jump, DNAT destinations), sorted,
    each once: a tuple of one or two addresses, where a set took 216 bytes (kept from one scan to the next
    for every container)."""
    found: dict[str, set[str]] = defaultdict(set)
    for c in inv.chains:
        if c.container_id:
            for text in (*c.rules, *c.jumps):
                if ips := rule_ips(text):
                    found[c.container_id].update(ips)
    for r in inv.hostport_rules:
        if r.container_id and (ips := rule_ips(r.rule)):
            found[r.container_id].update(ips)
    return {cid: tuple(sorted(ips)) for cid, ips in found.items()}


@remembered(16384)
def rule_ips(text: str) -> tuple[str, ...]:
    """The host addresses a rule's -s, -d and --to-destination flags name (normalized), in order.

    A rule is split on whitespace: a flag is a whole word, and its argument the next word, matched whole.
    Remembered: the same rules come back scan after scan."""
    words = text.split()
    out: list[str] = []
    for i in range(len(words) - 1):
        if words[i] in _IP_FLAGS and (match := _RULE_IP_ARG.fullmatch(words[i + 1])) is not None:
            ip = normalize_ip(match.group(1))
            if ip:
                out.append(ip)
    return tuple(out)


def _rule_id(rule: HostportRule) -> str:
    return hostport_rule_id(rule)
