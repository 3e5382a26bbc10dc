"""Detect: one read of the node joined with one desired state, the first step of every cycle and of `scan`.

A scan reads the addresses inside a network namespace only when no cache entry names it (a setns and a
netlink dump each). Before anything may act inside a namespace (CNI DEL, netns removal, the host end of
its veth), what the namespace holds must be known, so the namespaces of such findings are read here and
the inventory correlated again: an address that a live pod claims outweighs any cache entry.
"""

from __future__ import annotations

from datetime import datetime

from nodegc.inventory.scanning import with_netns_addresses
from nodegc.model.findings import Finding
from nodegc.model.pods import DesiredState
from nodegc.model.resources import Inventory, Kind
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.planning.owners import entry_key, netns_key

_ACTS_IN_NETNS = frozenset({Kind.CNI_CACHE, Kind.NETNS, Kind.VETH})


def detect(
    inventory: Inventory,
    desired: DesiredState,
    *,
    now: datetime,
    policy: CorrelationPolicy,
) -> tuple[Inventory, tuple[Finding, ...]]:
    findings = correlate(inventory, desired, now=now, policy=policy)
    keys = {key for f in findings if f.cls.is_residue and f.kind in _ACTS_IN_NETNS
            and (key := netns_key(f.netns)) is not None}
    paths = {ns.path for ns in inventory.netns
             if ns.mounted and not ns.addresses_read and entry_key(ns) in keys}
    if not paths:
        return inventory, findings
    inventory = with_netns_addresses(inventory, paths)
    return inventory, correlate(inventory, desired, now=now, policy=policy)
