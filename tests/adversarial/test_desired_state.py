"""Attacks through the desired state: a photo from the future, another node's finished pods, a filtered
list, one page of a paged list, a pod name no ledger can store. Each must end in a refusal, never in a plan
that reclaims what the photo does not show."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nodegc.desired.snapshot import SnapshotSource
from nodegc.desired.source import SourceError
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.planning.guards import BlastRadius, blast_radius_refusal
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.unit.factories import NOW, pod_dir


def pod(name: str, uid: str, *, node: str | None = "n1", phase: str = "Running") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "jobs", "uid": uid},
            "spec": {"nodeName": node}, "status": {"phase": phase}}


def pod_list(*items: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "", **meta}, "items": list(items)}


def write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


# -- item 2: a photo dated in the future is a broken clock ------------------------------------------


def test_a_pods_file_from_the_future_is_dated_in_the_future(tmp_path: Path) -> None:
    f = write(tmp_path / "pods.json", pod_list(pod("a", "u-a")))
    future = time.time() + 3600
    os.utime(f, (future, future))
    state = SnapshotSource(f, "n1").fetch()
    assert state.fetched_at.timestamp() == pytest.approx(future, abs=1e-3), "clamped to now: looks fresh"


def test_the_engine_refuses_a_pods_file_from_the_future(tmp_path: Path) -> None:
    """The documented "more than 5 s in the future is stale" must fire for snapshots too: with the clamp,
    an hour-ahead file looked as fresh as a file written now, and every pod it lacked was residue."""
    f = write(tmp_path / "pods.json", pod_list(pod("a", "u-a")))
    future = time.time() + 3600
    os.utime(f, (future, future))
    dirs = tuple(pod_dir(f"uid-gone-{i}", mounted=True) for i in range(3)) + (pod_dir("u-a"),)

    def scanner(_roots: Roots, _options: ScanOptions) -> Inventory:
        return Inventory(taken_at=datetime.now(UTC), pod_dirs=dirs)

    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0))
    with Ledger(":memory:") as ledger:
        report = Engine(roots=Roots(), source=SnapshotSource(f, "n1"), ledger=ledger,
                        executor=DryRunExecutor(), settings=settings, scanner=scanner).cycle()
    assert any(b.startswith("stale_source") and "future" in b for b in report.blocked), report.blocked
    assert report.outcomes == []


# -- item 3: terminal pods count for the wrong-node guard -----------------------------------------


def test_another_nodes_finished_jobs_are_not_this_nodes_desired_state() -> None:
    """A list of which nothing is found on this node is refused, finished pods included: before, only
    non-terminal pods counted, so a file of another node's finished Jobs let every live pod's volumes be
    unmounted and its directory removed."""
    here = tuple(pod_dir(f"uid-live-here-{i}", mounted=True) for i in range(6))
    jobs = DesiredState(node="n1", source="test", fetched_at=NOW, pods=tuple(
        Pod(uid=f"uid-job-{i}", namespace="jobs", name=f"job-{i}", node_name="n1", phase="Succeeded")
        for i in range(4)))
    findings = correlate(Inventory(taken_at=NOW, pod_dirs=here), jobs, now=NOW)
    assert sum(f.cls.is_residue for f in findings) == 12
    assert blast_radius_refusal(findings, jobs, BlastRadius()) is not None


def test_finished_pods_that_are_here_still_prove_the_node() -> None:
    """No false refusal: a finished pod whose directory is on this node shows the list is about it."""
    dirs = (pod_dir("uid-job-0"), pod_dir("uid-gone", mounted=True))
    jobs = DesiredState(node="n1", source="test", fetched_at=NOW, pods=(
        Pod(uid="uid-job-0", namespace="jobs", name="job-0", node_name="n1", phase="Succeeded"),))
    findings = correlate(Inventory(taken_at=NOW, pod_dirs=dirs), jobs, now=NOW)
    assert blast_radius_refusal(findings, jobs, BlastRadius()) is None


def test_the_node_is_not_inferred_from_a_file_of_finished_pods(tmp_path: Path) -> None:
    f = write(tmp_path / "pods.json", pod_list(*(pod(f"job-{i}", f"u{i}", node="n2", phase="Succeeded")
                                                 for i in range(3))))
    with pytest.raises(SourceError, match=r"only finished pods.*--node"):
        SnapshotSource(f, None).fetch()


def test_a_list_filtered_to_succeeded_pods_is_refused(tmp_path: Path) -> None:
    """`kubectl get pods --field-selector status.phase=Succeeded -o json` of the right node: every running
    pod is left out and would look absent."""
    f = write(tmp_path / "pods.json", pod_list(pod("job-0", "u0", phase="Succeeded"),
                                               pod("job-1", "u1", phase="Failed")))
    with pytest.raises(SourceError, match="filtered by phase"):
        SnapshotSource(f, "n1").fetch()


def test_a_list_filtered_to_one_phase_other_than_running_is_refused(tmp_path: Path) -> None:
    f = write(tmp_path / "pods.json", pod_list(pod("a", "u0", phase="Pending"), pod("b", "u1", phase="Pending")))
    with pytest.raises(SourceError, match="filtered by phase"):
        SnapshotSource(f, "n1").fetch()


@pytest.mark.parametrize("link", [
    "/api/v1/pods?labelSelector=app%3Dweb",
    "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1%2Cstatus.phase%3DRunning",
    "/api/v1/namespaces/jobs/pods?fieldSelector=status.phase!%3DSucceeded",
])
def test_a_list_whose_selflink_shows_a_selector_is_refused(tmp_path: Path, link: str) -> None:
    f = write(tmp_path / "pods.json", pod_list(pod("a", "u0"), pod("b", "u1"), selfLink=link))
    with pytest.raises(SourceError, match="filtered list"):
        SnapshotSource(f, "n1").fetch()


def test_a_list_filtered_by_node_only_is_the_node(tmp_path: Path) -> None:
    f = write(tmp_path / "pods.json", pod_list(pod("a", "u0"), pod("b", "u1", phase="Succeeded"),
                                               selfLink="/api/v1/pods?fieldSelector=spec.nodeName%3Dn1"))
    assert [p.name for p in SnapshotSource(f, "n1").fetch().pods] == ["a", "b"]


# -- item 4: one page of a paged list --------------------------------------------------------------


@pytest.mark.parametrize("meta", [{"continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzfQ"},
                                  {"remainingItemCount": 250},
                                  {"continue": "", "remainingItemCount": 3},
                                  {"remainingItemCount": "many"}])
def test_a_saved_page_of_a_paged_list_is_refused(tmp_path: Path, meta: dict[str, Any]) -> None:
    f = write(tmp_path / "pods.json", pod_list(pod("a", "u0"), pod("b", "u1"), **meta))
    with pytest.raises(SourceError, match="one page of a paged list"):
        SnapshotSource(f, "n1").fetch()


def test_a_page_in_a_yaml_stream_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "pods.yaml"
    f.write_text("kind: PodList\nmetadata: {continue: abc}\nitems:\n- kind: Pod\n"
                 "  metadata: {name: a, namespace: d, uid: u0}\n  spec: {nodeName: n1}\n")
    with pytest.raises(SourceError, match="one page"):
        SnapshotSource(f, "n1").fetch()


def test_the_last_page_and_a_whole_list_are_accepted(tmp_path: Path) -> None:
    f = write(tmp_path / "pods.json", pod_list(pod("a", "u0"), **{"continue": "", "remainingItemCount": 0}))
    assert len(SnapshotSource(f, "n1").fetch().pods) == 1


# -- identity that no store can keep ---------------------------------------------------------------


def test_a_pod_name_with_a_lone_surrogate_is_refused(tmp_path: Path) -> None:
    """"\\ud800" in JSON decodes to a lone surrogate: such a pod cannot be written to the ledger or printed,
    so it cannot be identified; the snapshot is refused like any other malformed pod."""
    f = tmp_path / "pods.json"
    f.write_text('{"kind": "List", "items": [{"metadata": {"name": "a\\ud800", "namespace": "d", "uid": "u0"},'
                 ' "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}]}')
    with pytest.raises(SourceError, match=r"pod #0: .*not valid Unicode"):
        SnapshotSource(f, "n1").fetch()
