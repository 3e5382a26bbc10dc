"""planning.endpoints: which EndpointSlice endpoints are stale, and which of those may be removed."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.api.objects import slice_from_object
from nodegc.model.endpoints import (
    ENDPOINTSLICE_CONTROLLER,
    MANAGED_BY_LABEL,
    MIRRORING_CONTROLLER,
    SERVICE_NAME_LABEL,
    StaleAction,
    StaleReason,
)
from nodegc.model.pods import Pod
from nodegc.planning.endpoints import PodIndex, find_stale, remaining_endpoints

NS = "shop"


def pod(name: str, uid: str | None = None, *, ips: tuple[str, ...] = ("10.0.0.5",),
        phase: str | None = "Running", namespace: str = NS) -> Pod:
    return Pod(uid=uid or f"uid-{name}", namespace=namespace, name=name, node_name="n1", phase=phase,
               pod_ips=ips)


def endpoint(address: str, pod_name: str | None, *, uid: str | None = None, kind: str = "Pod",
             namespace: str | None = NS, **extra: Any) -> dict[str, Any]:
    ep: dict[str, Any] = {"addresses": [address], "conditions": {"ready": True}, **extra}
    if pod_name is not None:
        ref: dict[str, Any] = {"kind": kind, "name": pod_name}
        if namespace is not None:
            ref["namespace"] = namespace
        ref["uid"] = uid if uid is not None else f"uid-{pod_name}"
        ep["targetRef"] = ref
    return ep


def raw_slice(*endpoints: dict[str, Any], managed_by: str | None = None, name: str = "api-abc",
              address_type: str = "IPv4", service: str | None = "api") -> dict[str, Any]:
    labels: dict[str, str] = {}
    if managed_by:
        labels[MANAGED_BY_LABEL] = managed_by
    if service:
        labels[SERVICE_NAME_LABEL] = service
    return {
        "metadata": {"name": name, "namespace": NS, "resourceVersion": "7", "labels": labels},
        "addressType": address_type,
        "endpoints": list(endpoints),
        "ports": [{"port": 80}],
    }


def stale_of(obj: dict[str, Any], *pods: Pod, **index: Any) -> list[tuple[int, StaleReason, StaleAction]]:
    found = find_stale([slice_from_object(obj)], PodIndex.build(pods, **index))
    return [(s.index, s.reason, s.action) for s in found]


def test_live_pod_holding_its_address_is_kept() -> None:
    assert stale_of(raw_slice(endpoint("10.0.0.5", "a")), pod("a")) == []


def test_each_reason() -> None:
    obj = raw_slice(
        endpoint("10.0.0.1", "gone"),
        endpoint("10.0.0.2", "replaced", uid="old-uid"),
        endpoint("10.0.0.3", "done"),
        endpoint("10.0.0.4", "moved"),
        endpoint("10.0.0.5", "live"),
    )
    pods = (pod("replaced", "new-uid", ips=("10.0.0.77",)), pod("done", ips=("10.0.0.3",), phase="Succeeded"),
            pod("moved", ips=("10.0.0.99",)), pod("live"))
    assert stale_of(obj, *pods) == [
        (0, StaleReason.POD_MISSING, StaleAction.REMOVE),
        (1, StaleReason.UID_CHANGED, StaleAction.REMOVE),
        (2, StaleReason.POD_TERMINAL, StaleAction.REMOVE),
        (3, StaleReason.ADDRESS_NOT_HELD, StaleAction.REMOVE),
    ]


def test_failed_pod_is_terminal() -> None:
    assert stale_of(raw_slice(endpoint("10.0.0.5", "a")), pod("a", phase="Failed")) == [
        (0, StaleReason.POD_TERMINAL, StaleAction.REMOVE)]


@pytest.mark.parametrize("manager", [ENDPOINTSLICE_CONTROLLER, MIRRORING_CONTROLLER])
def test_controller_managed_slices_are_report_only(manager: str) -> None:
    assert stale_of(raw_slice(endpoint("10.0.0.1", "gone"), managed_by=manager)) == [
        (0, StaleReason.POD_MISSING, StaleAction.REPORT)]


def test_other_managers_and_unlabelled_slices_are_removable() -> None:
    assert stale_of(raw_slice(endpoint("10.0.0.1", "gone"), managed_by="my-operator.example.com")) == [
        (0, StaleReason.POD_MISSING, StaleAction.REMOVE)]
    assert stale_of(raw_slice(endpoint("10.0.0.1", "gone"))) == [
        (0, StaleReason.POD_MISSING, StaleAction.REMOVE)]


def test_endpoint_without_target_ref_is_kept() -> None:
    assert stale_of(raw_slice(endpoint("10.0.0.1", None))) == []


@pytest.mark.parametrize("kind", ["Node", "VirtualMachineInstance", ""])
def test_target_that_is_not_a_pod_is_kept(kind: str) -> None:
    assert stale_of(raw_slice(endpoint("10.0.0.1", "gone", kind=kind))) == []


def test_namespace_not_listed_is_kept() -> None:
    obj = raw_slice(endpoint("10.0.0.1", "gone"))
    assert stale_of(obj, known_namespaces={"other"}) == []
    assert stale_of(obj, unknown_namespaces={NS}) == []
    assert stale_of(obj, known_namespaces={NS}) == [(0, StaleReason.POD_MISSING, StaleAction.REMOVE)]


def test_pod_listed_twice_is_ambiguous_and_kept() -> None:
    assert stale_of(raw_slice(endpoint("10.0.0.1", "a")), pod("a", ips=("10.0.0.9",)), pod("a")) == []


def test_target_namespace_defaults_to_the_slice_namespace() -> None:
    obj = raw_slice(endpoint("10.0.0.5", "a", namespace=None))
    assert stale_of(obj, pod("a")) == []
    assert stale_of(obj, pod("a", "uid-other", namespace="elsewhere")) == [
        (0, StaleReason.POD_MISSING, StaleAction.REMOVE)]


def test_target_ref_without_uid_skips_the_uid_check() -> None:
    obj = raw_slice(endpoint("10.0.0.5", "a", uid=""))
    assert stale_of(obj, pod("a", "whatever")) == []


@pytest.mark.parametrize("phase", ["Pending", None, "Unknown"])
def test_pod_without_addresses_yet_is_kept(phase: str | None) -> None:
    # The creation race: the endpoint may be written before the pod's status shows the IP.
    p = Pod(uid="uid-a", namespace=NS, name="a", node_name=None, phase=phase, pod_ips=())
    assert stale_of(raw_slice(endpoint("10.0.0.5", "a")), p) == []


def test_address_family_the_pod_has_no_address_of_is_kept() -> None:
    obj = raw_slice(endpoint("fd00::5", "a"), address_type="IPv6")
    assert stale_of(obj, pod("a", ips=("10.0.0.5",))) == []
    assert stale_of(obj, pod("a", ips=("10.0.0.5", "fd00::6"))) == [
        (0, StaleReason.ADDRESS_NOT_HELD, StaleAction.REMOVE)]


def test_addresses_compare_as_ips_not_text() -> None:
    obj = raw_slice(endpoint("fd00:0:0::0005", "a"), address_type="IPv6")
    assert stale_of(obj, pod("a", ips=("fd00::5",))) == []


def test_fqdn_slices_skip_the_address_check_but_not_the_pod_check() -> None:
    obj = raw_slice(endpoint("a.example.com", "a"), endpoint("b.example.com", "b"), address_type="FQDN")
    assert stale_of(obj, pod("a")) == [(1, StaleReason.POD_MISSING, StaleAction.REMOVE)]


def test_deleting_pod_is_not_stale() -> None:
    """A pod being deleted (deletionTimestamp set) is still Running with its address: not stale."""
    p = Pod(uid="uid-a", namespace=NS, name="a", node_name="n1", phase="Running", pod_ips=("10.0.0.5",))
    assert stale_of(raw_slice(endpoint("10.0.0.5", "a")), p) == []


def test_finding_carries_slice_service_and_detail() -> None:
    obj = raw_slice(endpoint("10.0.0.1", "gone"), managed_by=ENDPOINTSLICE_CONTROLLER)
    [stale] = find_stale([slice_from_object(obj)], PodIndex.build([]))
    assert (stale.slice_namespace, stale.slice_name, stale.service_name) == (NS, "api-abc", "api")
    assert stale.managed_by == ENDPOINTSLICE_CONTROLLER
    assert stale.pod_label == f"{NS}/gone"
    assert "does not exist" in stale.detail


def test_remaining_endpoints_keeps_every_field_of_the_others() -> None:
    kept = endpoint("10.0.0.5", "a", zone="z1", hints={"forZones": [{"name": "z1"}]}, futureField=1)
    obj = raw_slice(endpoint("10.0.0.1", "gone"), kept)
    found = find_stale([slice_from_object(obj)], PodIndex.build([pod("a")]))
    assert remaining_endpoints(obj["endpoints"], found) == [kept]


def test_empty_and_missing_endpoint_lists() -> None:
    obj = raw_slice()
    obj["endpoints"] = None
    assert slice_from_object(obj).endpoints == ()


@pytest.mark.parametrize("bad", [
    {"metadata": {"name": "x"}},
    {"metadata": {"name": "x", "namespace": NS}, "endpoints": {"a": 1}},
    {"metadata": {"name": "x", "namespace": NS}, "endpoints": [{"addresses": "10.0.0.1"}]},
    {"metadata": {"name": "x", "namespace": NS},
     "endpoints": [{"addresses": ["10.0.0.1"], "targetRef": "p"}]},
    {"metadata": {"name": "x", "namespace": NS, "labels": ["a"]}},
])
def test_malformed_slices_raise(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        slice_from_object(bad)


# ------------------------------------------------------------------------------------------- properties

_phases = st.sampled_from(["Running", "Pending", "Unknown", None, "Succeeded", "Failed"])
_ips = st.sampled_from(["10.0.0.1", "10.0.0.2", "fd00::1", "fd00::2"])


@settings(max_examples=300, deadline=None)
@given(
    entries=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), _ips, st.sampled_from(["uid-a", "uid-b", ""])),
        max_size=6),
    pods=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["uid-a", "uid-b"]), _phases,
                            st.lists(_ips, max_size=2, unique=True)), max_size=4),
    managed_by=st.sampled_from([None, ENDPOINTSLICE_CONTROLLER, MIRRORING_CONTROLLER, "other"]),
    family=st.sampled_from(["IPv4", "IPv6"]),
)
def test_an_endpoint_of_a_live_pod_holding_its_address_is_never_stale(
    entries: list[tuple[str, str, str]], pods: list[tuple[str, str, str | None, list[str]]],
    managed_by: str | None, family: str,
) -> None:
    obj = raw_slice(*(endpoint(ip, name, uid=uid) for name, ip, uid in entries), managed_by=managed_by,
                    address_type=family)
    index = PodIndex.build([pod(n, u, ips=tuple(ips), phase=ph) for n, u, ph, ips in pods])
    found = find_stale([slice_from_object(obj)], index)
    for stale in found:
        name, ip, uid = entries[stale.index]
        owner = index.pods.get((NS, name))
        if owner is not None and name not in {n for n, _ in index.ambiguous}:
            holds = ip in owner.pod_ips
            same = not uid or uid == owner.uid
            assert not (same and holds and owner.phase not in ("Succeeded", "Failed"))
        if managed_by in (ENDPOINTSLICE_CONTROLLER, MIRRORING_CONTROLLER):
            assert stale.action is StaleAction.REPORT
        elif stale.reason in (StaleReason.POD_MISSING, StaleReason.UID_CHANGED, StaleReason.POD_TERMINAL) or (
                managed_by is None):
            assert stale.action is StaleAction.REMOVE
        else:  # another manager may publish addresses status does not show: only reported
            assert stale.action is StaleAction.REPORT


def test_sticky_ip_of_a_recreated_pod_is_another_pod_and_host_network_addresses_are_not_judged() -> None:
    sticky = raw_slice(endpoint("10.0.0.2", "db-0", uid="old-uid"))
    assert stale_of(sticky, pod("db-0", "new-uid", ips=("10.0.0.2",))) == [
        (0, StaleReason.UID_CHANGED, StaleAction.REMOVE)]
    no_uid = raw_slice(endpoint("10.0.0.2", "db-0", uid=""))
    assert stale_of(no_uid, pod("db-0", "new-uid", ips=("10.0.0.2",))) == []
    host = raw_slice(endpoint("192.168.1.7", "agent"))
    node_pod = dataclasses.replace(pod("agent", ips=("192.168.1.5",)), host_network=True)
    assert stale_of(host, node_pod) == []


def test_address_mismatch_on_another_managers_slice_is_only_reported() -> None:
    obj = raw_slice(endpoint("10.1.0.9", "a"), managed_by="multus-endpointslice-controller.npwg.k8s.io")
    assert stale_of(obj, pod("a", ips=("10.0.0.5",))) == [(0, StaleReason.ADDRESS_NOT_HELD, StaleAction.REPORT)]
