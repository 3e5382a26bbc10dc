"""A pod the API no longer shows while the runtime still runs it: an etcd restored from a backup (the pods
created since are gone from the API; the kubelet has not stopped them yet), a pod force-deleted before its
kubelet stopped it, a list that left it out with no name to ask the API about. Its sandbox is READY: the
network parts were kept (`in_use`, "whatever the API says") and the sandbox itself reported as a running
orphan, never reclaimed; but its pod directory and volumes, tied to the same UID, were residue, so after K
scans and the grace period the volumes of a running pod were unmounted and its directory (disk-backed
emptyDirs with it) removed, long before `--running-orphan-grace` had even reported the sandbox. The
runtime's word keeps them: in use while a sandbox of that UID is READY or has containers not exited."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.findings import Finding, FindingClass
from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory, Kind
from nodegc.model.runtime import RuntimeContainer, RuntimeSandbox, RuntimeView
from nodegc.planning.correlate import correlate
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.unit.factories import NOW, desired, pod, pod_dir

RESTORED = "uid-born-after-the-backup"
"""The pod the restored API no longer has; its sandbox runs on."""
WEB = pod("web", "uid-web", ip="10.0.1.2")


def sandbox(sid: str, uid: str, *, ready: bool = True) -> RuntimeSandbox:
    return RuntimeSandbox(id=sid * 64, pod_uid=uid, pod_name=uid, pod_namespace="default", attempt=0, ready=ready,
                          created_at=NOW - timedelta(hours=1), status_read=True)


def view(*sandboxes: RuntimeSandbox, containers: tuple[RuntimeContainer, ...] = (),
         reachable: bool = True) -> RuntimeView:
    return RuntimeView(endpoint="unix:///run/containerd/containerd.sock", reachable=reachable,
                       error=None if reachable else "connection refused", sandboxes=sandboxes,
                       containers=containers, read_at=NOW)


def node(runtime: RuntimeView | None) -> Inventory:
    return Inventory(taken_at=NOW, pod_dirs=(pod_dir(RESTORED, mounted=True), pod_dir("uid-web", mounted=True)),
                     runtime=runtime)


def kubelet_parts(findings: tuple[Finding, ...] | list[Finding]) -> dict[str, FindingClass]:
    return {f.kind.value: f.cls for f in findings
            if f.owner.uid == RESTORED and f.kind in (Kind.POD_DIR, Kind.VOLUME_MOUNT)}


RUNNING = view(sandbox("a", RESTORED), sandbox("b", "uid-web"))
STARTING_OVER = view(sandbox("a", RESTORED, ready=False), sandbox("b", "uid-web"),
                     containers=(RuntimeContainer(id="c" * 64, sandbox_id="a" * 64, name="db", state="running"),))


@pytest.mark.parametrize("runtime", [RUNNING, STARTING_OVER], ids=["ready", "notready_container_running"])
def test_a_running_pod_absent_from_the_api_keeps_its_directory_and_volumes(runtime: RuntimeView) -> None:
    parts = kubelet_parts(correlate(node(runtime), desired(WEB), now=NOW))
    assert parts == {"pod_dir": FindingClass.IN_USE, "volume_mount": FindingClass.IN_USE}


def test_a_running_pod_the_api_calls_finished_keeps_its_volumes() -> None:
    """A phase the API shows wrong (Succeeded while its containers run): the runtime's word wins."""
    done = pod("restored", RESTORED, phase="Succeeded")
    parts = kubelet_parts(correlate(node(RUNNING), desired(WEB, done), now=NOW))
    assert parts == {"pod_dir": FindingClass.IN_USE, "volume_mount": FindingClass.IN_USE}


@pytest.mark.parametrize("runtime", [
    view(sandbox("a", RESTORED, ready=False), sandbox("b", "uid-web")),
    view(sandbox("b", "uid-web")),
    None,
], ids=["sandbox_stopped", "no_sandbox", "no_runtime"])
def test_no_running_sandbox_leaves_them_residue(runtime: RuntimeView | None) -> None:
    """No false keep: a stopped sandbox (containers exited), none at all, or no runtime to ask."""
    parts = kubelet_parts(correlate(node(runtime), desired(WEB), now=NOW))
    assert parts == {"pod_dir": FindingClass.ORPHANED_POD_DIR, "volume_mount": FindingClass.ORPHANED_VOLUME_MOUNT}


class Restored:
    """The API after the restore: `web` only, proven current (a new history, its own node Lease)."""

    name = "kube"

    def fetch(self) -> DesiredState:
        return desired(WEB)

    def proven(self, *, max_age_seconds: float) -> DesiredState:
        return desired(WEB)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return WEB if name == "web" else None  # the restored pod is 404


def test_the_agent_marks_nothing_of_a_running_pod_the_restored_api_lost() -> None:
    def scanner(_roots: Roots, _opts: ScanOptions) -> Inventory:
        return node(RUNNING)

    with Ledger(":memory:") as ledger:
        engine = Engine(roots=Roots(), source=Restored(), ledger=ledger, executor=DryRunExecutor(),
                        settings=EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0)),
                        clock=NOW.timestamp, scanner=scanner, boot_clock=lambda: None)
        reports = [engine.cycle() for _ in range(3)]
        assert not [o for r in reports for o in r.outcomes], [o for r in reports for o in r.outcomes]
        assert not [k for k in ledger.items(active_only=True) if RESTORED in k]


def test_an_unreachable_runtime_keeps_the_directory_of_a_pod_it_may_still_run() -> None:
    down = view(sandbox("b", "uid-web"), reachable=False)
    parts = kubelet_parts(correlate(node(down), desired(WEB), now=NOW))
    assert not any(cls.is_residue for cls in parts.values()), parts
