"""A pod with a hostPort serves on its node's addresses too (the portmap DNAT of the hostPort), not only on
the address its status shows: a hand-written slice (nobody manages it) may list the node's address with
that pod as targetRef. The sweeper took "an address the pod's status does not show" as proof on such a
slice and removed the live pod's endpoint. Like a hostNetwork pod's, a hostPort pod's endpoint on its own
node's address (status.hostIPs) is kept; another address still is not held."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.api.fakeapi import FakeKubeAPI
from tests.api.regressions.test_endpoint_false_removal import run_pass
from tests.api.test_controller import endpoint, endpointslice, pod, service, slice_addresses

NODE_IP = "192.168.10.4"


def _host_port_pod(name: str, ip: str) -> dict[str, Any]:
    p = pod(name, ip)
    p["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 18080, "protocol": "TCP"}]
    p["status"]["hostIP"] = NODE_IP
    p["status"]["hostIPs"] = [{"ip": NODE_IP}]
    return p


def test_a_host_port_pods_endpoint_on_its_node_address_is_kept(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add("services", service())
    api.add_pod(_host_port_pod("agent-x", "10.244.1.5"))
    api.add("endpointslices", endpointslice("agents-manual", endpoint(NODE_IP, "agent-x")))
    report = run_pass(kubeconfig)
    assert report is not None
    assert report.removed == [], [(s.reason.value, s.detail) for s in report.removed]
    assert slice_addresses(api, "agents-manual") == [NODE_IP]


def test_a_host_port_pods_endpoint_on_another_address_is_removed(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add("services", service())
    api.add_pod(_host_port_pod("agent-x", "10.244.1.5"))
    api.add("endpointslices", endpointslice("agents-manual", endpoint("192.168.10.99", "agent-x")))
    report = run_pass(kubeconfig)
    assert report is not None
    assert [s.reason.value for s in report.removed] == ["address_not_held"]


def test_without_a_host_port_the_node_address_is_not_the_pods(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add("services", service())
    p = _host_port_pod("web", "10.244.1.6")
    del p["spec"]["containers"][0]["ports"]
    api.add_pod(p)
    api.add("endpointslices", endpointslice("web-manual", endpoint(NODE_IP, "web")))
    report = run_pass(kubeconfig)
    assert report is not None
    assert [s.reason.value for s in report.removed] == ["address_not_held"]
