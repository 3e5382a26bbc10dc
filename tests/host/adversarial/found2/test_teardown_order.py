"""nodegc's direct teardown releases a dead attachment's reservations first and deletes its firewall
rules afterwards, from a holder table taken while the lock was held. Between the two, host-local's lock
is free: a sandbox created right then (the range is full, so it gets the freed address) has its firewall
rules, which the firewall plugin adds only when they are missing (the dead pod's identical rules are
still there), removed by that later step. The plugins' own DEL runs firewall before bridge/host-local and
so never frees the address before its rules are gone (reclaim/firewall.py states the same order).

The kubelet's ADD is started, in a thread of its own as a runtime's would run, from an audit hook on the
first iptables subprocess the teardown starts: no patching, just the moment a concurrent ADD would land.
It then waits for host-local's lock like any ADD; the teardown holds that lock from its survey of who
holds which address until the release, so the ADD gets the address only after the old rules are gone."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.inventory.scanning import scan_node
from nodegc.ledger.store import Ledger
from nodegc.model.resources import Inventory
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.reclaim.firewall import remove_firewall_rule
from nodegc.reclaim.teardown import Teardown, identifier, plan, tear_down
from nodegc.sandbox.node import SandboxNode, SandboxPod
from nodegc.settings import Roots, ScanOptions

_HOOK: dict[str, Any] = {"armed": None, "fired": False, "busy": False}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    action = _HOOK["armed"]
    if event != "subprocess.Popen" or action is None or _HOOK["fired"] or _HOOK["busy"]:
        return
    if "iptables" not in str(args[0]) and "iptables" not in " ".join(map(str, args[1] or ())):
        return
    _HOOK["busy"] = True
    try:
        action()
        _HOOK["fired"] = True
    finally:
        _HOOK["busy"] = False


sys.addaudithook(_audit)


def _concurrently(node: SandboxNode, born: list[SandboxPod], threads: list[threading.Thread]) -> Callable[[], None]:
    """The action for the hook: a pod's ADD started beside the teardown, as the kubelet would."""
    def start() -> None:
        t = threading.Thread(target=lambda: born.append(node.add_pod("new", volumes=())), daemon=True)
        threads.append(t)
        t.start()
    return start


def _joined(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "the concurrent ADD never finished"


@pytest.fixture
def full_range_node(tmp_path: Path) -> Iterator[SandboxNode]:
    # a /30: the bridge takes .1, so .2 is the only pod address (a range at exhaustion)
    node = SandboxNode.create(tmp_path, plugins=("bridge", "firewall"), subnet="10.99.0.0/30")
    try:
        yield node
    finally:
        _HOOK.update(armed=None, fired=False)
        node.close()


def test_direct_teardown_removes_the_firewall_rules_of_the_sandbox_that_reused_the_address(
        full_range_node: SandboxNode) -> None:
    node = full_range_node
    dead = node.add_pod("gone", volumes=())
    node.delete_without_cni_del(dead)
    entry = next(e for e in scan_node(node.roots).cni_cache if e.container_id == dead.container_id)
    td = plan(entry, roots=node.roots, identify=identifier(node.roots.cni_bin_dirs))
    assert isinstance(td, Teardown), td

    born: list[SandboxPod] = []
    threads: list[threading.Thread] = []
    _HOOK["armed"] = _concurrently(node, born, threads)
    (outcome,) = tear_down([td], roots=node.roots)
    _HOOK["armed"] = None
    _joined(threads)
    assert _HOOK["fired"] and born, "the ADD did not run beside the teardown"
    new = born[0]
    assert new.ip == dead.ip, (new.ip, dead.ip)  # the freed address went to the new sandbox
    assert outcome.ok, outcome

    rules = node.node_exec("iptables-save", "-t", "filter")
    # The live pod's forwarding rules must survive the dead pod's teardown.
    assert f"-A CNI-FORWARD -s {new.ip}/32 -j ACCEPT" in rules, outcome.detail
    assert f"-A CNI-FORWARD -d {new.ip}/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT" in rules


def test_firewall_rule_executor_checks_holders_outside_host_locals_lock(full_range_node: SandboxNode) -> None:
    """The executor of a firewall rule whose address no reservation holds (reclaim/firewall.py) reads the
    reservations, then runs iptables-save/-restore, without host-local's lock: an ADD in between reserves
    the address, its firewall plugin finds the rules present and adds nothing, and the delete that follows
    takes the live pod's rules."""
    node = full_range_node
    dead = node.add_pod("gone", volumes=())
    node.delete_without_cni_del(dead)
    # host-local already released the address (a DEL that stopped after IPAM, or an earlier round of
    # nodegc): only the firewall plugin's rules of the address stay.
    reservation = node.ipam_path(dead)
    assert reservation is not None
    reservation.unlink()
    rules = [r for r in scan_node(node.roots).firewall_rules if r.ip == dead.ip]
    assert len(rules) == 2, rules

    born: list[SandboxPod] = []
    threads: list[threading.Thread] = []
    _HOOK["armed"] = _concurrently(node, born, threads)
    outcome = remove_firewall_rule(rules[0], container_id=dead.container_id, roots=node.roots, timeout=30.0)
    _HOOK["armed"] = None
    _joined(threads)
    assert _HOOK["fired"] and born
    new = born[0]
    assert new.ip == dead.ip, (new.ip, dead.ip)
    dump = node.node_exec("iptables-save", "-t", "filter")
    assert rules[0].rule in dump, f"the live pod {new.ip} lost {rules[0].rule!r}: {outcome}"


def test_engine_cycle_removes_the_firewall_rules_of_the_sandbox_that_reused_the_address(
        tmp_path: Path) -> None:
    """The same through the engine and the host executor (direct teardown, the default): the ADD lands
    after terminate's re-scan, on the first iptables call after the release."""
    # a /29: .2 to .6 for pods, all taken (live pods keep the blast-radius guard content)
    node = SandboxNode.create(tmp_path, plugins=("bridge", "firewall"), subnet="10.99.0.0/29")
    try:
        _engine_case(node, tmp_path)
    finally:
        _HOOK.update(armed=None, fired=False)
        node.close()


def _engine_case(node: SandboxNode, tmp_path: Path) -> None:
    node.add_pod("live-0", volumes=())
    dead = node.add_pod("gone", volumes=())
    for n in range(1, 4):
        node.add_pod(f"live-{n}", volumes=())
    node.delete_without_cni_del(dead)
    source = SnapshotSource(node.write_snapshot(node.root / "pods.json"), node.node_name)
    born: list[SandboxPod] = []
    threads: list[threading.Thread] = []
    calls = {"n": 0}

    def scanner(roots: Roots, options: ScanOptions) -> Inventory:
        inv = scan_node(roots, options)
        calls["n"] += 1
        if calls["n"] == 2:  # terminate's re-scan is done: the next iptables call is the executor's
            _HOOK["armed"] = _concurrently(node, born, threads)
        return inv

    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0))
    with Ledger(tmp_path / "ledger.db") as ledger:
        report = Engine(roots=node.roots, source=source, ledger=ledger, executor=HostExecutor(node.roots),
                        settings=settings, scanner=scanner).cycle()
    _HOOK["armed"] = None
    _joined(threads)
    assert born, (report.blocked, report.sent_back, [(f.kind.value, f.cls.value) for f in report.findings])
    new = born[0]
    assert new.ip == dead.ip
    details = {i.key: o.detail for i, o in report.outcomes}
    assert any(k.startswith("cni_cache:") for k in details), details
    assert f"-A CNI-FORWARD -s {new.ip}/32 -j ACCEPT" in node.node_exec("iptables-save", "-t", "filter"), details
