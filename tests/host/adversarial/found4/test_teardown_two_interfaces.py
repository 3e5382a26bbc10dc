"""The direct teardown keys its work by attachment, not by container: a container with two interfaces
(eth0 on the pod network, net1 on a second bridge + host-local network, two cache entries, two
reservations in two directories, two masquerade chains, two veths) on a real node with the real plugins.
A dead container loses both attachments, a live one keeps both, and a dead container whose net1 address a
live pod now claims keeps both (siblings stand or fall together); the teardown of one attachment alone
touches none of its sibling's parts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.inventory.scanning import scan_node
from nodegc.ledger.store import Ledger
from nodegc.model.findings import FindingClass
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.reclaim.teardown import Teardown, chain_name, identifier, plan, tear_down
from nodegc.sandbox.cni import cache_entry_path, run_conflist, write_cache_entry
from nodegc.sandbox.node import CNI_BIN_DIR, NETWORK_NAME, SandboxNode, SandboxPod

NET_B = "net-b"
SUBNET_B = "10.245.0.0/16"


@dataclass
class Attachment:
    network: str
    ifname: str
    ip: str
    host_veth: str


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SandboxNode]:
    n = SandboxNode.create(tmp_path, plugins=("bridge",))
    try:
        (n.cni_conf_dir / "20-net-b.conflist").write_text(json.dumps(_net_b(n), indent=2))
        yield n
    finally:
        n.close()


def _net_b(node: SandboxNode) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": NET_B, "plugins": [{
        "type": "bridge", "bridge": "cni1", "isGateway": True, "ipMasq": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": SUBNET_B}]], "dataDir": str(node.ipam_dir)},
    }]}


def _add_net1(node: SandboxNode, pod: SandboxPod, *, same_network: bool = False) -> Attachment:
    """What multus (or a runtime with two networks) does: a second ADD into the same sandbox, on net-b or
    on the pod network itself."""
    conflist = node.conflist if same_network else _net_b(node)
    network = str(conflist["name"])
    args = [("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", pod.namespace), ("K8S_POD_NAME", pod.name),
            ("K8S_POD_INFRA_CONTAINER_ID", pod.container_id), ("K8S_POD_UID", pod.uid)]
    result = run_conflist(command="ADD", conflist=conflist, container_id=pod.container_id,
                          netns=str(pod.netns_path), ifname="net1", cni_args=args, capability_args={},
                          cni_path=(CNI_BIN_DIR,), host_netns=node.node_netns)
    assert result is not None
    write_cache_entry(cni_data_dir=node.cni_data_dir, network=network, container_id=pod.container_id,
                      ifname="net1", netns=str(pod.netns_path), conflist_bytes=json.dumps(conflist, indent=2).encode(),
                      cni_args=args, capability_args={}, result=result)
    ip = str(result["ips"][0]["address"]).split("/")[0]
    bridge = conflist["plugins"][0]["bridge"]
    veth = next(str(i["name"]) for i in result["interfaces"] if "sandbox" not in i and i["name"] != bridge)
    return Attachment(network, "net1", ip, veth)


def _two_interfaces(node: SandboxNode, name: str, *, same_network: bool = False) -> tuple[SandboxPod, list[Attachment]]:
    pod = node.add_pod(name, volumes=())
    assert pod.ip and pod.host_veth
    return pod, [Attachment(NETWORK_NAME, "eth0", pod.ip, pod.host_veth),
                 _add_net1(node, pod, same_network=same_network)]


def _parts(node: SandboxNode, pod: SandboxPod, att: Attachment) -> dict[str, bool]:
    rules = node.node_exec("iptables-save", "-t", "nat")
    return {
        "cache entry": cache_entry_path(cni_data_dir=node.cni_data_dir, network=att.network,
                                        container_id=pod.container_id, ifname=att.ifname).exists(),
        "reservation": (node.ipam_dir / att.network / att.ip).exists(),
        "veth": node.link_exists(att.host_veth),
        "chain": f":{chain_name(att.network, pod.container_id)} " in rules,
    }


def _all(node: SandboxNode, pod: SandboxPod, atts: list[Attachment], present: bool) -> None:
    for att in atts:
        assert _parts(node, pod, att) == dict.fromkeys(("cache entry", "reservation", "veth", "chain"), present), (
            pod.name, att.ifname)


def test_both_attachments_of_a_dead_container_go_and_of_a_live_or_kept_one_stay(
    node: SandboxNode, tmp_path: Path
) -> None:
    dead, dead_atts = _two_interfaces(node, "dead")
    live, live_atts = _two_interfaces(node, "live")
    kept, kept_atts = _two_interfaces(node, "kept")
    for pod in (dead, kept):
        node.delete_without_cni_del(pod)
    _all(node, dead, dead_atts, True)
    records = [node.pod_record(live)]
    # A live pod whose status shows the address the kept container holds on net1 (the address was handed
    # out again): which of them is right is not nodegc's to guess, so that attachment is a conflict, and
    # the container's eth0 attachment, dead as it is, stands with it.
    claimer = node.pod_record(live)
    claimer["metadata"].update(name="claimer", uid="7f3c0a52-1d44-4c34-9a57-3a1f0c9f7e11")
    claimer["status"].update(podIP=kept_atts[1].ip, podIPs=[{"ip": kept_atts[1].ip}])
    records.append(claimer)
    snap = tmp_path / "pods.json"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": records}))
    source = SnapshotSource(snap, node.node_name)
    policy = CorrelationPolicy(min_age_seconds=0)

    findings = correlate(scan_node(node.roots), source.fetch(), now=source.fetch().fetched_at, policy=policy)
    of_kept = [f for f in findings if f.owner.container_id == kept.container_id]
    assert of_kept and not any(f.cls.is_residue for f in of_kept), [(f.kind, f.id, f.cls) for f in of_kept]
    assert {f.cls for f in of_kept if f.kind.value == "ip_reservation"} == {FindingClass.CONFLICT,
                                                                            FindingClass.PROTECTED}

    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0), correlation=policy)
    with Ledger(tmp_path / "ledger.db") as ledger:
        report = Engine(roots=node.roots, source=source, ledger=ledger, executor=HostExecutor(node.roots),
                        settings=settings).cycle()
    done = [(i.key, o.detail) for i, o in report.outcomes]
    dels = [d for k, d in done if k.startswith("cni_cache:")]
    assert len(dels) == 2 and all(d.startswith("torn down directly") for d in dels), done
    assert all(o.ok for _, o in report.outcomes), done
    _all(node, dead, dead_atts, False)
    _all(node, live, live_atts, True)
    _all(node, kept, kept_atts, True)
    assert not dead.netns_path.exists() and live.netns_path.exists() and kept.netns_path.exists()


def test_one_attachment_torn_down_alone_leaves_its_siblings_parts(node: SandboxNode) -> None:
    """The executor's own keying: handed eth0 of a container, it releases eth0's reservation, veth and
    chain only, never those of net1 (same container id, another interface and network)."""
    pod, (eth0, net1) = _two_interfaces(node, "half")
    node.delete_without_cni_del(pod)
    inv = scan_node(node.roots)
    [entry] = [e for e in inv.cni_cache if e.container_id == pod.container_id and e.ifname == "eth0"]
    td = plan(entry, roots=node.roots, identify=identifier(node.roots.cni_bin_dirs))
    assert isinstance(td, Teardown), td
    [outcome] = tear_down([td], roots=node.roots)
    assert outcome.ok, outcome.detail
    assert _parts(node, pod, eth0) == {"cache entry": True, "reservation": False, "veth": False, "chain": False}
    assert _parts(node, pod, net1) == dict.fromkeys(("cache entry", "reservation", "veth", "chain"), True)


def test_two_interfaces_on_one_network_each_release_their_own_reservation(node: SandboxNode, tmp_path: Path) -> None:
    """eth0 and net1 both on the pod network: two reservations of one container in one host-local
    directory, told apart by the interface each file names."""
    dead, dead_atts = _two_interfaces(node, "dead", same_network=True)
    live, live_atts = _two_interfaces(node, "live", same_network=True)
    node.delete_without_cni_del(dead)
    _all(node, dead, dead_atts, True)
    source = SnapshotSource(node.write_snapshot(tmp_path / "pods.json"), node.node_name)
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0))
    with Ledger(tmp_path / "ledger.db") as ledger:
        report = Engine(roots=node.roots, source=source, ledger=ledger, executor=HostExecutor(node.roots),
                        settings=settings).cycle()
    done = [(i.key, o.detail) for i, o in report.outcomes]
    assert all(o.ok for _, o in report.outcomes), done
    assert len([k for k, _ in done if k.startswith("cni_cache:")]) == 2, done
    _all(node, dead, dead_atts, False)
    _all(node, live, live_atts, True)
