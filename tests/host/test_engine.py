"""The engine on a real sandbox node: reclaim to clean, keep everything live, fail safe, survive SIGKILL."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.inventory.scanning import scan_node
from nodegc.ledger.store import Ledger
from nodegc.model.findings import FindingClass
from nodegc.model.items import Phase
from nodegc.observe.metrics import Metrics
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.planning.phases import PhasePolicy, Resource, resources
from nodegc.reclaim.dispatch import DryRunExecutor, Executor, HostExecutor
from nodegc.sandbox.node import SandboxNode, SandboxPod

ONE_SHOT = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                          correlation=CorrelationPolicy(min_age_seconds=0))


def make_node(node: SandboxNode) -> tuple[list[SandboxPod], list[SandboxPod]]:
    live = [node.add_pod("web-0", host_port=8080), node.add_pod("web-1"), node.add_pod("db-0", volumes=("a", "b")),
            node.add_pod("starting", phase="Pending")]
    gone = [node.add_pod(f"gone-{i}", host_port=9000 + i if i % 2 == 0 else None) for i in range(5)]
    node.delete_without_cni_del(gone[0])
    node.delete_netns_only(gone[1])
    node.delete_leaving_mounts(gone[2])
    node.delete_leaving_dir(gone[3])
    node.terminate(gone[4])
    return live, gone


def snapshot_source(node: SandboxNode) -> SnapshotSource:
    return SnapshotSource(node.write_snapshot(node.root / "pods.json"), node.node_name)


def owned_by(node: SandboxNode, uids: set[str]) -> dict[str, Resource]:
    """Every resource of the node that belongs to one of these pods, by item key."""
    inv = scan_node(node.roots)
    desired = snapshot_source(node).fetch()
    keys = {f"{f.kind.value}:{f.id}" for f in correlate(inv, desired, now=datetime.now(UTC),
                                                         policy=CorrelationPolicy(min_age_seconds=0))
            if f.owner.uid in uids}
    return {k: r for k, r in resources(inv).items() if k in keys}


def residue(node: SandboxNode) -> list[str]:
    desired = snapshot_source(node).fetch()
    findings = correlate(scan_node(node.roots), desired, now=datetime.now(UTC),
                         policy=CorrelationPolicy(min_age_seconds=0))
    return [f"{f.cls.value} {f.id}" for f in findings if f.cls.is_residue or f.cls is FindingClass.UNKNOWN]


def engine(node: SandboxNode, ledger: Ledger, executor: Executor | None = None,
           settings: EngineSettings = ONE_SHOT) -> Engine:
    return Engine(roots=node.roots, source=snapshot_source(node), ledger=ledger,
                  executor=executor or HostExecutor(node.roots), settings=settings)


def test_reclaims_every_class_and_keeps_live_pods(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    node = sandbox_node
    live, gone = make_node(node)
    live_uids = {p.uid for p in live} | {gone[4].uid}  # the terminal pod keeps its directory
    before = owned_by(node, {p.uid for p in live})
    assert residue(node)
    with Ledger(tmp_path / "ledger.db") as ledger:
        report = engine(node, ledger).cycle()
        assert report.blocked == []
        assert all(o.ok for _, o in report.outcomes), [(i.key, o.detail) for i, o in report.outcomes if not o.ok]
        assert residue(node) == []
        assert {i.phase for i in ledger.items().values()} == {Phase.CLOSED}
    assert owned_by(node, {p.uid for p in live}) == before
    assert gone[4].pod_dir.exists() and not gone[3].pod_dir.exists() and not gone[2].pod_dir.exists()
    assert {p.uid for p in node.pods.values() if p.pod_dir.exists()} <= live_uids


def test_agent_waits_for_k_scans_and_grace(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    node = sandbox_node
    node.add_pod("live")
    node.delete_without_cni_del(node.add_pod("gone"))
    clock = [datetime.now(UTC).timestamp()]
    # The clock is simulated; the snapshot file's age is real, so staleness is not what this test is about.
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=3, grace_seconds=100),
                              correlation=CorrelationPolicy(min_age_seconds=0), max_desired_age_seconds=1e6)
    with Ledger(tmp_path / "ledger.db") as ledger:
        source = SnapshotSource(node.write_snapshot(node.root / "pods.json"), node.node_name,
                                clock=lambda: datetime.fromtimestamp(clock[0], UTC))
        eng = Engine(roots=node.roots, source=source, ledger=ledger, executor=HostExecutor(node.roots),
                     settings=settings, clock=lambda: clock[0])
        for step in (0, 10, 20):
            clock[0] += step
            assert eng.cycle().outcomes == []
        assert {i.phase for i in ledger.items().values()} == {Phase.DETECTED}
        clock[0] += 100
        report = eng.cycle()
        assert report.outcomes and all(o.ok for _, o in report.outcomes)
    assert residue(node) == []


def test_recreated_pod_same_name_keeps_new_resources(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    node = sandbox_node
    old = node.add_pod("db-0", namespace="shop", host_port=7000)
    node.delete_without_cni_del(old)
    new = node.add_pod("db-0", namespace="shop", host_port=7000)
    before = owned_by(node, {new.uid})
    with Ledger(tmp_path / "ledger.db") as ledger:
        engine(node, ledger).cycle()
    assert residue(node) == []
    assert owned_by(node, {new.uid}) == before


def test_source_unavailable_blocks_everything(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    node = sandbox_node
    node.delete_without_cni_del(node.add_pod("gone"))
    before = resources(scan_node(node.roots))
    source = snapshot_source(node)
    source.path.unlink()
    with Ledger(tmp_path / "ledger.db") as ledger:
        metrics = Metrics()
        eng = Engine(roots=node.roots, source=source, ledger=ledger, executor=HostExecutor(node.roots),
                     settings=ONE_SHOT, metrics=metrics)
        report = eng.cycle()
    assert report.outcomes == [] and report.blocked and report.blocked[0].startswith("source_unavailable")
    assert 'nodegc_actions_blocked_total{reason="source_unavailable"} 1.0' in metrics.render().decode()
    assert resources(scan_node(node.roots)) == before


def test_empty_pod_list_on_busy_node_blocks(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    node = sandbox_node
    for i in range(3):
        node.add_pod(f"live-{i}")
    before = resources(scan_node(node.roots))
    empty = node.root / "empty.json"
    empty.write_text('{"apiVersion": "v1", "kind": "List", "items": []}')
    with Ledger(tmp_path / "ledger.db") as ledger:
        metrics = Metrics()
        eng = Engine(roots=node.roots, source=SnapshotSource(empty, node.node_name), ledger=ledger,
                     executor=HostExecutor(node.roots), settings=ONE_SHOT, metrics=metrics)
        report = eng.cycle()
    assert report.outcomes == [] and report.blocked[0].startswith("blast_radius")
    assert 'nodegc_actions_blocked_total{reason="blast_radius"} 1.0' in metrics.render().decode()
    assert resources(scan_node(node.roots)) == before


def test_dry_run_changes_nothing(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    make_node(node)
    before = resources(scan_node(node.roots))
    executor = DryRunExecutor()
    with Ledger(":memory:") as ledger:
        report = engine(node, ledger, executor).cycle()
    assert executor.actions and len(executor.actions) == len(report.outcomes)
    assert resources(scan_node(node.roots)) == before


def _clean_argv(node: SandboxNode, state: Path) -> list[str]:
    r = node.roots
    return [sys.executable, "-m", "nodegc", "clean", "--apply", "--pods-from", str(node.root / "pods.json"),
            "--min-age", "0", "--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir),
            "--netns-dir", str(r.netns_dir), "--net-ns", str(r.net_ns), "--cni-bin-dir", "/usr/lib/cni",
            "--state-dir", str(state), "-o", "json"]


FAULT_POINTS = [f"{stage}:{kind}" for stage in ("after_checkpoint", "before_clean", "after_clean", "after_record")
                for kind in ("cni_cache", "ip_reservation", "veth", "netns", "volume_mount", "pod_dir")] + [
    "after_del:cni_cache", "before_clean:cni_cache_file", "before_clean:iptables", "after_clean:iptables",
    "after_record:iptables_chain"]


@pytest.mark.parametrize("fault", FAULT_POINTS)
def test_sigkill_at_each_checkpoint_converges(sandbox_node: SandboxNode, tmp_path: Path, fault: str) -> None:
    node = sandbox_node
    live, _ = make_node(node)
    node.write_snapshot(node.root / "pods.json")
    before = owned_by(node, {p.uid for p in live})
    state = tmp_path / "state"
    crashed = subprocess.run(_clean_argv(node, state), env={**os.environ, "NODEGC_FAULT": fault},
                             capture_output=True, timeout=300, check=False)
    assert crashed.returncode == -9, crashed.stderr.decode()[-2000:]
    for _ in range(3):
        done = subprocess.run(_clean_argv(node, state), capture_output=True, timeout=300, check=False)
        if done.returncode == 0 and not residue(node):
            break
    assert residue(node) == [], done.stdout.decode()[-3000:]
    assert owned_by(node, {p.uid for p in live}) == before
    with Ledger(state / "ledger.db") as ledger:
        assert {i.phase for i in ledger.items().values()} <= {Phase.CLOSED, Phase.RELEASED}


def test_crash_after_del_then_ip_reused_is_never_released(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    node = sandbox_node
    node.add_pod("live")
    old = node.add_pod("old")
    node.delete_without_cni_del(old)
    node.write_snapshot(node.root / "pods.json")
    state = tmp_path / "state"
    crashed = subprocess.run(_clean_argv(node, state), env={**os.environ, "NODEGC_FAULT": "after_del:cni_cache"},
                             capture_output=True, timeout=300, check=False)
    assert crashed.returncode == -9
    # The DEL ran and released the IP; a new pod takes the very same address before nodegc restarts.
    assert old.ip is not None
    last = node.ipam_dir / "k8s-pod-network" / "last_reserved_ip.0"
    prev = old.ip.rsplit(".", 1)
    last.write_text(f"{prev[0]}.{int(prev[1]) - 1}")
    new = node.add_pod("new")
    assert new.ip == old.ip
    before = owned_by(node, {new.uid})
    node.write_snapshot(node.root / "pods.json")
    done = subprocess.run(_clean_argv(node, state), capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout.decode()[-3000:]
    assert owned_by(node, {new.uid}) == before
    assert residue(node) == []


def test_a_del_that_keeps_failing_falls_back_to_direct_reclaim(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    node = sandbox_node
    node.add_pod("live")
    gone = node.add_pod("gone")
    node.delete_without_cni_del(gone)
    # The CNI plugins the sandbox was made with are gone (uninstalled, renamed): every DEL fails.
    (tmp_path / "no-plugins").mkdir()
    roots = dataclasses.replace(node.roots, cni_bin_dirs=(tmp_path / "no-plugins",))
    clock = [datetime.now(UTC).timestamp()]
    settings = dataclasses.replace(ONE_SHOT, max_desired_age_seconds=1e6)
    with Ledger(tmp_path / "ledger.db") as ledger:
        source = SnapshotSource(node.write_snapshot(node.root / "pods.json"), node.node_name)
        eng = Engine(roots=roots, source=source, ledger=ledger, executor=HostExecutor(roots),
                     settings=settings, clock=lambda: clock[0])
        details = []
        for _ in range(4):
            report = eng.cycle()
            details += [o.detail for i, o in report.outcomes if i.kind.value == "cni_cache"]
            clock[0] += 700  # past the backoff
        assert any("CNI DEL failed" in d for d in details)
        assert any("reclaimed directly" in d for d in details)
    assert residue(node) == []
