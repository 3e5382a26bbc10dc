"""nodegc's own teardown of CNI attachments against CNI DEL through the real plugins, on real nodes.

Two sandbox nodes built alike from one seed (same ids, names, addresses): on one the plugins' DEL runs, on
the other nodegc's teardown; the full state of the two nodes (files, mounts, links, every iptables rule)
must end identical. Then the ways it must refuse: a cache file that changed, an address a new container
holds, a device that is no longer the cached one, a chain another container claims, plugins or options
it does not know, a binary that is not the reference plugin.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.hostio import netlink
from nodegc.inventory.scanning import scan_node
from nodegc.ledger.store import Ledger
from nodegc.model.findings import FindingClass
from nodegc.model.resources import CNICacheEntry, Inventory
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.cni_del import cni_del, remove_cache_entry
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.reclaim.teardown import Teardown, chain_name, identifier, ifb_name, plan, tear_down
from nodegc.sandbox.node import NETWORK_NAME, SandboxNode, SandboxPod

PLUGINS = ("bridge", "portmap", "firewall", "tuning", "bandwidth")


@pytest.fixture
def twins(tmp_path: Path) -> Iterator[tuple[SandboxNode, SandboxNode]]:
    a = SandboxNode.create(tmp_path, plugins=PLUGINS, seed=7)
    try:
        b = SandboxNode.create(tmp_path, plugins=PLUGINS, seed=7)
        try:
            yield a, b
        finally:
            b.close()
    finally:
        a.close()


@pytest.fixture
def full_node(tmp_path: Path) -> Iterator[SandboxNode]:
    node = SandboxNode.create(tmp_path, plugins=PLUGINS)
    try:
        yield node
    finally:
        node.close()


def populate(node: SandboxNode) -> list[SandboxPod]:
    node.add_pod("live-0", host_port=8080, bandwidth=True)
    node.add_pod("live-1")
    gone = [node.add_pod(f"gone-{i}", volumes=(), host_port=9000 + i if i % 2 == 0 else None, bandwidth=i < 2)
            for i in range(4)]
    for pod in gone:
        node.delete_without_cni_del(pod)
    return gone


def entry_of(inv: Inventory, pod: SandboxPod) -> CNICacheEntry:
    return next(e for e in inv.cni_cache if e.container_id == pod.container_id)


def teardown_of(node: SandboxNode, entry: CNICacheEntry) -> Teardown:
    td = plan(entry, roots=node.roots, identify=identifier(node.roots.cni_bin_dirs))
    assert isinstance(td, Teardown), td
    return td


def test_teardown_ends_where_cni_del_ends(twins: tuple[SandboxNode, SandboxNode]) -> None:
    ours, theirs = twins
    gone_ours, gone_theirs = populate(ours), populate(theirs)
    assert ours.full_state() == theirs.full_state()
    inv = scan_node(theirs.roots)
    for pod in gone_theirs:
        assert cni_del(entry_of(inv, pod), roots=theirs.roots).ok
    inv = scan_node(ours.roots)
    entries = [entry_of(inv, pod) for pod in gone_ours]
    outcomes = tear_down([teardown_of(ours, e) for e in entries], roots=ours.roots)
    assert all(o.ok and not o.already_gone for o in outcomes), outcomes
    assert all(remove_cache_entry(e).ok for e in entries)
    after_ours, after_theirs = ours.full_state(), theirs.full_state()
    assert after_ours == after_theirs
    # and both really removed what the plugins made: ifb devices, firewall rules, chains, reservations
    links = {name for name, _, _ in after_ours["links"]}
    assert ifb_name(NETWORK_NAME, gone_ours[0].container_id) not in links
    assert ifb_name(NETWORK_NAME, next(iter(ours.pods.values())).container_id) in links  # live-0 keeps its own
    rules = "\n".join(after_ours["iptables"]["iptables-save"])
    for pod in gone_ours:
        assert f"{pod.ip}/32" not in rules
        assert chain_name(NETWORK_NAME, pod.container_id) not in rules
    # a second teardown finds nothing left to do
    again = tear_down([teardown_of(ours, e) for e in entries], roots=ours.roots)
    assert all(o.already_gone for o in again), again


def test_teardown_refuses_a_cache_file_that_changed(full_node: SandboxNode) -> None:
    node = full_node
    gone = populate(node)
    entry = entry_of(scan_node(node.roots), gone[0])
    path = Path(entry.path)
    doc = json.loads(path.read_bytes())
    doc["containerId"] = "f" * 64
    path.write_text(json.dumps(doc))  # same inode, another container
    (outcome,) = tear_down([teardown_of(node, entry)], roots=node.roots)
    assert outcome.identity_changed, outcome
    assert node.link_exists(str(gone[0].host_veth))
    assert node.ipam_path(gone[0]) is not None and node.ipam_path(gone[0]).exists()  # type: ignore[union-attr]


def test_teardown_keeps_what_a_new_container_holds(full_node: SandboxNode) -> None:
    node = full_node
    gone = populate(node)
    victim = gone[1]
    entry = entry_of(scan_node(node.roots), victim)
    # The address went to a new sandbox (another container id) before nodegc acted; so did the veth name.
    reservation = node.ipam_path(victim)
    assert reservation is not None
    reservation.write_text("e" * 64 + "\r\neth0")
    (outcome,) = tear_down([teardown_of(node, entry)], roots=node.roots)
    assert outcome.ok, outcome
    assert reservation.read_text().startswith("e" * 64)
    rules = node.node_exec("iptables-save")
    assert f"-A CNI-FORWARD -s {victim.ip}/32 -j ACCEPT" in rules
    assert f"kept the firewall rules of {victim.ip}" in outcome.detail


def test_teardown_leaves_a_device_that_is_not_the_cached_one(full_node: SandboxNode) -> None:
    node = full_node
    gone = populate(node)
    pod = gone[0]
    entry = entry_of(scan_node(node.roots), pod)
    node.node_exec("ip", "link", "set", "dev", str(pod.host_veth), "address", "02:00:00:00:00:42")
    (outcome,) = tear_down([teardown_of(node, entry)], roots=node.roots)
    assert outcome.ok and f"left {pod.host_veth} alone" in outcome.detail, outcome
    assert node.link_exists(str(pod.host_veth))
    assert not node.link_exists(ifb_name(NETWORK_NAME, pod.container_id))


def test_teardown_leaves_a_chain_another_container_claims(full_node: SandboxNode) -> None:
    node = full_node
    gone = populate(node)
    pod = gone[0]
    entry = entry_of(scan_node(node.roots), pod)
    chain = chain_name(NETWORK_NAME, pod.container_id)
    other = "d" * 64
    node.node_exec("iptables", "-t", "nat", "-F", chain)
    node.node_exec("iptables", "-t", "nat", "-A", chain, "-m", "comment", "--comment",
                   f'name: "{NETWORK_NAME}" id: "{other}"', "-j", "ACCEPT")
    (outcome,) = tear_down([teardown_of(node, entry)], roots=node.roots)
    assert outcome.ok and "left a rule alone" in outcome.detail, outcome
    assert f":{chain}" in node.node_exec("iptables-save", "-t", "nat")


def test_plan_sends_what_it_does_not_know_through_the_plugins(full_node: SandboxNode, tmp_path: Path) -> None:
    node = full_node
    gone = populate(node)
    entry = entry_of(scan_node(node.roots), gone[0])
    identify = identifier(node.roots.cni_bin_dirs)
    assert entry.config_json is not None
    conf = json.loads(entry.config_json)

    def variant(change: dict[str, object], index: int = 0) -> str | Teardown:
        doc = json.loads(json.dumps(conf))
        doc["plugins"][index].update(change)
        return plan(dataclasses.replace(entry, config_json=json.dumps(doc)), roots=node.roots, identify=identify)

    assert isinstance(plan(entry, roots=node.roots, identify=identify), Teardown)
    assert "not one nodegc" in str(variant({"type": "calico"}))
    assert "not known" in str(variant({"macspoofchk": True}))
    assert "keeps its files" in str(variant({"ipam": {**conf["plugins"][0]["ipam"], "dataDir": str(tmp_path)}}))
    assert "not host-local" in str(variant({"ipam": {"type": "dhcp"}}))
    tuning = next(i for i, p in enumerate(conf["plugins"]) if p["type"] == "tuning")
    assert "mac" in str(variant({"mac": "02:00:00:00:00:01"}, tuning))
    firewall = next(i for i, p in enumerate(conf["plugins"]) if p["type"] == "firewall")
    assert "firewalld" in str(variant({"backend": "firewalld"}, firewall))
    # a binary named like a reference plugin that is something else
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in os.listdir(node.roots.cni_bin_dirs[0]):
        (fake / name).symlink_to(node.roots.cni_bin_dirs[0] / name)
    (fake / "portmap").unlink()
    (fake / "portmap").write_text("#!/bin/sh\necho 'my portmap' >&2\n")
    (fake / "portmap").chmod(0o755)
    why = plan(entry, roots=dataclasses.replace(node.roots, cni_bin_dirs=(fake,)), identify=identifier((fake,)))
    assert "does not introduce itself" in str(why)


def test_engine_tears_down_directly_and_keeps_live_pods(full_node: SandboxNode, tmp_path: Path) -> None:
    node = full_node
    populate(node)
    live = {p.uid for p in node.pods.values() if p.in_api}
    source = SnapshotSource(node.write_snapshot(node.root / "pods.json"), node.node_name)
    policy = CorrelationPolicy(min_age_seconds=0)
    before = {f.id for f in correlate(scan_node(node.roots), source.fetch(), now=source.fetch().fetched_at,
                                      policy=policy) if f.owner.uid in live}
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0), correlation=policy)
    with Ledger(tmp_path / "ledger.db") as ledger:
        report = Engine(roots=node.roots, source=source, ledger=ledger, executor=HostExecutor(node.roots),
                        settings=settings).cycle()
    details = [o.detail for i, o in report.outcomes if i.kind.value == "cni_cache"]
    assert details and all(d.startswith("torn down directly") for d in details), details
    findings = correlate(scan_node(node.roots), source.fetch(), now=source.fetch().fetched_at, policy=policy)
    assert [f.id for f in findings if f.cls.is_residue or f.cls is FindingClass.UNKNOWN] == []
    assert {f.id for f in findings if f.owner.uid in live} == before
    rules = node.node_exec("iptables-save")
    for pod in node.pods.values():
        assert (f"-s {pod.ip}/32 -j ACCEPT" in rules) == pod.in_api


def test_links_deleted_together_or_not_at_all(full_node: SandboxNode) -> None:
    node = full_node
    for i in range(3):
        node.node_exec("ip", "link", "add", f"nodegc-g{i}", "type", "bridge")
    with netlink.RtnlSocket.open(node.node_netns) as rtnl:
        links = {link.name: link for link in rtnl.dump_links()[0]}
        mine = [links[f"nodegc-g{i}"] for i in range(3)]
        forged = [*mine[:2], dataclasses.replace(mine[2], mac="02:00:00:00:00:07")]
        answers = netlink.delete_together(rtnl, forged)
        assert all(isinstance(a, netlink.NetlinkError) and "changed" in str(a) for a in answers), answers
        after = {link.name: link for link in rtnl.dump_links()[0]}
        assert all(after[link.name].group == link.group for link in mine)  # groups put back
        assert netlink.delete_together(rtnl, mine) == [None, None, None]
        assert not {link.name for link in rtnl.dump_links()[0]} & {link.name for link in mine}
