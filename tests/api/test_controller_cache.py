"""The controller on its watch-backed caches of pods and EndpointSlices: no cluster-wide lists per pass,
and the same safety as listing (a live GET before each removal, resourceVersion-guarded patches, a stale
or unsynced cache blocks the pass, a slice newer than the pod cache waits)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.kube.cache import ClusterCache
from tests.api.fakeapi import FakeKubeAPI
from tests.api.test_controller import (
    NS,
    SLICE_PATH,
    SLICES,
    Replica,
    endpoint,
    endpointslice,
    pod,
    service,
    slice_addresses,
    writes,
)

POD_LIST = "/api/v1/pods"
SLICE_LIST = f"{SLICES}/endpointslices"


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(bookmark_interval=0.05) as server:
        yield server


@pytest.fixture
def cluster(api: FakeKubeAPI) -> FakeKubeAPI:
    api.add("services", service())
    api.add_pod(pod("live", "10.0.0.5"))
    api.add_pod(pod("done", "10.0.0.7", phase="Succeeded"))
    api.add("endpointslices", endpointslice(
        "api-manual", endpoint("10.0.0.5", "live"), endpoint("10.0.0.6", "gone"), endpoint("10.0.0.7", "done")))
    return api


@pytest.fixture
def leader(kubeconfig: Path) -> Iterator[Replica]:
    r = Replica(kubeconfig, "r1", cache=True)
    assert r.elector.try_acquire_or_renew()
    yield r
    r.close()


def lists(api: FakeKubeAPI, path: str) -> int:
    return len([r for r in api.recorded(method="GET", path_prefix=path, watch=False) if r.path == path])


def test_passes_read_the_caches_not_cluster_lists(cluster: FakeKubeAPI, leader: Replica) -> None:
    api = cluster
    listed_rv = api.get("endpointslices", NS, "api-manual")["metadata"]["resourceVersion"]  # type: ignore[index]
    report = leader.controller.run_once()
    assert report is not None
    assert sorted(s.reason.value for s in report.removed) == ["pod_missing", "pod_terminal"]
    assert slice_addresses(api, "api-manual") == ["10.0.0.5"]
    [patch] = writes(api, SLICES)
    assert patch.body["metadata"] == {"resourceVersion": listed_rv}  # guarded by the cached resourceVersion
    order = [(r.method, r.path) for r in api.requests]
    live_gets = [i for i, (m, p) in enumerate(order) if m == "GET" and p.startswith(f"/api/v1/namespaces/{NS}/pods/")]
    assert live_gets and max(live_gets) < order.index(("PATCH", f"{SLICE_PATH}/api-manual"))
    assert {order[i][1].rsplit("/", 1)[1] for i in live_gets} == {"gone", "done"}

    api.add("endpointslices", endpointslice("api-manual-2", endpoint("10.0.0.9", "gone-too")))
    assert api.wait_for(lambda: _cached(leader, "api-manual-2"))
    cache = leader.controller.cache
    assert cache is not None
    reached = api.resource_version
    assert api.wait_for(lambda: (cache.pods.view().resource_version or 0) >= reached)  # a bookmark
    for _ in range(3):
        report = leader.controller.run_once()
        assert report is not None
    assert slice_addresses(api, "api-manual-2") == []
    # One list of each at start, watches since: no list per pass.
    assert lists(api, POD_LIST) == 1 and lists(api, SLICE_LIST) == 1
    assert api.recorded(path_prefix=POD_LIST, watch=True) and api.recorded(path_prefix=SLICE_LIST, watch=True)


def _cached(r: Replica, name: str) -> bool:
    assert r.controller.cache is not None
    return any(e.name == name for e in r.controller.cache.slices.view().items)


def test_a_stale_cache_blocks_the_pass(cluster: FakeKubeAPI, kubeconfig: Path) -> None:
    r = Replica(kubeconfig, "r1", cache=True)
    try:
        assert r.elector.try_acquire_or_renew()
        assert r.controller.cache is not None
        r.controller.cache.max_age_seconds = 0.5
        r.controller.cache.start()
        cluster.stall_watches(5.0)  # no event, no bookmark: the view ages
        time.sleep(1.0)
        cluster.clear_requests()
        assert r.controller.run_once() is None
        assert writes(cluster, SLICES) == []
        assert slice_addresses(cluster, "api-manual") == ["10.0.0.5", "10.0.0.6", "10.0.0.7"]
        assert 'nodegc_controller_passes_total{result="failed"} 1.0' in r.controller.metrics.render().decode()
    finally:
        r.close()


def test_a_slice_newer_than_the_pod_cache_waits(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """The pod cache lags (its list is old and its watch silent) behind a slice that names a pod created
    just before it: the slice waits, rather than be judged on pods that cannot show that pod."""
    api.add("services", service())
    api.add_pod(pod("live", "10.0.0.5"))
    old_rv = api.resource_version
    api.add_pod(pod("new", "10.0.0.8"))
    api.add("endpointslices", endpointslice(
        "api-manual", endpoint("10.0.0.5", "live"), endpoint("10.0.0.8", "new"), endpoint("10.0.0.6", "gone")))
    api.serve_stale_list(old_rv, resource="pods")
    api.stall_watches(2.0)
    r = Replica(kubeconfig, "r1", cache=True)
    try:
        assert r.elector.try_acquire_or_renew()
        report = r.controller.run_once()
        assert report is not None and report.deferred_slices == 1 and report.stale == []
        assert writes(api, SLICES) == []
        time.sleep(2.5)  # the watches speak again: the pod cache catches up
        report = r.controller.run_once()
        assert report is not None and [s.pod_label for s in report.removed] == [f"{NS}/gone"]
        assert slice_addresses(api, "api-manual") == ["10.0.0.5", "10.0.0.8"]
    finally:
        r.close()


def test_a_follower_keeps_no_caches(cluster: FakeKubeAPI, kubeconfig: Path, leader: Replica) -> None:
    assert leader.controller.run_once() is not None
    follower = Replica(kubeconfig, "r2", cache=True)
    try:
        assert not follower.elector.try_acquire_or_renew()
        cluster.clear_requests()
        assert follower.controller.run_once() is None
        assert follower.controller.cache is not None and not follower.controller.cache.running
        new_lists = [r for r in cluster.requests if r.path in (POD_LIST, SLICE_LIST)
                          and r.at > 0 and r.query.get("watch") != "true" and not r.query.get("resourceVersion")]
        assert new_lists == []  # no new cluster-wide list: only the leader's running watches
    finally:
        follower.close()


def test_an_unidentifiable_pod_makes_its_namespace_prove_nothing(cluster: FakeKubeAPI, leader: Replica) -> None:
    broken = pod("broken", "10.0.0.99")
    del broken["metadata"]["uid"]
    cluster.add_pod(broken)
    report = leader.controller.run_once()
    assert report is not None and report.removed == [] and any("uid" in p for p in report.problems)
    assert slice_addresses(cluster, "api-manual") == ["10.0.0.5", "10.0.0.6", "10.0.0.7"]


def test_the_cache_is_the_reflector_machinery(cluster: FakeKubeAPI, leader: Replica) -> None:
    assert isinstance(leader.controller.cache, ClusterCache)
    assert leader.controller.run_once() is not None
    stats = leader.controller.cache.stats()
    assert stats["pods"]["lists"] == 1 and stats["endpointslices"]["lists"] == 1
