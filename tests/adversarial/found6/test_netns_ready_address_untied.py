"""A namespace holding a READY sandbox's address is never residue, even when nothing ties it to a
container id. The runtime revision dropped out early for a namespace it could tie to no id (no sandbox's
netns path keyed as its file, no cache entry, no host-local reservation of its addresses: another IPAM),
so the verdict of the rules without the runtime stood: a namespace holding only a terminal pod's address
is `leaked_netns`. A Job's pod is Succeeded while the kubelet has not stopped its sandbox yet (READY, its
netns still its own), and the state dir's netns folder mounted in nodegc's container under another name
(`--netns-dir /host-cri-netns`) keys its files by bare name while the runtime's path keys under the state
dir, so the sandbox's own namespace was taken as a dead one."""

from __future__ import annotations

from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory, Kind, NetnsEntry, VethLink
from tests.unit.factories import NOW, OLD, pod
from tests.unit.test_runtime_ownership import run, sandbox, view

STATE = "/run/containerd/io.containerd.grpc.v1.cri/netns"
IP = "10.0.0.3"


def test_a_netns_holding_a_ready_sandboxs_address_is_not_residue_when_nothing_ties_it() -> None:
    ns = NetnsEntry(name="cni-1", path="/host-cri-netns/cni-1", mounted=True, ns_inode=7, file_inode=3, mtime=OLD,
                    addresses=(IP,), addresses_read=True)
    link = VethLink(name="veth0", index=5, mac=None, master="cni0", peer_netnsid=1, peer_ifindex=2,
                    peer_netns_path=ns.path)
    inv = Inventory(taken_at=NOW, netns=(ns,), veths=(link,),
                    runtime=view(sandbox("job", "u1", ips=(IP,), netns_path=f"{STATE}/cni-1")))
    out = run(inv, pod("job", "u1", phase="Succeeded", ip=IP))
    assert not out[(Kind.NETNS, ns.path)].cls.is_residue, out[(Kind.NETNS, ns.path)]
    assert not out[(Kind.VETH, "veth0")].cls.is_residue, out[(Kind.VETH, "veth0")]


def test_without_the_runtime_the_rules_alone_still_decide() -> None:
    """No READY sandbox holds the address: the terminal pod's namespace is residue as before."""
    ns = NetnsEntry(name="cni-1", path="/host-cri-netns/cni-1", mounted=True, ns_inode=7, file_inode=3, mtime=OLD,
                    addresses=(IP,), addresses_read=True)
    inv = Inventory(taken_at=NOW, netns=(ns,), runtime=view(sandbox("other", "u2", ips=("10.0.0.4",))))
    out = run(inv, pod("job", "u1", phase="Succeeded", ip=IP), pod("web", "u2", ip="10.0.0.4"))
    assert out[(Kind.NETNS, ns.path)].cls is FindingClass.LEAKED_NETNS
