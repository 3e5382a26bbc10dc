"""Detect: one read of the node joined with one desired state, the first step of every cycle and of `scan`.

A scan reads the addresses inside a network namespace only when no cache entry names it (a setns and a
netlink dump each). Before anything may act inside a namespace (CNI DEL, netns removal, the host end of
its veth), what the namespace holds must be known, so the namespaces of such findings are read here and
the inventory correlated again: an address that a live pod claims outweighs any cache entry. The second
correlation reuses what the first built that does not depend on the namespaces.

Both passes take the findings of a recent correlation again when it saw the very same records and pods
under the same policy, at a time that answers alike (`nodegc.planning.remembered`): a quiet node's scan
after scan. A correlation made anew takes from the last one the verdicts whose inputs are the same.
"""

from __future__ import annotations

from datetime import datetime

from nodegc.inventory.scanning import with_netns_addresses
from nodegc.model.findings import Finding
from nodegc.model.pods import DesiredState
from nodegc.model.resources import Inventory, Kind
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.owners import entry_key, netns_key
from nodegc.planning.remembered import Correlations

_ACTS_IN_NETNS = frozenset({Kind.CNI_CACHE, Kind.NETNS, Kind.VETH})


REMEMBERED = Correlations()
"""The process's last correlations: a scan that sees what one of them saw takes its findings again."""


def detect(
    inventory: Inventory,
    desired: DesiredState,
    *,
    now: datetime,
    policy: CorrelationPolicy,
) -> tuple[Inventory, tuple[Finding, ...]]:
    findings, first = REMEMBERED.correlate(inventory, desired, now=now, policy=policy)
    paths = netns_to_read(inventory, findings)
    if not paths:
        return inventory, findings
    inventory = with_netns_addresses(inventory, paths)
    # Only the namespaces changed: the second pass takes from the first what does not depend on them.
    return inventory, REMEMBERED.correlate(inventory, desired, now=now, policy=policy, previous=first)[0]


def forget_correlations() -> None:
    """Forget the remembered correlations: the next detect correlates as a process's first."""
    REMEMBERED.forget()


def netns_to_read(inventory: Inventory, findings: tuple[Finding, ...]) -> set[str]:
    """The mounted namespaces, their addresses not read yet, that residue among `findings` would act in."""
    keys = {key for f in findings if f.cls.is_residue and f.kind in _ACTS_IN_NETNS
            and (key := netns_key(f.netns)) is not None}
    return {ns.path for ns in inventory.netns if ns.mounted and not ns.addresses_read and entry_key(ns) in keys}
