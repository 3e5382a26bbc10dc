"""A pod list of another node (a snapshot read without --node whose node is inferred from the file, a node
name that matches another node): "none of the listed pods is found on this node" refuses it. But any
`in_use` finding counted as found, and with a runtime socket this node's own pods make such findings
whatever the list says (a READY sandbox's network and, now, its pod's directory and volumes): the wrong
list passed the guard, and what no running sandbox holds became residue, among it the directories of this
node's finished pods, which the kubelet keeps while they exist. Found means a finding whose owner the list
shows."""

from __future__ import annotations

from datetime import timedelta

from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory
from nodegc.model.runtime import RuntimeSandbox, RuntimeView
from nodegc.planning.correlate import correlate
from nodegc.planning.guards import BlastRadius, blast_radius_refusal
from tests.unit.factories import NOW, desired, pod, pod_dir


def sandbox(uid: str, *, ready: bool) -> RuntimeSandbox:
    return RuntimeSandbox(id=(uid * 64)[:64], pod_uid=uid, pod_name=uid, pod_namespace="default", attempt=0,
                          ready=ready, created_at=NOW - timedelta(hours=1), status_read=True)


RUNNING = [f"uid-here-{i}" for i in range(4)]
FINISHED = ["uid-job-done"]
"""A Job's pod that Succeeded and is not deleted yet: its sandbox stopped, its directory kept by the kubelet."""


def here(runtime: bool) -> Inventory:
    view = RuntimeView(endpoint="unix:///run/containerd/containerd.sock", reachable=True, read_at=NOW,
                       sandboxes=(*(sandbox(u, ready=True) for u in RUNNING),
                                  *(sandbox(u, ready=False) for u in FINISHED)))
    return Inventory(taken_at=NOW, pod_dirs=tuple(pod_dir(u, mounted=u in RUNNING) for u in RUNNING + FINISHED),
                     runtime=view if runtime else None)


ELSEWHERE = desired(*(pod(f"other-{i}", f"uid-elsewhere-{i}", ip=f"10.9.0.{i + 2}") for i in range(3)))


def test_another_nodes_list_is_refused_with_a_runtime_too() -> None:
    findings = correlate(here(runtime=True), ELSEWHERE, now=NOW)
    # What the wrong list would have had reclaimed; the runtime's list, which misses the listed pods'
    # sandboxes, is not its whole word: that directory waits for it too.
    waiting = sorted(f.id for f in findings if f.cls is FindingClass.PROTECTED
                     and any("needs the runtime's word" in e for e in f.evidence))
    assert "/kubelet/pods/uid-job-done" in waiting
    assert any(f.cls is FindingClass.IN_USE for f in findings)  # the runtime's word, not the list's
    assert blast_radius_refusal(findings, ELSEWHERE, BlastRadius()) is not None


def test_another_nodes_list_is_refused_without_a_runtime() -> None:
    findings = correlate(here(runtime=False), ELSEWHERE, now=NOW)
    assert blast_radius_refusal(findings, ELSEWHERE, BlastRadius()) is not None


def test_a_list_of_this_node_passes_with_a_runtime() -> None:
    """No false refusal: the list shows this node's running pods (their sandboxes READY)."""
    mine = desired(*(pod(u, u) for u in RUNNING), *(pod(u, u, phase="Succeeded") for u in FINISHED))
    findings = correlate(here(runtime=True), mine, now=NOW)
    assert not [f.id for f in findings if f.cls.is_residue and f.id.startswith("/kubelet/")]
    assert blast_radius_refusal(findings, mine, BlastRadius()) is None
