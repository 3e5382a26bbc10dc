"""A stale cache entry naming the same namespace as a live sandbox (/proc/<pid>/ns/net after pid reuse)
is a conflict: its CNI DEL would delete eth0 inside the live pod. /proc paths key by the full path."""

from __future__ import annotations

from dataclasses import replace

from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory, Kind
from nodegc.planning.correlate import correlate
from tests.unit.factories import NOW, cache, desired, pod


def test_stale_entry_naming_the_live_sandboxs_netns_is_not_reclaimed() -> None:
    shared = "/proc/4242/ns/net"
    dead = cache("cdead", uid="u-dead", name="old", ip="10.0.0.5", netns=shared)
    live = replace(cache("clive", uid="u-live", name="web", ip="10.0.0.9", netns=shared),
                   path="/cni/results/live")
    inv = Inventory(taken_at=NOW, cni_cache=(dead, live))
    f = {x.id: x for x in correlate(inv, desired(pod("web", "u-live", ip="10.0.0.9")), now=NOW)
         if x.kind is Kind.CNI_CACHE}
    assert f["/cni/results/live"].cls is FindingClass.IN_USE
    # the dead entry's CNI DEL would run `bridge DEL` with CNI_NETNS=/proc/4242/ns/net, CNI_IFNAME=eth0:
    assert not f[dead.path].cls.is_residue, f[dead.path].evidence
