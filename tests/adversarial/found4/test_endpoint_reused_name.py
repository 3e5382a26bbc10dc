"""An endpoint whose targetRef uid is not the uid of the pod that now has that name belongs to a dead pod,
even when the newer pod holds the same address (a StatefulSet pod recreated with a sticky IP): identity is
the UID. Without a uid in the targetRef, or when the pods may be older than the slice, it is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodegc.model.endpoints import ENDPOINTSLICE_CONTROLLER
from tests.api.fakeapi import FakeKubeAPI
from tests.api.regressions.test_endpoint_false_removal import run_pass
from tests.api.test_controller import endpoint, endpointslice, pod, service, slice_addresses

OPERATOR = "my-operator.example.com"


def _without_uid(ep: dict[str, Any]) -> dict[str, Any]:
    del ep["targetRef"]["uid"]
    return ep


def test_a_dead_pods_endpoint_is_removed_though_its_name_and_address_are_reused(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    api.add("services", service())
    api.add_pod(pod("db-0", "10.0.0.9", uid="uid-new"))  # recreated: new UID, the same (sticky) IP
    api.add("endpointslices", endpointslice(
        "db-operator", endpoint("10.0.0.9", "db-0", uid="uid-old"), managed_by=OPERATOR))
    api.add("endpointslices", endpointslice(
        "db-abcde", endpoint("10.0.0.9", "db-0", uid="uid-old"), managed_by=ENDPOINTSLICE_CONTROLLER))
    report = run_pass(kubeconfig)
    assert report is not None
    assert [(s.slice_name, s.reason.value) for s in report.removed] == [("db-operator", "uid_changed")]
    assert "the newer pod holds the same address" in report.removed[0].detail
    assert slice_addresses(api, "db-operator") == []
    # the endpoint slice controller's own slice is only reported: it rewrites the targetRef itself
    assert [(s.slice_name, s.reason.value) for s in report.reported] == [("db-abcde", "uid_changed")]
    assert slice_addresses(api, "db-abcde") == ["10.0.0.9"]


def test_an_endpoint_without_a_uid_is_kept_on_a_reused_name(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add("services", service())
    api.add_pod(pod("db-0", "10.0.0.9", uid="uid-new"))
    api.add("endpointslices", endpointslice(
        "db-operator", _without_uid(endpoint("10.0.0.9", "db-0")), managed_by=OPERATOR))
    report = run_pass(kubeconfig)
    assert report is not None
    assert report.stale == [] and report.removed == []
    assert slice_addresses(api, "db-operator") == ["10.0.0.9"]


def test_a_pod_list_older_than_the_slice_cannot_remove_the_new_incarnations_endpoint(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """The slice already names the new pod (same name, same address); a stale pod list still shows the old
    one. The plan says uid_changed, the live GET (made after the slice was read) shows the endpoint's uid."""
    api.add("services", service())
    api.add_pod(pod("db-0", "10.0.0.9", uid="uid-new"))
    api.add("endpointslices", endpointslice(
        "db-operator", endpoint("10.0.0.9", "db-0", uid="uid-new"), managed_by=OPERATOR))
    api.serve_stale_list([pod("db-0", "10.0.0.9", uid="uid-old")], resource="pods")
    report = run_pass(kubeconfig)
    assert report is not None
    assert report.removed == [] and report.kept_on_reverify == 1
    assert slice_addresses(api, "db-operator") == ["10.0.0.9"]


def _mirror(uid: str, ip: str) -> dict[str, Any]:
    p = pod("etcd-n1", ip, uid=uid)
    p["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "6c1f0f0a5b2e4c8a9d3e7f1b2a4c6e8d"}
    return p


def test_a_recreated_mirror_pod_keeps_the_static_pods_endpoint(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """`kubectl delete pod` on a static pod's mirror: the kubelet makes a new mirror (a new uid) over the
    same running static pod, on the same address. The endpoint's old uid may be that very pod: kept."""
    api.add("services", service())
    api.add_pod(_mirror("uid-mirror-2", "10.0.0.30"))
    api.add("endpointslices", endpointslice(
        "etcd-operator", endpoint("10.0.0.30", "etcd-n1", uid="uid-mirror-1"), managed_by=OPERATOR))
    report = run_pass(kubeconfig)
    assert report is not None
    assert report.stale == [] and report.removed == []
    assert slice_addresses(api, "etcd-operator") == ["10.0.0.30"]


def test_a_mirror_on_another_address_is_another_incarnation(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add("services", service())
    api.add_pod(_mirror("uid-mirror-2", "10.0.0.31"))  # the static pod was restarted: a new sandbox, a new IP
    api.add("endpointslices", endpointslice(
        "etcd-operator", endpoint("10.0.0.30", "etcd-n1", uid="uid-mirror-1"), managed_by=OPERATOR))
    report = run_pass(kubeconfig)
    assert report is not None
    assert [s.reason.value for s in report.removed] == ["uid_changed"]
