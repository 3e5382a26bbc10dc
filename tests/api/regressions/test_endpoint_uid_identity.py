"""Identity is the UID: a pod recreated under the same name is another pod, never evidence that an endpoint
naming the old UID is alive (a StatefulSet pod recreated with a new UID and a new IP)."""

from __future__ import annotations

from pathlib import Path

from nodegc.model.endpoints import ENDPOINTSLICE_CONTROLLER
from tests.api.fakeapi import FakeKubeAPI
from tests.api.regressions.test_endpoint_false_removal import run_pass
from tests.api.test_controller import endpoint, endpointslice, pod, service, slice_addresses

OPERATOR = "my-operator.example.com"


def test_endpoint_of_a_replaced_pod_is_removed_from_another_managers_slice(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    api.add("services", service())
    api.add_pod(pod("db-0", "10.0.0.23", uid="uid-new"))  # recreated: new UID, new IP
    api.add_pod(pod("db-1", "10.0.0.10"))
    api.add("endpointslices", endpointslice(
        "db-operator", endpoint("10.0.0.9", "db-0", uid="uid-old"), endpoint("10.0.0.10", "db-1"),
        managed_by=OPERATOR))
    report = run_pass(kubeconfig)
    assert report is not None
    assert [(s.pod_label, s.reason.value) for s in report.removed] == [("shop/db-0", "uid_changed")]
    assert slice_addresses(api, "db-operator") == ["10.0.0.10"]
    [patch] = [r for r in api.recorded(method="PATCH") if "endpointslices" in r.path]
    assert patch.body["metadata"]["resourceVersion"]  # guarded by the resourceVersion it was planned on


def test_replaced_pod_in_a_controller_managed_slice_is_only_reported(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add("services", service())
    api.add_pod(pod("db-0", "10.0.0.23", uid="uid-new"))
    api.add("endpointslices", endpointslice(
        "db-abcde", endpoint("10.0.0.9", "db-0", uid="uid-old"), managed_by=ENDPOINTSLICE_CONTROLLER))
    report = run_pass(kubeconfig)
    assert report is not None
    assert [s.reason.value for s in report.reported] == ["uid_changed"]
    assert slice_addresses(api, "db-abcde") == ["10.0.0.9"]


def test_a_pod_replaced_after_the_list_is_confirmed_by_uid_on_the_live_get(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """The list still shows the old incarnation; the live GET shows the new one: removed on the UID, and the
    opposite (the list shows a new UID, the live GET the old one back) keeps it."""
    api.add("services", service())
    api.add_pod(pod("db-0", "10.0.0.9", uid="uid-old"))
    api.add("endpointslices", endpointslice(
        "db-operator", endpoint("10.0.0.9", "db-0", uid="uid-old"), managed_by=OPERATOR))
    api.serve_stale_list([pod("db-0", "10.0.0.23", uid="uid-new")], resource="pods")
    report = run_pass(kubeconfig)  # the list says replaced; the live GET says it is the same pod
    assert report is not None
    assert report.removed == [] and report.kept_on_reverify == 1
    assert slice_addresses(api, "db-operator") == ["10.0.0.9"]

    api.delete_pod("shop", "db-0")
    api.add_pod(pod("db-0", "10.0.0.23", uid="uid-new"))
    report = run_pass(kubeconfig)
    assert report is not None
    assert [s.reason.value for s in report.removed] == ["uid_changed"]
    assert slice_addresses(api, "db-operator") == []
