"""A firewall rule whose address only a kept cache entry lists (a live pod's secondary address, its
reservation unseen) follows that entry. The addresses of the kept entries were looked up by path, the first
entry of a path's: with a dead pod's entry read first at the live pod's entry's path, the live pod's address
was listed by no kept entry, and its rule, in a host-local range and claimed by no pod's status, was planned
for reclaim. Every entry read at a path lists its addresses for the path's findings."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nodegc.model.findings import FindingClass
from nodegc.model.ipranges import AddressRange, HostLocalRange
from nodegc.model.resources import FirewallRule, Inventory, Kind
from nodegc.planning.correlate import correlate
from tests.unit.factories import NET, NOW, cache, desired, pod

SECONDARY = "10.0.0.5"
RULE = FirewallRule(table="filter", chain="CNI-FORWARD", rule=f"-A CNI-FORWARD -s {SECONDARY}/32 -j ACCEPT",
                    ip=SECONDARY, family=0)
RANGES = (HostLocalRange(network=NET, ranges=(AddressRange("10.0.0.0/24", "10.0.0.2", "10.0.0.254", "10.0.0.1", 253),),
                         source="/etc/cni/net.d/10-net.conflist"),)


@pytest.mark.parametrize("live_first", [True, False])
def test_a_live_pods_secondary_address_is_kept_whatever_shares_its_entrys_path(live_first: bool) -> None:
    live = replace(cache("c1", uid="u1", name="web", ip="10.0.0.2"), ips=("10.0.0.2", SECONDARY))
    dead = replace(cache("c2", uid="u9", name="gone", ip="10.0.0.9"), path=live.path)
    inv = Inventory(taken_at=NOW, cni_cache=(live, dead) if live_first else (dead, live), firewall_rules=(RULE,),
                    ip_ranges=RANGES)
    found = correlate(inv, desired(pod("web", "u1", ip="10.0.0.2")), now=NOW)
    [rule] = [f for f in found if f.kind is Kind.FIREWALL_RULE]
    assert not rule.cls.is_residue, rule


def test_the_rule_of_an_address_no_kept_entry_lists_still_goes() -> None:
    """The same node without the live pod's secondary address: nothing keeps the rule."""
    live = cache("c1", uid="u1", name="web", ip="10.0.0.2")
    inv = Inventory(taken_at=NOW, cni_cache=(live,), firewall_rules=(RULE,), ip_ranges=RANGES)
    found = correlate(inv, desired(pod("web", "u1", ip="10.0.0.2")), now=NOW)
    [rule] = [f for f in found if f.kind is Kind.FIREWALL_RULE]
    assert rule.cls is FindingClass.LEAKED_FIREWALL_RULE, rule
