"""A slice whose managed-by label is present but empty was read as one nobody manages, the only kind whose
endpoints lose an address their pod's status does not show (another manager may publish addresses status
never lists: a secondary network's). An empty label names no manager, which is not proof that there is
none: such a slice is treated as another manager's (only a gone, replaced or finished pod's endpoint goes)."""

from __future__ import annotations

from pathlib import Path

from tests.api.fakeapi import FakeKubeAPI
from tests.api.regressions.test_endpoint_false_removal import run_pass
from tests.api.test_controller import endpoint, endpointslice, pod, service, slice_addresses


def test_an_address_not_in_status_is_kept_on_a_slice_with_an_empty_manager(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add("services", service())
    api.add_pod(pod("live", "10.244.1.5"))
    api.add("endpointslices", endpointslice("api-net1", endpoint("192.168.100.5", "live"), managed_by=""))
    report = run_pass(kubeconfig)
    assert report is not None
    assert report.removed == [], [(s.reason.value, s.detail) for s in report.removed]
    assert [s.action.value for s in report.stale] == ["report"]
    assert slice_addresses(api, "api-net1") == ["192.168.100.5"]


def test_a_gone_pods_endpoint_still_goes_from_it(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add("services", service())
    api.add("endpointslices", endpointslice("api-net1", endpoint("192.168.100.6", "gone"), managed_by=""))
    report = run_pass(kubeconfig)
    assert report is not None
    assert [s.reason.value for s in report.removed] == ["pod_missing"]
