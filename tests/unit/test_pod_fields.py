"""Pods from the API are decoded into `api.objects.POD_FIELDS`, only the fields nodegc reads: whatever a pod
holds, the shape must give `pod_from_object` (and the resourceVersion checks) exactly what the whole object
gives, the same pod or the same refusal in the same words, or the shape has dropped a field that is read."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodegc.api.objects import POD_FIELDS, object_resource_version, pod_from_object
from nodegc.api.reads import decode
from tests.fuzz.targets import _json, _pod_object
from tests.unit.shapes import assert_shape_gives_the_whole


def _full_pod() -> dict[str, Any]:
    """A pod as a cluster sends it: most of it is never read."""
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": "web-0", "namespace": "shop", "uid": "u-1", "resourceVersion": "42",
            "creationTimestamp": "2026-12-01T10:00:00Z", "generateName": "web-", "labels": {"app": "web"},
            "annotations": {"kubernetes.io/config.hash": "h1", "kubernetes.io/config.mirror": "h1",
                            "kubectl.kubernetes.io/last-applied-configuration": "x" * 500},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "s1"}],
            "managedFields": [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {"nodeName": "n1", "hostNetwork": True, "containers": [{"name": "app", "image": "web:1"}],
                 "volumes": [{"name": "data", "emptyDir": {}}], "tolerations": [{"operator": "Exists"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}],
                   "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": "app", "ready": True, "containerID": "containerd://c1"}]},
    }


def test_a_full_pod_keeps_only_what_is_read() -> None:
    pod = _full_pod()
    shaped = decode(json.dumps(pod).encode(), shape=POD_FIELDS)
    assert shaped == {
        "metadata": {"name": "web-0", "namespace": "shop", "uid": "u-1", "resourceVersion": "42",
                     "creationTimestamp": "2026-12-01T10:00:00Z",
                     "annotations": {"kubernetes.io/config.hash": "h1", "kubernetes.io/config.mirror": "h1"}},
        "spec": {"nodeName": "n1", "hostNetwork": True},
        "status": {"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}]},
    }
    assert pod_from_object(shaped) == pod_from_object(pod)
    assert object_resource_version(shaped) == 42


@pytest.mark.parametrize("body", [b"[1]", b'"pod"', b"null", b"7"])
def test_what_is_not_an_object_is_refused_at_the_top(body: bytes) -> None:
    with pytest.raises(msgspec.ValidationError):
        decode(body, shape=POD_FIELDS)


@st.composite
def _pods(draw: st.DrawFn) -> Any:
    """The fuzz target's pods, with arbitrary JSON mixed into every section the shape selects from."""
    obj = draw(_pod_object())
    if isinstance(obj, dict):
        for section in ("metadata", "spec", "status"):
            if isinstance(obj.get(section), dict) and draw(st.booleans()):
                keys = st.sampled_from(["annotations", "podIPs", "podIP", "labels", "x", "hostNetwork",
                                        "resourceVersion", "uid"])
                extra = draw(st.dictionaries(keys, _json, max_size=2))
                obj[section] = {**obj[section], **extra}
    return obj


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_pods())
def test_the_shape_gives_what_the_whole_pod_gives(obj: Any) -> None:
    assert_shape_gives_the_whole(obj, POD_FIELDS, pod_from_object)
