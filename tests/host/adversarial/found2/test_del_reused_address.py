"""A dead sandbox's cache entry outlived a DEL that stopped after host-local released its address (the
firewall plugin's DEL had already removed its rules). The address went to a new sandbox, whose pod is
still Pending (no IP in its status yet) while its firewall rules, identical in text, are in place. nodegc
then runs CNI DEL of the dead entry through the plugins: the firewall plugin deletes the rules of the
cached result's address, which are now the new sandbox's. nodegc's own teardown (reclaim/teardown.py)
checks who holds the address before it touches those rules; the path through the plugins does not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.sandbox.node import SandboxNode


@pytest.fixture
def full_range_node(tmp_path: Path) -> Iterator[SandboxNode]:
    node = SandboxNode.create(tmp_path, plugins=("bridge", "firewall"), subnet="10.98.0.0/30")
    try:
        yield node
    finally:
        node.close()


@pytest.mark.parametrize("direct", [False, True], ids=["through-plugins", "direct-teardown"])
def test_cni_del_of_a_stale_entry_keeps_the_firewall_rules_of_the_address_now_reused(
        full_range_node: SandboxNode, tmp_path: Path, direct: bool) -> None:
    node = full_range_node
    dead = node.add_pod("gone", volumes=())
    node.delete_without_cni_del(dead)
    # the DEL that ran: firewall's DEL removed the rules, host-local released the address, then it stopped
    for rule in (f"CNI-FORWARD -s {dead.ip}/32 -j ACCEPT",
                 f"CNI-FORWARD -d {dead.ip}/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"):
        node.node_exec("iptables", "-t", "filter", "-D", *rule.split())
    reservation = node.ipam_path(dead)
    assert reservation is not None
    reservation.unlink()
    new = node.add_pod("new", phase="Pending", volumes=())
    assert new.ip == dead.ip
    rule = f"-A CNI-FORWARD -s {new.ip}/32 -j ACCEPT"
    assert rule in node.node_exec("iptables-save", "-t", "filter")

    source = SnapshotSource(node.write_snapshot(node.root / "pods.json"), node.node_name)
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0))
    with Ledger(tmp_path / "ledger.db") as ledger:
        report = Engine(roots=node.roots, source=source, ledger=ledger,
                        executor=HostExecutor(node.roots, direct_teardown=direct), settings=settings).cycle()
    outcomes = {i.key: o.detail for i, o in report.outcomes}
    assert any(k.startswith("cni_cache:") for k in outcomes), (report.findings, report.sent_back)
    assert rule in node.node_exec("iptables-save", "-t", "filter"), outcomes
