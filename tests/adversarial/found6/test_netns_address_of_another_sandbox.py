"""A namespace no sandbox names is tied to the one container whose host-local reservations hold its
addresses. When that container is a sandbox the runtime lists with another netns path, the namespace is
not that sandbox's: a dead sandbox's namespace (the runtime lost it; its DEL released the address, or
nodegc reclaimed the reservation) still holds an address host-local has since given to a new pod. Tied to
the live sandbox it read as `in_use`, silently, for as long as that pod lives, while its veth answers
ARP for the live pod's address on the same bridge. It is not the live sandbox's, and it holds a READY
sandbox's address: kept and shown as a `conflict`, never `in_use` and never residue."""

from __future__ import annotations

from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory, Kind
from tests.unit.factories import NOW, cache, pod, reservation
from tests.unit.test_runtime_netns import STATE, peer, state_netns
from tests.unit.test_runtime_ownership import run, sandbox, view

IP = "10.0.0.3"


def test_a_netns_holding_the_address_of_a_sandbox_that_names_another_netns_is_not_that_sandboxs() -> None:
    live = state_netns("cni-live", addresses=(IP,), inode=7)
    stale = state_netns("cni-stale", addresses=(IP,), inode=8)
    inv = Inventory(taken_at=NOW, netns=(live, stale), veths=(peer(live.path), peer(stale.path, "veth1")),
                    ip_reservations=(reservation(IP, "s"),), cni_cache=(cache("s", uid="u1", ip=IP),),
                    runtime=view(sandbox("s", "u1", ips=(IP,), netns_path=f"{STATE}/cni-live")))
    out = run(inv, pod("web", "u1", ip=IP))
    assert out[(Kind.NETNS, live.path)].cls is FindingClass.IN_USE
    assert out[(Kind.VETH, "veth0")].cls is FindingClass.IN_USE
    for key in ((Kind.NETNS, stale.path), (Kind.VETH, "veth1")):
        assert out[key].cls is FindingClass.CONFLICT, out[key]
