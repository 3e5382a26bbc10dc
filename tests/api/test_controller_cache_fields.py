"""The controller's slice cache keeps what the controller reads of each slice (a `Slice`: identity,
resourceVersion, the two labels, address type, each endpoint's addresses, targetRef and node), not its
whole JSON. A removal must then never patch from the cache: the patch replaces the slice's endpoint list,
and the endpoints it keeps would lose every field the cache left out (conditions, zone, hints). It reads
the slice whole first, and plans and patches on that copy."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodegc.kube.cache import ClusterCache, SliceEntry
from nodegc.model.endpoints import Endpoint, Slice, TargetRef
from tests.api.fakeapi import FakeKubeAPI
from tests.api.test_controller import NS, SLICE_PATH, SLICES, Replica, endpoint, endpointslice, pod, service, writes


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(bookmark_interval=0.05) as server:
        yield server


def rich(ip: str, pod_name: str) -> dict[str, Any]:
    """An endpoint as the endpointslice controller writes one: most of it is never read."""
    out = endpoint(ip, pod_name)
    out.update({"conditions": {"ready": True, "serving": True, "terminating": False}, "zone": "eu-west-1a",
                "hints": {"forZones": [{"name": "eu-west-1a"}]}, "deprecatedTopology": {"k": "v"},
                "hostname": pod_name})
    return out


def rich_slice(name: str, *endpoints: dict[str, Any]) -> dict[str, Any]:
    obj = endpointslice(name, *endpoints)
    obj["metadata"].update({
        "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-12-01T10:00:00Z"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "api", "uid": "svc-1"}],
        "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                           "fieldsV1": {"f:endpoints": {}, "f:ports": {}}}],
        "generation": 3})
    return obj


@pytest.fixture
def cluster(api: FakeKubeAPI) -> FakeKubeAPI:
    api.add("services", service())
    api.add_pod(pod("live", "10.0.0.5"))
    api.add("endpointslices", rich_slice("api-manual", rich("10.0.0.5", "live"), rich("10.0.0.6", "gone")))
    return api


@pytest.fixture
def leader(kubeconfig: Path) -> Iterator[Replica]:
    r = Replica(kubeconfig, "r1", cache=True)
    assert r.elector.try_acquire_or_renew()
    yield r
    r.close()


def _entries(r: Replica) -> list[SliceEntry]:
    cache = r.controller.cache
    assert isinstance(cache, ClusterCache)
    if not cache.running:
        assert cache.start()
    return list(cache.slices.view().items)


def test_the_cache_keeps_only_what_is_read(cluster: FakeKubeAPI, leader: Replica) -> None:
    [entry] = _entries(leader)
    assert not hasattr(entry, "__dict__") and not hasattr(entry, "raw")
    assert entry.problem is None and entry.resource_version is not None
    assert entry.slice == Slice(
        namespace=NS, name="api-manual", resource_version=str(entry.resource_version), address_type="IPv4",
        endpoints=(Endpoint(("10.0.0.5",), TargetRef("Pod", NS, "live", "uid-live"), "n1"),
                   Endpoint(("10.0.0.6",), TargetRef("Pod", NS, "gone", "uid-gone"), "n1")),
        managed_by=None, service_name="api", uid=entry.slice.uid if entry.slice else None)
    assert entry.slice is not None and entry.slice.uid


def test_a_removal_patches_the_slice_read_whole_not_the_cached_fields(cluster: FakeKubeAPI, leader: Replica) -> None:
    whole = copy.deepcopy(cluster.get("endpointslices", NS, "api-manual"))
    assert whole is not None
    report = leader.controller.run_once()
    assert report is not None and [s.endpoint.addresses for s in report.removed] == [("10.0.0.6",)]
    [patch] = writes(cluster, SLICES)
    assert patch.body["endpoints"] == [whole["endpoints"][0]]  # conditions, zone, hints... as the API holds them
    assert patch.body["metadata"] == {"resourceVersion": whole["metadata"]["resourceVersion"]}
    order = [(r.method, r.path) for r in cluster.requests if r.query.get("watch") != "true"]
    assert order.index(("GET", f"{SLICE_PATH}/api-manual")) < order.index(("PATCH", f"{SLICE_PATH}/api-manual"))
    kept = cluster.get("endpointslices", NS, "api-manual")
    assert kept is not None and kept["endpoints"] == [whole["endpoints"][0]]


def test_a_slice_changed_since_the_cache_heard_is_patched_as_it_is_now(
    cluster: FakeKubeAPI, leader: Replica
) -> None:
    _entries(leader)  # the cache holds the slice with two endpoints
    cluster.stall_watches(3.0)  # it hears nothing of what follows
    cluster.add_pod(pod("new", "10.0.0.8"))
    newer = rich("10.0.0.8", "new")
    cluster.update("endpointslices", NS, "api-manual",
                   {"endpoints": [rich("10.0.0.5", "live"), rich("10.0.0.6", "gone"), newer]})
    now = cluster.get("endpointslices", NS, "api-manual")
    assert now is not None
    report = leader.controller.run_once()
    assert report is not None and [s.endpoint.addresses for s in report.removed] == [("10.0.0.6",)]
    [patch] = writes(cluster, SLICES)
    assert patch.body["metadata"] == {"resourceVersion": now["metadata"]["resourceVersion"]}
    assert patch.body["endpoints"] == [now["endpoints"][0], newer]  # the endpoint the cache never saw, whole


def test_a_slice_deleted_since_the_cache_heard_is_left_alone(cluster: FakeKubeAPI, leader: Replica) -> None:
    _entries(leader)
    cluster.stall_watches(3.0)
    cluster.delete("endpointslices", NS, "api-manual")
    report = leader.controller.run_once()
    assert report is not None and report.failures == [] and report.removed == []
    assert writes(cluster, SLICES) == []


def test_a_slice_that_cannot_be_read_is_a_problem_of_each_pass_not_of_the_cache(
    cluster: FakeKubeAPI, leader: Replica
) -> None:
    broken = endpointslice("api-broken", endpoint("10.0.0.9", "gone-too"))
    broken["endpoints"][0]["addresses"] = "10.0.0.9"
    cluster.add("endpointslices", broken)
    _entries(leader)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(_entries(leader)) < 2:
        time.sleep(0.05)
    for _ in range(2):
        report = leader.controller.run_once()
        assert report is not None
        assert any("api-broken" in p and "addresses is not a list" in p for p in report.problems)
        assert [s.endpoint.addresses for s in report.removed] in ([("10.0.0.6",)], [])
    broken_now = cluster.get("endpointslices", NS, "api-broken")
    assert broken_now is not None and broken_now["endpoints"][0]["addresses"] == "10.0.0.9"  # never touched
