"""An endpoint whose targetRef uid is a live pod's names that pod, whatever namespace or name the ref gives.

The sweeper looked its pod up by (namespace, name) only, the namespace taken from the slice when the ref
omits it: a hand-written slice in one namespace pointing at a pod of another (a ref without a namespace,
as ObjectReference allows), or a ref whose name is not the pod's, read as "pod does not exist" and the live
pod's endpoint was removed. Identity is the UID: a ref whose uid a listed pod holds is that pod's, kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.api.fakeapi import FakeKubeAPI
from tests.api.regressions.test_endpoint_false_removal import run_pass
from tests.api.test_controller import NS, endpoint, endpointslice, pod, service, slice_addresses

OPERATOR = "my-operator.example.com"


def _in(namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["namespace"] = namespace
    return obj


@pytest.mark.parametrize("name_reused", [False, True], ids=["name_free", "name_reused"])
def test_a_ref_without_namespace_to_a_live_pod_of_another_namespace_is_kept(
    api: FakeKubeAPI, kubeconfig: Path, name_reused: bool
) -> None:
    """The ref leaves out its namespace, so it reads as the slice's; its uid is a pod that lives in another.
    With the name reused by a pod of the slice's namespace, the ref looked like a dead incarnation of it."""
    api.add("services", service())
    if name_reused:
        api.add_pod(pod("db-0", "10.0.0.8", uid="uid-other"))
    api.add_pod(_in("backend", pod("db-0", "10.0.0.9", uid="uid-db")))
    ep = endpoint("10.0.0.9", "db-0", uid="uid-db")
    del ep["targetRef"]["namespace"]
    api.add("endpointslices", endpointslice("db-cross", ep, managed_by=OPERATOR))
    report = run_pass(kubeconfig)
    assert report is not None
    assert report.removed == [], [(s.reason.value, s.detail) for s in report.removed]
    assert slice_addresses(api, "db-cross") == ["10.0.0.9"]


def test_a_ref_whose_name_is_not_its_live_pods_is_kept(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """The uid is the live pod's; the name is another (a writer's mistake, or one the request path reads
    otherwise: `db-0#1` is fetched as `db-0`)."""
    api.add("services", service())
    api.add_pod(pod("db-0", "10.0.0.9", uid="uid-db"))
    for name in ("db-0#1", "db-zero"):
        api.add("endpointslices", endpointslice(f"db-{len(name)}", endpoint("10.0.0.9", name, uid="uid-db"),
                                                managed_by=OPERATOR))
    report = run_pass(kubeconfig)
    assert report is not None
    assert report.removed == [], [(s.reason.value, s.detail) for s in report.removed]
    assert slice_addresses(api, "db-6") == ["10.0.0.9"]
    assert slice_addresses(api, "db-7") == ["10.0.0.9"]


def test_a_dead_uid_is_still_removed(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add("services", service())
    api.add_pod(_in("backend", pod("db-0", "10.0.0.9", uid="uid-db")))
    api.add("endpointslices", endpointslice("db-gone", endpoint("10.0.0.7", "db-1", uid="uid-gone"),
                                            managed_by=OPERATOR))
    report = run_pass(kubeconfig)
    assert report is not None
    assert [s.reason.value for s in report.removed] == ["pod_missing"]
    assert slice_addresses(api, "db-gone") == []
    assert NS == "shop"
