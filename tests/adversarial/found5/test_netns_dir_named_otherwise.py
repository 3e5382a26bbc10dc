"""A `--netns-dir` whose last component is not `netns` (say /host-netns, the node's /run/netns mounted
elsewhere in the agent's container): the namespace file's own finding must still weigh the addresses read
inside it. Its key comes from the directory it was read from, while a cache entry's netns path (as the
runtime wrote it, /var/run/netns/x) keys by its file name; both must find the same namespace."""

from __future__ import annotations

from dataclasses import replace

from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory, Kind
from nodegc.planning.correlate import correlate
from tests.unit.factories import NOW, cache, desired, netns, pod, reservation

CID = "d" * 64
DEAD_IP = "10.0.0.2"
LIVE_IP = "10.0.0.9"


def test_a_netns_read_from_an_oddly_named_dir_weighs_its_own_addresses() -> None:
    ns = replace(netns(CID, addresses=(LIVE_IP,)), path=f"/host-netns/cni-{CID}")
    inv = Inventory(taken_at=NOW, ip_reservations=(reservation(DEAD_IP, CID),),
                    cni_cache=(cache(CID, uid="u-gone", ip=DEAD_IP),), netns=(ns,))
    found = {f.kind: f for f in correlate(inv, desired(pod("live", "u-live", ip=LIVE_IP)), now=NOW)}
    finding = found[Kind.NETNS]
    assert finding.cls is FindingClass.CONFLICT, finding
    assert any(LIVE_IP in e for e in finding.evidence), finding.evidence
