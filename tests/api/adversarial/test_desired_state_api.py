"""Attacks on the desired state read from the API by the one-shot path (`clean --apply --kubeconfig`).

A lagging API server, cache or proxy answers a list with an old photograph that looks fresh. Every fetch
must prove it is current (the node's Lease, read live right before the list), resourceVersions may never go
backwards across the fetches and the live GETs, and a live GET that finds a pod the list lacks proves the
list out of date. Whatever fails the proof blocks every destructive step, with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nodegc.desired.kube import KubeSource
from nodegc.desired.source import SourceError
from nodegc.engine.cycle import CycleReport, Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.resources import Inventory
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from nodegc.wiring import SourceSettings, make_source
from tests.api.fakeapi import FakeKubeAPI
from tests.unit.factories import NOW, pod_dir

NODE = "node-a"
NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases/{NODE}"


def pod(name: str, *, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                     "creationTimestamp": "2026-11-30T10:00:00Z"},
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "busybox"}]},
        "status": {"phase": phase},
    }


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(kubelets=(NODE,)) as server:
        yield server


def scanner(_roots: Roots, _options: ScanOptions) -> Inventory:
    """Both pods' directories are on the node: `web` is live, and only a stale list can hide it."""
    return Inventory(taken_at=NOW, pod_dirs=(pod_dir("uid-db"), pod_dir("uid-web")))


def one_shot(source: KubeSource | Any) -> tuple[CycleReport, DryRunExecutor]:
    """One cycle as `clean` runs it: K=1, no grace, no minimum age."""
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0))
    executor = DryRunExecutor()
    with Ledger(":memory:") as ledger:
        engine = Engine(roots=Roots(), source=source, ledger=ledger, executor=executor, settings=settings,
                        scanner=scanner)
        return engine.cycle(), executor


def older_photo(api: FakeKubeAPI) -> int:
    """`db` is listed; `web` is created after the photo the lagging cache keeps answering with."""
    api.add_pod(pod("db"))
    stale_rv = api.resource_version
    api.add_pod(pod("web"))
    return stale_rv


def test_clean_refuses_a_stale_list_when_both_fetches_are_stale(api: FakeKubeAPI, kubeconfig: Path) -> None:
    stale_rv = older_photo(api)
    api.serve_stale_list(stale_rv, resource="pods")  # detect
    api.serve_stale_list(stale_rv, resource="pods")  # terminate
    source = make_source(SourceSettings(node=NODE, kubeconfig=kubeconfig))  # what `clean` builds
    try:
        report, executor = one_shot(source)
    finally:
        source.close()  # type: ignore[attr-defined]
    assert executor.actions == []  # web's directory is never planned for removal
    assert report.blocked and report.blocked[0].startswith("source_unavailable")
    assert "older than the node Lease" in report.blocked[0]


def test_a_current_list_still_reclaims(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """The proof costs one GET per fetch and lets a current list act: a dead pod's directory goes."""
    api.add_pod(pod("db"))
    with KubeSource(NODE, kubeconfig=kubeconfig) as source:
        report, executor = one_shot(source)
    assert report.blocked == []
    assert [a for a in executor.actions if "uid-web" in str(a)]
    assert not [a for a in executor.actions if "uid-db" in str(a)]
    lease_gets = api.requests_to(LEASE_PATH)
    lists = [r for r in api.requests_to("/api/v1/pods") if not r.is_watch]
    assert len(lease_gets) == len(lists) == 2
    assert all("resourceVersion" not in r.query for r in lists)  # a consistent (quorum) read each time
    order = [r.path for r in api.requests if r.path in (LEASE_PATH, "/api/v1/pods")]
    assert order == [LEASE_PATH, "/api/v1/pods", LEASE_PATH, "/api/v1/pods"]


def test_a_lagging_proxy_that_also_answers_the_lease_from_the_past_is_refused(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """Lease and list from the same old photograph agree on resourceVersions; the Lease's renewal time,
    written by this node's kubelet on this node's clock, gives the age away."""
    api.stop_kubelet(NODE)
    api.add_pod(pod("db"))
    api.renew_node_lease(NODE, at=datetime.now(UTC) - timedelta(minutes=5))
    api.add_pod(pod("web"))
    with KubeSource(NODE, kubeconfig=kubeconfig) as source:
        with pytest.raises(SourceError, match=r"renewed 300s ago .*not running"):
            source.fetch()
        report, executor = one_shot(source)
    assert executor.actions == [] and report.blocked[0].startswith("source_unavailable")


def test_a_later_list_older_than_an_earlier_one_is_refused(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """resourceVersions never go backwards between the fetches (here the Lease itself is not newer)."""
    api.stop_kubelet(NODE)
    api.renew_node_lease(NODE)
    stale_rv = older_photo(api)
    with KubeSource(NODE, kubeconfig=kubeconfig) as source:
        assert sorted(p.name for p in source.fetch().pods) == ["db", "web"]
        api.serve_stale_list(stale_rv, resource="pods")
        with pytest.raises(SourceError, match=f"at resourceVersion {stale_rv}, older than"):
            source.fetch()


def test_a_live_get_of_a_pod_the_list_lacks_proves_the_list_out_of_date(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """A list that claims a current resourceVersion but misses a pod (a truncating proxy): the live GET
    of that pod, bound to this node, stops everything that would still proceed on the list."""
    api.add_pod(pod("db"))
    api.add_pod(pod("web"))
    with KubeSource(NODE, kubeconfig=kubeconfig) as source:
        api.serve_stale_list([pod("db")], resource="pods", resource_version=api.resource_version + 100)
        assert [p.name for p in source.fetch().pods] == ["db"]
        with pytest.raises(SourceError, match=r"out of date: pod default/web uid uid-web .* the list lacks it"):
            source.get_pod("default", "web")
        assert source.get_pod("default", "gone") is None  # a 404 proves nothing either way


@pytest.mark.parametrize("fault", ["missing", "forbidden"])
def test_without_a_readable_node_lease_the_list_cannot_prove_it_is_current(
    api: FakeKubeAPI, kubeconfig: Path, fault: str
) -> None:
    api.stop_kubelet(NODE)
    api.add_pod(pod("db"))
    if fault == "forbidden":
        api.renew_node_lease(NODE)
        api.fail_next(403, path_prefix="/apis/coordination.k8s.io/")
    with (KubeSource(NODE, kubeconfig=kubeconfig) as source,
          pytest.raises(SourceError,
                        match=r"cannot prove node node-a's pods \(as listed or as watched\) are current")):
        source.fetch()
    assert not [r for r in api.requests_to("/api/v1/pods") if not r.is_watch]  # the list is not even asked for


def test_the_photograph_is_dated_at_the_lease_renewal(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.stop_kubelet(NODE)
    renewed = datetime.now(UTC) - timedelta(seconds=20)
    api.renew_node_lease(NODE, at=renewed)
    api.add_pod(pod("db"))
    with KubeSource(NODE, kubeconfig=kubeconfig) as source:
        state = source.fetch()
    assert abs((state.fetched_at - renewed).total_seconds()) < 0.001


def test_scan_reads_without_the_proof(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """Read only: `scan` lists once and needs no Lease (nothing destructive follows)."""
    source = make_source(SourceSettings(node=NODE, kubeconfig=kubeconfig), prove_current=False)
    api.stop_kubelet(NODE)
    api.add_pod(pod("db"))
    assert [p.name for p in source.fetch().pods] == ["db"]
    assert api.requests_to(LEASE_PATH) == []
