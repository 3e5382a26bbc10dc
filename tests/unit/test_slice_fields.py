"""The controller's slice cache decodes EndpointSlices into `api.objects.SLICE_FIELDS`, only the fields it
reads: whatever a slice holds, the shape must give `slice_from_object` (and the resourceVersion checks)
exactly what the whole object gives, the same slice or the same refusal in the same words, or the shape
has dropped a field that is read."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodegc.api.objects import SLICE_FIELDS, object_resource_version, slice_from_object
from nodegc.api.reads import decode
from tests.fuzz.targets import _json
from tests.unit.shapes import assert_shape_gives_the_whole

_FULL: dict[str, Any] = {
    "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
    "metadata": {
        "name": "api-x7k2q", "namespace": "shop", "uid": "s-1", "resourceVersion": "42", "generation": 3,
        "generateName": "api-", "creationTimestamp": "2026-12-01T10:00:00Z",
        "labels": {"kubernetes.io/service-name": "api", "endpointslice.kubernetes.io/managed-by": "m",
                   "app": "web"},
        "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-12-01T10:00:00Z"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "api", "uid": "svc-1"}],
        "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:endpoints": {}}}],
    },
    "addressType": "IPv4",
    "endpoints": [{
        "addresses": ["10.0.0.5"], "conditions": {"ready": True, "serving": True, "terminating": False},
        "hostname": "web-0", "nodeName": "n1", "zone": "eu-west-1a", "hints": {"forZones": [{"name": "z"}]},
        "targetRef": {"kind": "Pod", "namespace": "shop", "name": "web-0", "uid": "u-1", "resourceVersion": "9"},
    }],
    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
}


def test_a_full_slice_keeps_only_what_is_read() -> None:
    shaped = decode(json.dumps(_FULL).encode(), shape=SLICE_FIELDS)
    assert shaped == {
        "metadata": {"name": "api-x7k2q", "namespace": "shop", "uid": "s-1", "resourceVersion": "42",
                     "labels": {"kubernetes.io/service-name": "api", "endpointslice.kubernetes.io/managed-by": "m"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.5"], "nodeName": "n1",
                       "targetRef": {"kind": "Pod", "namespace": "shop", "name": "web-0", "uid": "u-1"}}],
    }
    assert slice_from_object(shaped) == slice_from_object(_FULL)
    assert object_resource_version(shaped) == 42


@pytest.mark.parametrize("body", [b"[1]", b'"slice"', b"null", b"7"])
def test_what_is_not_an_object_is_refused_at_the_top(body: bytes) -> None:
    with pytest.raises(msgspec.ValidationError):
        decode(body, shape=SLICE_FIELDS)


_PLACES = (("metadata",), ("metadata", "labels"), ("endpoints",), ("endpoints", 0),
           ("endpoints", 0, "targetRef"), ())
_KEYS = st.sampled_from(["name", "namespace", "uid", "resourceVersion", "labels", "addressType", "endpoints",
                         "addresses", "targetRef", "nodeName", "kind", "kubernetes.io/service-name",
                         "endpointslice.kubernetes.io/managed-by", "x"])


@st.composite
def _slices(draw: st.DrawFn) -> Any:
    """The full slice with arbitrary JSON put in, or in place of, any section the shape selects from."""
    obj: Any = copy.deepcopy(_FULL)
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(_PLACES))
        parent: Any = obj
        for step in where:
            present = (step in parent if isinstance(parent, dict) and isinstance(step, str)
                       else isinstance(parent, list) and isinstance(step, int) and step < len(parent))
            if present:
                parent = parent[step]
            else:
                break
        if isinstance(parent, dict):
            parent[draw(_KEYS)] = draw(_json)
        elif isinstance(parent, list):
            parent.append(draw(_json))
    return draw(st.one_of(st.just(obj), _json)) if draw(st.integers(0, 9)) == 0 else obj


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_slices())
def test_the_shape_gives_what_the_whole_slice_gives(obj: Any) -> None:
    assert_shape_gives_the_whole(obj, SLICE_FIELDS, slice_from_object)
