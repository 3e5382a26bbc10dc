"""Residue made by real faults against a real containerd, and what `nodegc clean --apply` does with it.

Faults: a reboot that kills every process and wipes the runtime's state and metadata (the live pods come
back with new sandboxes, the old ones' CNI files and chains stay); a sandbox whose pod left the API while
the runtime still holds it NotReady; a pod deleted from the API while nothing tears its sandbox down; an
IP file left without its cache entry (id only).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from nodegc.sandbox.containerd import SandboxContainerd, SandboxSpec, new_spec, pod_record, write_pods
from nodegc.sandbox.node import NETWORK_NAME, SandboxNode

Runtime = tuple[SandboxNode, SandboxContainerd]


def _nodegc(node: SandboxNode, rt: SandboxContainerd, snap: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    r = node.roots
    roots = ["--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir), "--netns-dir",
             str(r.netns_dir), "--net-ns", str(r.net_ns), "--cni-bin-dir", "/usr/lib/cni",
             "--cni-conf-dir", str(r.cni_conf_dir), "--pods-from", str(snap), "--node", node.node_name,
             "--runtime-endpoint", rt.endpoint, "--min-age", "0", "--pod-log-dir", str(rt.log_root)]
    return subprocess.run([sys.executable, "-m", "nodegc", *argv, *roots], capture_output=True, text=True,
                          timeout=300, check=False)


def _status(rt: SandboxContainerd, sid: str) -> tuple[bool, tuple[str, ...], str | None] | None:
    with rt.client() as c:
        from nodegc.inventory.cri.reading import sandbox_from_status

        reply = c.sandbox_status(sid, verbose=True)
    if reply is None:
        return None
    sb = sandbox_from_status(reply)
    return sb.ready, sb.ips, sb.netns_path


def _ip(rt: SandboxContainerd, sid: str) -> str:
    st = _status(rt, sid)
    assert st is not None and st[1]
    return st[1][0]


def _check_scan(scan: subprocess.CompletedProcess[str], *, old_ips: dict[str, str], new: dict[str, str],
                new_state: dict[str, Any], gone_sid: str, orphan_sid: str) -> None:
    assert scan.returncode in (0, 3), scan.stderr
    doc = json.loads(scan.stdout)
    assert doc["runtime"]["name"] == "containerd" and doc["runtime"]["reachable"]
    by = {(f["kind"], f["id"]): f for f in doc["findings"]}
    for name in ("web", "db"):
        ip_finding = by[("ip_reservation", f"{NETWORK_NAME}/{old_ips[name]}")]
        assert ip_finding["class"] == "leaked_ip", ip_finding
        new_ip = by[("ip_reservation", f"{NETWORK_NAME}/{new_state[name][1][0]}")]
        assert new_ip["class"] in ("in_use", "protected"), new_ip
        assert by[("sandbox", new[name])]["class"] == "in_use"
    assert by[("sandbox", gone_sid)]["class"] == "orphaned_sandbox"
    assert by[("sandbox", orphan_sid)]["class"] == "running_orphan"
    # Nothing of a READY sandbox or of a pod in the API is residue.
    ready = set(new.values()) | {orphan_sid}
    for f in doc["findings"]:
        if f["class"] in ("in_use", "protected", "unknown", "conflict", "running_orphan"):
            continue
        assert f["owner"]["container_id"] not in ready, f



def test_reboot_orphans_and_id_only_files(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    web, db = new_spec("web"), new_spec("db")
    old = {s.name: rt.run_sandbox(s) for s in (web, db)}
    old_ips = {name: _ip(rt, sid) for name, sid in old.items()}
    # A reboot: every process dies, the runtime's state and metadata are gone; the CNI files stay.
    rt.kill_everything()
    rt.wipe_state(metadata=True)
    rt.start()
    # The kubelet brings the live pods back in new sandboxes.
    new = {s.name: rt.run_sandbox(SandboxSpec(s.name, s.namespace, s.uid, attempt=1)) for s in (web, db)}
    new_state = {name: _status(rt, sid) for name, sid in new.items()}
    # A pod deleted from the API while the runtime holds its sandbox NotReady (the kubelet never removed it).
    gone = new_spec("gone")
    gone_sid = rt.run_sandbox(gone)
    rt.stop_sandbox(gone_sid)
    rt.forget_pod(gone)
    outside = tmp_path / "outside.txt"
    outside.write_text("not nodegc's")
    gone_logs = rt.log_root / gone.log_dir_name
    (gone_logs / "planted").symlink_to(outside)  # what a container could leave in its log directory
    # A pod deleted from the API while nothing tore its READY sandbox down.
    orphan = new_spec("orphan")
    orphan_sid = rt.run_sandbox(orphan)
    rt.forget_pod(orphan)
    # One old sandbox's cache entry is lost: its IP file names only a container id.
    results = node.cni_data_dir / "results"
    (results / f"{NETWORK_NAME}-{old['db']}-eth0").unlink()

    snap = write_pods(tmp_path / "pods.json",
                      [pod_record(node, s, new_state[s.name][1][0]) for s in (web, db)])  # type: ignore[index]
    _check_scan(_nodegc(node, rt, snap, "scan", "-o", "json"), old_ips=old_ips, new=new, new_state=new_state,
                gone_sid=gone_sid, orphan_sid=orphan_sid)

    clean = _nodegc(node, rt, snap, "clean", "--apply", "--state-dir", str(tmp_path / "state"), "-o", "json")
    assert clean.returncode in (0, 3), clean.stderr[-3000:]
    with rt.client() as c:
        listed = {sb.id: sb.state for sb in c.list_sandboxes()}
    assert gone_sid not in listed
    why = [line for line in rt.log_path.read_text().splitlines() if orphan_sid[:12] in line][-8:]
    assert orphan_sid in listed and listed[orphan_sid] == 0, (why, clean.stdout[-3000:])  # never stopped by default
    for name, sid in new.items():
        assert _status(rt, sid) == new_state[name]
    for name in ("web", "db"):
        assert not (node.ipam_dir / NETWORK_NAME / old_ips[name]).exists(), name
        assert not list(results.glob(f"*{old[name]}*"))
    for name in ("web", "db"):
        assert (node.ipam_dir / NETWORK_NAME / new_state[name][1][0]).exists()  # type: ignore[index]
    nat = node.node_exec("iptables-save", "-t", "nat")
    for name in ("web", "db"):
        assert old[name] not in nat
        assert new[name] in nat
    # The gone pod's log directory: kept while the runtime held its sandbox, reclaimed once it is gone,
    # without following the symlink a container planted in it.
    again = _nodegc(node, rt, snap, "clean", "--apply", "--state-dir", str(tmp_path / "state"), "-o", "json")
    assert again.returncode in (0, 3), again.stderr[-3000:]
    assert not gone_logs.exists() and outside.read_text() == "not nodegc's", again.stdout[-4000:]
    for spec in (web, db, orphan):
        assert (rt.log_root / spec.log_dir_name).is_dir()


def test_running_orphan_reported_then_stopped_only_on_opt_in(containerd_node: Runtime, tmp_path: Path) -> None:
    import dataclasses

    from nodegc.desired.snapshot import SnapshotSource
    from nodegc.engine.cycle import Engine, EngineSettings
    from nodegc.ledger.store import Ledger
    from nodegc.planning.correlate import CorrelationPolicy
    from nodegc.planning.phases import PhasePolicy
    from nodegc.reclaim.dispatch import HostExecutor
    from nodegc.settings import ScanOptions

    node, rt = containerd_node
    live, orphan = new_spec("live"), new_spec("orphan")
    live_sid, orphan_sid = rt.run_sandbox(live), rt.run_sandbox(orphan)
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, live, _ip(rt, live_sid))])
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0),
                              scan=ScanOptions(min_age_seconds=0, runtime_endpoint=rt.endpoint),
                              running_orphan_grace_seconds=0)
    with Ledger(":memory:") as ledger:
        def engine(s: EngineSettings) -> Engine:
            return Engine(roots=node.roots, source=SnapshotSource(snap, node.node_name), ledger=ledger,
                          executor=HostExecutor(node.roots, runtime_endpoint=rt.endpoint), settings=s)
        report = engine(settings).cycle()
        assert [f.id for f in report.running_orphans] == [orphan_sid]
        assert not report.stopped_orphans
        assert _status(rt, orphan_sid) is not None and _status(rt, orphan_sid)[0]  # type: ignore[index]
        report = engine(dataclasses.replace(settings, stop_running_orphans=True)).cycle()
    assert [(f.id, stopped) for f, stopped, _ in report.stopped_orphans] == [(orphan_sid, True)]
    assert _status(rt, orphan_sid)[0] is False  # type: ignore[index]
    assert _status(rt, live_sid)[0] is True  # type: ignore[index]


def test_firewall_rules_of_dead_attachments(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    from nodegc.sandbox.containerd import containerd_available

    missing = containerd_available()
    if missing:
        import os

        import pytest

        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    node = sandbox_node
    rt = SandboxContainerd(node, firewall=True)
    try:
        rt.start()
        web, db = new_spec("web"), new_spec("db")
        old = {s.name: rt.run_sandbox(s) for s in (web, db)}
        old_ips = {name: _ip(rt, sid) for name, sid in old.items()}
        rt.kill_everything()
        rt.wipe_state(metadata=True)
        rt.start()
        new = {s.name: rt.run_sandbox(SandboxSpec(s.name, s.namespace, s.uid, attempt=1)) for s in (web, db)}
        new_ips = {name: _ip(rt, sid) for name, sid in new.items()}
        # db's old attachment already lost its reservation and cache entry: only its firewall rules are left.
        (node.ipam_dir / NETWORK_NAME / old_ips["db"]).unlink()
        for entry in (node.cni_data_dir / "results").glob(f"*{old['db']}*"):
            entry.unlink()
        snap = write_pods(tmp_path / "pods.json", [pod_record(node, s, new_ips[s.name]) for s in (web, db)])
        rules = node.node_exec("iptables-save", "-t", "filter")
        assert all(f"-s {ip}/32 -j ACCEPT" in rules for ip in [*old_ips.values(), *new_ips.values()])
        scan = _nodegc(node, rt, snap, "scan", "-o", "json")
        doc = json.loads(scan.stdout)
        fw = {f["id"]: f["class"] for f in doc["findings"] if f["kind"] == "firewall_rule"}
        for ip in old_ips.values():
            assert fw[f"filter/CNI-FORWARD/-s {ip}"] == "leaked_firewall_rule", fw
        for ip in new_ips.values():
            assert fw[f"filter/CNI-FORWARD/-s {ip}"] == "in_use", fw
        clean = _nodegc(node, rt, snap, "clean", "--apply", "--state-dir", str(tmp_path / "state"), "-o", "json")
        assert clean.returncode in (0, 3), clean.stderr[-3000:]
        rules = node.node_exec("iptables-save", "-t", "filter")
        for ip in old_ips.values():
            assert f" {ip}/32 " not in rules
        for ip in new_ips.values():
            assert f"-A CNI-FORWARD -s {ip}/32 -j ACCEPT" in rules
            assert f"-A CNI-FORWARD -d {ip}/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT" in rules
        for name, sid in new.items():
            assert _status(rt, sid) == (True, (new_ips[name],), _status(rt, sid)[2])  # type: ignore[index]
    finally:
        rt.close()


def test_a_cni_del_that_keeps_failing_in_the_runtime(containerd_node: Runtime, tmp_path: Path) -> None:
    """The runtime's teardown fails (its CNI configuration broke after ADD): the sandbox stays NotReady and
    its IP stays reserved. nodegc gives the runtime its turn three times, then reclaims the network parts
    directly (with the configuration cached at ADD); once the configuration is fixed the runtime removes
    the sandbox."""
    from nodegc.desired.snapshot import SnapshotSource
    from nodegc.engine.cycle import Engine, EngineSettings
    from nodegc.ledger.store import Ledger
    from nodegc.planning.correlate import CorrelationPolicy
    from nodegc.planning.phases import PhasePolicy
    from nodegc.reclaim.dispatch import HostExecutor
    from nodegc.settings import ScanOptions

    node, rt = containerd_node
    live, gone = new_spec("live"), new_spec("gone")
    live_sid, gone_sid = rt.run_sandbox(live), rt.run_sandbox(gone)
    live_ip, gone_ip = _ip(rt, live_sid), _ip(rt, gone_sid)
    good = node.conflist_path.read_bytes()
    broken = json.loads(good)
    broken["plugins"][0]["type"] = "nodegc-missing-plugin"
    node.conflist_path.write_text(json.dumps(broken))
    import time

    time.sleep(1.5)  # containerd reloads its CNI configuration
    try:
        rt.stop_sandbox(gone_sid)
    except Exception as e:  # the kubelet's own attempt: CNI DEL fails
        assert "failed to destroy network" in str(e)
    rt.forget_pod(gone)
    assert _status(rt, gone_sid)[0] is False  # type: ignore[index]
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, live, live_ip)])
    clock = [time.time()]
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0, add_settle_seconds=0),
                              scan=ScanOptions(min_age_seconds=0, runtime_endpoint=rt.endpoint,
                                               runtime_state_dir=rt.state),
                              max_desired_age_seconds=1e9)
    reservation = node.ipam_dir / NETWORK_NAME / gone_ip
    with Ledger(tmp_path / "ledger.db") as ledger:
        def cycle() -> None:
            clock[0] += 3600  # past every backoff
            # The runtime's state dir configured, as deployments do: its netns files (netns_mounts_under_state_dir)
            # are where the direct teardown proves a veth's peer is the attachment's before deleting it.
            Engine(roots=node.roots, source=SnapshotSource(snap, node.node_name), ledger=ledger,
                   executor=HostExecutor(node.roots, runtime_endpoint=rt.endpoint, runtime_state_dir=rt.state),
                   settings=settings, clock=lambda: clock[0]).cycle()
        for _ in range(3):
            cycle()
            assert reservation.exists(), "the runtime's turn first"
        cycle()
        cycle()
        assert not reservation.exists(), "after three failed turns the parts are reclaimed directly"
        assert _status(rt, live_sid) is not None and _status(rt, live_sid)[1] == (live_ip,)  # type: ignore[index]
        node.conflist_path.write_bytes(good)
        time.sleep(1.5)
        cycle()
    with rt.client() as c:
        assert gone_sid not in {sb.id for sb in c.list_sandboxes()}
    assert (node.ipam_dir / NETWORK_NAME / live_ip).exists()
