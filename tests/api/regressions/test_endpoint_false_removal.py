"""The controller never removes an endpoint of a live pod: secondary-network addresses of other
managers and hostNetwork pods (a recreated pod with the same address is another pod: see
tests/adversarial/found4/test_endpoint_reused_name.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.api.fakeapi import FakeKubeAPI
from tests.api.test_controller import Replica, endpoint, endpointslice, pod, service, slice_addresses

MULTUS = "multus-endpointslice-controller.npwg.k8s.io"


def run_pass(kubeconfig: Path) -> Any:
    r = Replica(kubeconfig, "r1")
    try:
        assert r.elector.try_acquire_or_renew()
        return r.controller.run_once()
    finally:
        r.close()


def test_multus_secondary_network_endpoint_of_a_live_pod_is_kept(api: FakeKubeAPI, kubeconfig: Path) -> None:
    # multus-service writes slices whose addresses are the pods' net1 IPs (not in status.podIPs)
    api.add("services", service())
    api.add_pod(pod("live", "10.244.1.5"))
    api.add("endpointslices", endpointslice("api-net1", endpoint("192.168.100.5", "live"), managed_by=MULTUS))
    report = run_pass(kubeconfig)
    assert report is not None
    assert [s.reason.value for s in report.removed] == []
    assert slice_addresses(api, "api-net1") == ["192.168.100.5"]


def test_host_network_pod_on_another_node_address_is_kept(api: FakeKubeAPI, kubeconfig: Path) -> None:
    # hostNetwork pod: status.podIPs is the node's InternalIP; the endpoint uses another address of the node
    api.add("services", service())
    p = pod("hostnet", "10.0.0.11")
    p["spec"]["hostNetwork"] = True
    api.add_pod(p)
    api.add("endpointslices", endpointslice("api-manual", endpoint("10.1.0.11", "hostnet")))
    report = run_pass(kubeconfig)
    assert report is not None
    assert slice_addresses(api, "api-manual") == ["10.1.0.11"]

