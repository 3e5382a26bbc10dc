"""Parsing pods and snapshot files into the desired state."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodegc.api.objects import pod_from_object
from nodegc.desired.snapshot import SnapshotSource
from nodegc.desired.source import DesiredSource, SourceError
from nodegc.model.pods import OwnerState

FROZEN = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def obj(name: str = "web-0", node: str | None = "node-a", **status: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "nginx"}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": f"uid-{name}",
            "creationTimestamp": "2024-05-01T10:00:00Z",
        },
        "spec": spec,
        "status": status,
    }


# ------------------------------------------------------------------------------------ pod_from_object


def test_running_pod() -> None:
    pod = pod_from_object(obj(phase="Running", podIP="10.1.0.7", podIPs=[{"ip": "10.1.0.7"}]))
    assert (pod.uid, pod.namespace, pod.name, pod.node_name) == ("uid-web-0", "shop", "web-0", "node-a")
    assert pod.phase == "Running"
    assert pod.state is OwnerState.LIVE
    assert pod.pod_ips == ("10.1.0.7",)
    assert pod.created_at == datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    assert pod.created_at.tzinfo is not None
    assert not pod.host_network


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_phases(phase: str) -> None:
    pod = pod_from_object(obj(phase=phase, podIPs=[{"ip": "10.1.0.7"}]))
    assert pod.state is OwnerState.TERMINAL
    assert pod.pod_ips == ("10.1.0.7",)  # still reported; the planner decides what it means


def test_missing_phase_protects() -> None:
    pod = pod_from_object(obj())
    assert pod.phase is None
    assert pod.state is OwnerState.PENDING


def test_a_pod_being_deleted_is_still_its_phase() -> None:
    o = obj(phase="Running")
    o["metadata"]["deletionTimestamp"] = "2024-05-01T11:00:00Z"
    assert pod_from_object(o).state is OwnerState.LIVE


def test_dual_stack_pod_ips_are_normalized() -> None:
    pod = pod_from_object(
        obj(phase="Running", podIP="10.1.0.7", podIPs=[{"ip": "10.1.0.7"}, {"ip": "FD00:0:0::0A"}])
    )
    assert pod.pod_ips == ("10.1.0.7", "fd00::a")


def test_pod_ip_fallback_without_pod_ips() -> None:
    assert pod_from_object(obj(phase="Running", podIP="10.1.0.9")).pod_ips == ("10.1.0.9",)


def test_host_network_and_offset_timestamp() -> None:
    o = obj(phase="Running", podIP="192.168.1.10")
    o["spec"]["hostNetwork"] = True
    o["metadata"]["creationTimestamp"] = "2024-05-01T12:00:00+02:00"
    pod = pod_from_object(o)
    assert pod.host_network
    assert pod.created_at == datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    assert pod.created_at.utcoffset() == timedelta(hours=2)


def test_yaml_datetime_is_accepted() -> None:
    o = obj()
    o["metadata"]["creationTimestamp"] = datetime(2024, 5, 1, 10, 0)  # naive: taken as UTC
    assert pod_from_object(o).created_at == datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    o["metadata"]["creationTimestamp"] = datetime(2024, 5, 1, 10, 0, tzinfo=timezone(timedelta(hours=1)))
    assert pod_from_object(o).created_at == datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


def test_missing_uid_raises() -> None:
    o = obj()
    del o["metadata"]["uid"]
    with pytest.raises(ValueError, match="uid"):
        pod_from_object(o)


def test_missing_name_raises() -> None:
    o = obj()
    o["metadata"]["name"] = ""
    with pytest.raises(ValueError, match="name"):
        pod_from_object(o)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda o: o["status"].update(podIPs=[{"ip": "not-an-ip"}]),
        lambda o: o["status"].update(podIPs="10.0.0.1"),
        lambda o: o["metadata"].update(creationTimestamp="yesterday"),
        lambda o: o["metadata"].update(uid=42),
        lambda o: o.update(spec=["x"]),
    ],
)
def test_malformed_fields_raise(mutate: Any) -> None:
    o = obj(phase="Running")
    mutate(o)
    with pytest.raises(ValueError):
        pod_from_object(o)


# ------------------------------------------------------------------------------------- SnapshotSource


def pod_list(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": list(items)}


def snap(path: Path, node: str | None) -> SnapshotSource:
    return SnapshotSource(path, node, clock=lambda: FROZEN)


def test_snapshot_is_a_desired_source(tmp_path: Path) -> None:
    source: DesiredSource = snap(tmp_path / "x.json", "node-a")
    assert source.name.startswith("snapshot:")


def test_list_json_keeps_this_nodes_pods(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    items = (obj("a", phase="Running"), obj("b", node="node-b"), obj("c", node=None))
    path.write_text(json.dumps(pod_list(*items)))
    state = snap(path, "node-a").fetch()
    assert state.node == "node-a"
    assert [p.name for p in state.pods] == ["a"]
    # The photo's time is the file's, even when the clock says otherwise (here: long before it).
    assert abs(state.fetched_at.timestamp() - path.stat().st_mtime) < 1e-3
    assert state.source == f"snapshot:{path}"


def test_list_yaml(tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text(yaml.safe_dump(pod_list(obj("a", phase="Running"), obj("b", phase="Succeeded"))))
    state = snap(path, "node-a").fetch()
    assert sorted(p.name for p in state.pods) == ["a", "b"]
    assert all(p.created_at == datetime(2024, 5, 1, 10, 0, tzinfo=UTC) for p in state.pods)


def test_a_single_pod_is_refused_in_json_and_yaml(tmp_path: Path) -> None:
    """One pod can never show that another is absent: it is no node's desired state."""
    as_json = tmp_path / "pod.json"
    as_json.write_text(json.dumps(obj("solo", phase="Running"), indent=2))
    as_yaml = tmp_path / "pod.yaml"
    as_yaml.write_text(yaml.safe_dump(obj("solo", phase="Running")))
    for path in (as_json, as_yaml):
        with pytest.raises(SourceError, match="single Pod"):
            snap(path, "node-a").fetch()


def test_empty_list_for_a_given_node(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    path.write_text(json.dumps(pod_list()))
    assert snap(path, "node-a").fetch().pods == ()


def test_node_is_inferred_when_unambiguous(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    path.write_text(json.dumps(pod_list(obj("a"), obj("b"), obj("unscheduled", node=None))))
    state = snap(path, None).fetch()
    assert state.node == "node-a"
    assert sorted(p.name for p in state.pods) == ["a", "b"]


def test_ambiguous_node_asks_for_flag(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    path.write_text(json.dumps(pod_list(obj("a"), obj("b", node="node-b"))))
    with pytest.raises(SourceError, match="--node"):
        snap(path, None).fetch()
    path.write_text(json.dumps(pod_list()))
    with pytest.raises(SourceError, match="--node"):
        snap(path, None).fetch()


def test_malformed_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    path.write_text('{\n  "kind": "List",\n  "items": [,]\n}\n')
    with pytest.raises(SourceError, match=r"not valid JSON: .* line 3 column 13") as info:
        snap(path, "node-a").fetch()
    assert isinstance(info.value.__cause__, json.JSONDecodeError)


def test_malformed_yaml_names_line(tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text("kind: List\nitems:\n  - metadata: {name: [unclosed\n")
    with pytest.raises(SourceError, match=r"not valid YAML: .* line \d+"):
        snap(path, "node-a").fetch()


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("", "empty"),
        ("[1, 2]", "expected a Pod"),
        ('{"kind": "Service", "metadata": {"name": "x"}}', "kind 'Service'"),
        ('{"kind": "List", "items": [{"kind": "Service"}]}', "item #0 is not a Pod"),
        ('{"kind": "List", "items": {"a": 1}}', "items is not a list"),
    ],
)
def test_wrong_shapes(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "pods.json"
    path.write_text(content)
    with pytest.raises(SourceError, match=match):
        snap(path, "node-a").fetch()


def test_unidentifiable_pod_fails_the_snapshot(tmp_path: Path) -> None:
    broken = obj("b")
    del broken["metadata"]["uid"]
    path = tmp_path / "pods.json"
    path.write_text(json.dumps(pod_list(obj("a"), broken)))
    with pytest.raises(SourceError, match=r"pod #1: .*uid") as info:
        snap(path, "node-a").fetch()
    assert isinstance(info.value.__cause__, ValueError)


def test_missing_or_binary_file(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="cannot read"):
        snap(tmp_path / "absent.json", "node-a").fetch()
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SourceError, match="cannot read"):
        snap(path, "node-a").fetch()
