"""The running-orphan grace against a real containerd: counted across agent restarts (a new engine and a new
ledger handle each cycle, as a crash-looping agent has) on the boot clock, which a step of the wall clock
does not move, and a stop only of the very sandbox judged."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta
from pathlib import Path

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import CycleReport, Engine, EngineSettings
from nodegc.engine.orphans import stop_running_orphan
from nodegc.hostio.clock import BootTime
from nodegc.inventory.cri.reading import sandbox_from_status
from nodegc.ledger.store import Ledger
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.sandbox.containerd import SandboxContainerd, new_spec, pod_record, sandbox_ips, write_pods
from nodegc.sandbox.node import SandboxNode
from nodegc.settings import ScanOptions

Runtime = tuple[SandboxNode, SandboxContainerd]


def _ready(rt: SandboxContainerd, sid: str) -> bool:
    with rt.client() as c:
        reply = c.sandbox_status(sid)
    return reply is not None and reply.status.state == 0


def test_grace_survives_restarts_and_a_stop_checks_the_creation_time(containerd_node: Runtime,
                                                                      tmp_path: Path) -> None:
    node, rt = containerd_node
    live, orphan = new_spec("live"), new_spec("orphan")
    live_sid, orphan_sid = rt.run_sandbox(live), rt.run_sandbox(orphan)
    rt.forget_pod(orphan)  # deleted from the API while nothing tore its sandbox down
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, live, sandbox_ips(rt, live_sid)[0])])
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0),
                              scan=ScanOptions(min_age_seconds=0, runtime_endpoint=rt.endpoint),
                              max_desired_age_seconds=1e9, running_orphan_grace_seconds=600,
                              stop_running_orphans=True)
    clock, boot = [time.time()], [1000.0]

    def restart_and_cycle() -> CycleReport:
        with Ledger(tmp_path / "ledger.db") as ledger:
            return Engine(roots=node.roots, source=SnapshotSource(snap, node.node_name), ledger=ledger,
                          executor=HostExecutor(node.roots, runtime_endpoint=rt.endpoint), settings=settings,
                          clock=lambda: clock[0], boot_clock=lambda: BootTime("test-boot", boot[0])).cycle()

    for step, wall_step in ((0, 0), (300, 0), (0, 86400), (299, 0)):  # the wall clock jumps a day ahead
        clock[0] += step + wall_step
        boot[0] += step
        report = restart_and_cycle()
        assert not report.running_orphans and not report.stopped_orphans, report.blocked
        assert _ready(rt, orphan_sid)

    # What a stop checks besides the live GET: the sandbox must still have the creation time it was judged with.
    with rt.client() as c:
        reply = c.sandbox_status(orphan_sid, verbose=True)
    assert reply is not None
    seen = sandbox_from_status(reply)
    assert seen.created_at is not None
    from nodegc.model.findings import Finding, FindingClass, Owner
    from nodegc.model.pods import OwnerState
    from nodegc.model.resources import Kind

    f = Finding(FindingClass.RUNNING_ORPHAN, Kind.SANDBOX, orphan_sid,
                Owner(uid=orphan.uid, namespace=orphan.namespace, name=orphan.name, container_id=orphan_sid),
                OwnerState.ABSENT, ())
    other = dataclasses.replace(seen, created_at=seen.created_at - timedelta(seconds=30))
    stopped, why = stop_running_orphan(f, endpoint=rt.endpoint, timeout=10.0, get_pod=lambda ns, name: None,
                                       seen=other)
    assert not stopped and "creation time" in why and _ready(rt, orphan_sid)

    clock[0] += 2  # 601 s since it was first seen, over four restarts
    boot[0] += 2
    report = restart_and_cycle()
    assert [x.id for x in report.running_orphans] == [orphan_sid]
    assert [(x.id, ok) for x, ok, _ in report.stopped_orphans] == [(orphan_sid, True)], report.stopped_orphans
    assert not _ready(rt, orphan_sid) and _ready(rt, live_sid)
