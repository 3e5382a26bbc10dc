"""The firewall plugin's per-address rules in CNI-FORWARD. Pure: no I/O.

They name no container, only an address, so they follow the attachment that holds the address: the
host-local reservation of that IP (after every other domain has judged it). A rule is residue only when
no live pod's status and no READY sandbox claims its address, and either the reservation of that address
is itself residue, or no reservation exists while the address lies in a host-local range nodegc knows
(a rule without a reservation outlived its attachment: ADD reserves before the firewall plugin runs, DEL
removes the rules before it releases). A reused address is a live pod's and is kept.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass

from nodegc.model.findings import Finding, FindingClass, Owner
from nodegc.model.pods import OwnerState
from nodegc.model.resources import FirewallRule, Kind, ReadProblem
from nodegc.planning.context import Context
from nodegc.planning.owners import normalize_ip


def firewall_rule_id(rule: FirewallRule) -> str:
    direction = "-d" if " -d " in rule.rule else "-s"
    return f"{rule.table}/{rule.chain}/{direction} {rule.ip}"


def _known_ranges(ctx: Context) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    out: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for rs in ctx.inv.ip_ranges:
        for r in rs.ranges:
            try:
                out.append(ipaddress.ip_network(r.subnet, strict=False))
            except ValueError:
                continue
    return out


def _in_known_range(ranges: list[ipaddress.IPv4Network | ipaddress.IPv6Network], ip: str) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return any(addr in net for net in ranges)


def _kept_entries_by_ip(ctx: Context) -> dict[str, Finding]:
    """Each address a kept cache entry lists -> the first such entry's finding. A finding names a path, and
    a file read as several entries cannot be told apart: each of its findings lists every entry's addresses
    (never only the first entry's: a dead pod's entry read before a live pod's at one path hid the live
    pod's addresses, and their rules were planned for reclaim)."""
    ips_of: dict[str, tuple[str, ...]] = {}
    for e in ctx.inv.cni_cache:
        before = ips_of.get(e.path)
        ips_of[e.path] = e.ips if before is None else (*before, *e.ips)
    out: dict[str, Finding] = {}
    for f in ctx.findings:
        if f.kind is Kind.CNI_CACHE and not f.cls.is_residue:
            for ip in {normalize_ip(x) for x in ips_of.get(f.id, ())}:
                if ip is not None:
                    out.setdefault(ip, f)
    return out


@dataclass
class _Seen:
    """What every rule is judged against, gathered once."""

    ready_ips: set[str | None]
    kept_entries: dict[str, Finding]
    unread: ReadProblem | None
    ranges: list[ipaddress.IPv4Network | ipaddress.IPv6Network]


def correlate_firewall(ctx: Context) -> None:
    if not ctx.inv.firewall_rules:
        return
    view = ctx.inv.runtime
    ready_ips = {normalize_ip(ip) for sb in (view.sandboxes if view and view.reachable else ()) if sb.ready
                 for ip in sb.ips}
    by_ip: dict[str, list[Finding]] = {}
    for f in ctx.findings:
        if f.kind is Kind.IP_RESERVATION and f.ip:
            by_ip.setdefault(normalize_ip(f.ip) or f.ip, []).append(f)
    seen = _Seen(ready_ips=ready_ips, kept_entries=_kept_entries_by_ip(ctx),
                 unread=next((p for p in ctx.inv.problems if p.kind is Kind.IP_RESERVATION), None),
                 ranges=_known_ranges(ctx))
    for rule in ctx.inv.firewall_rules:
        ctx.add(_rule(ctx, rule, by_ip.get(normalize_ip(rule.ip) or rule.ip, []), seen))


def _rule(ctx: Context, rule: FirewallRule, reservations: list[Finding], seen: _Seen) -> Finding:
    ready_ips = seen.ready_ips
    fid = firewall_rule_id(rule)
    ip = normalize_ip(rule.ip) or rule.ip
    claimed = ctx.pods.claims.get(ip, [])
    if claimed or ip in ready_ips:
        pod = claimed[0] if claimed else None
        owner = Owner(uid=pod.uid, namespace=pod.namespace, name=pod.name) if pod else Owner()
        return Finding(FindingClass.IN_USE, Kind.FIREWALL_RULE, fid, owner, pod.state if pod else OwnerState.LIVE,
                       (f"{ip} is a live pod's or a READY sandbox's address",), ip=ip)
    if reservations:
        if all(f.cls.is_residue for f in reservations):
            ref = reservations[0]
            return Finding(FindingClass.LEAKED_FIREWALL_RULE, Kind.FIREWALL_RULE, fid, ref.owner, ref.owner_state,
                           (f"follows reservation {ref.id}: {ref.cls.value}",), ip=ip, sandbox=ref.sandbox)
        keep = next(f for f in reservations if not f.cls.is_residue)
        return dataclasses.replace(keep, kind=Kind.FIREWALL_RULE, id=fid, netns=None,
                                   evidence=(f"follows reservation {keep.id}: {keep.cls.value}",))
    kept_entry = seen.kept_entries.get(ip)
    if kept_entry is not None:
        # A cache entry that is kept lists the address (a secondary network's, a static pod's): its rule too.
        return dataclasses.replace(kept_entry, kind=Kind.FIREWALL_RULE, id=fid, netns=None, ip=ip,
                                   evidence=(f"cache entry {kept_entry.id} lists {ip}: {kept_entry.cls.value}",))
    unread = seen.unread
    if unread is not None:
        return Finding(FindingClass.PROTECTED, Kind.FIREWALL_RULE, fid, Owner(), OwnerState.UNKNOWN,
                       (f"no reservation of {ip} seen, but {unread.path} could not be read: it may be there",), ip=ip)
    if not _in_known_range(seen.ranges, ip):
        return Finding(FindingClass.UNKNOWN, Kind.FIREWALL_RULE, fid, Owner(), OwnerState.UNKNOWN,
                       (f"no reservation of {ip}, and no host-local range nodegc knows holds it",), ip=ip)
    if ctx.pods.unsettled:
        return Finding(FindingClass.PROTECTED, Kind.FIREWALL_RULE, fid, Owner(), OwnerState.UNKNOWN,
                       (f"no reservation of {ip}", ctx.pending_note() or "pods are starting"), ip=ip)
    return Finding(FindingClass.LEAKED_FIREWALL_RULE, Kind.FIREWALL_RULE, fid, Owner(), OwnerState.ABSENT,
                   (f"no reservation of {ip} in its host-local range and no pod claims it: the attachment is gone",),
                   ip=ip)
