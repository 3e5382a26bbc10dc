"""The sandbox node builds what a kubelet + runtime + libcni build, and each residue scenario leaves exactly
the leftovers a real node would."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodegc.sandbox.cni import CNIError, run_conflist
from nodegc.sandbox.node import IFNAME, NETWORK_NAME, SandboxNode, SandboxPod, is_mounted, mounts_under

_JUMP = re.compile(r'id: \\"(?P<cid>[0-9a-f]+)\\"" .*-j (?P<target>CNI-\S+)')


def _chains_of(node: SandboxNode, pod: SandboxPod) -> set[str]:
    """CNI chains the pod's commented rules jump to (POSTROUTING -> CNI-x, HOSTPORT-DNAT -> CNI-DN-x)."""
    save = node.node_exec("iptables-save")
    declared = {line[1:].split()[0] for line in save.splitlines() if line.startswith(":")}
    targets = {m["target"] for m in _JUMP.finditer(save) if m["cid"] == pod.container_id}
    return targets & declared


def network_state(node: SandboxNode, pod: SandboxPod) -> dict[str, bool]:
    ipam = node.ipam_path(pod)
    links = node.node_exec("ip", "-o", "link")
    chains = _chains_of(node, pod)
    return {
        "ipam": ipam is not None and ipam.exists(),
        "cache": node.cache_path(pod).exists(),
        "netns_file": pod.netns_path.exists(),
        "netns_mounted": is_mounted(pod.netns_path),
        "veth": pod.host_veth is not None and f" {pod.host_veth}@" in links,
        "chain": any(not c.startswith("CNI-DN-") and not c.startswith("CNI-HOSTPORT") for c in chains),
        "dnat": any(c.startswith("CNI-DN-") for c in chains),
    }


def kubelet_state(pod: SandboxPod) -> dict[str, bool]:
    return {
        "pod_dir": pod.pod_dir.exists(),
        "volumes_mounted": all(is_mounted(p) for p in pod.volume_paths),
        "any_volume_mounted": any(is_mounted(p) for p in pod.volume_paths),
    }


NETWORK_UP = {
    "ipam": True,
    "cache": True,
    "netns_file": True,
    "netns_mounted": True,
    "veth": True,
    "chain": True,
    "dnat": True,
}
NETWORK_GONE = dict.fromkeys(NETWORK_UP, False)
KUBELET_UP = {"pod_dir": True, "volumes_mounted": True, "any_volume_mounted": True}
KUBELET_GONE = dict.fromkeys(KUBELET_UP, False)


def _snapshot_uids(node: SandboxNode) -> dict[str, dict[str, Any]]:
    return {item["metadata"]["uid"]: item for item in node.pods_snapshot()["items"]}


@pytest.fixture
def three(sandbox_node: SandboxNode) -> tuple[SandboxNode, list[SandboxPod]]:
    node = sandbox_node
    pods = [
        node.add_pod("web-0", host_port=8080),
        node.add_pod("db-0", namespace="prod", volumes=("data", "cache")),
        node.add_pod("job-1", containers=("main", "sidecar")),
    ]
    return node, pods


def test_build_creates_real_artifacts(three: tuple[SandboxNode, list[SandboxPod]]) -> None:
    node, (web, db, job) = three
    assert len({p.ip for p in (web, db, job)}) == 3
    for pod in (web, db, job):
        ipam = node.ipam_path(pod)
        assert ipam is not None
        assert ipam.read_bytes() == f"{pod.container_id}\r\n{IFNAME}".encode()
        assert ipam.parent == node.ipam_dir / NETWORK_NAME

        entry = json.loads(node.cache_path(pod).read_bytes())
        assert entry["kind"] == "cniCacheV1"
        assert entry["containerId"] == pod.container_id
        assert entry["networkName"] == NETWORK_NAME
        assert entry["ifName"] == IFNAME
        assert entry["netns"] == str(pod.netns_path)
        assert json.loads(base64.b64decode(entry["config"])) == node.conflist
        assert ["K8S_POD_UID", pod.uid] in entry["cniArgs"]
        assert ["K8S_POD_INFRA_CONTAINER_ID", pod.container_id] in entry["cniArgs"]
        assert f"{pod.ip}/" in json.dumps(entry["result"])

        assert len(pod.container_id) == 64
        assert pod.netns_path.parent == node.netns_dir
        assert pod.netns_path.name.startswith("cni-")
        expected_net = NETWORK_UP | {"dnat": pod.host_port is not None}
        assert network_state(node, pod) == expected_net, pod.name
        assert kubelet_state(pod) == KUBELET_UP

        d = pod.pod_dir
        assert d == node.kubelet_root / "pods" / pod.uid
        assert (d / "etc-hosts").is_file()
        for v in d.joinpath("volumes", "kubernetes.io~empty-dir").iterdir():
            assert (d / "plugins" / "kubernetes.io~empty-dir" / v.name / "ready").is_file()
        (projected,) = d.joinpath("volumes", "kubernetes.io~projected").iterdir()
        assert re.fullmatch(r"kube-api-access-[a-z0-9]{5}", projected.name)
        for c in pod.containers:
            (restart_file,) = d.joinpath("containers", c).iterdir()
            assert re.fullmatch(r"[0-9a-f]{8}", restart_file.name)

    assert entry_cap(node, web) == {
        "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
    }
    assert len(db.volume_paths) == 3
    assert f" {web.host_veth}@" in node.node_exec("ip", "-o", "link", "show", "master", "cni0")

    items = _snapshot_uids(node)
    assert set(items) == {web.uid, db.uid, job.uid}
    db_item = items[db.uid]
    assert db_item["metadata"] == {
        "name": "db-0",
        "namespace": "prod",
        "uid": db.uid,
        "creationTimestamp": db.created_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    assert db_item["status"] == {
        "phase": "Running",
        "podIP": db.ip,
        "podIPs": [{"ip": db.ip}],
        "hostIP": node.host_ip,
    }
    assert items[job.uid]["spec"] == {
        "nodeName": node.node_name,
        "containers": [{"name": "main"}, {"name": "sidecar"}],
    }

    roots = node.roots
    assert roots.kubelet_root == node.kubelet_root
    assert roots.net_ns == node.node_netns
    assert roots.cni_bin_dirs == (Path("/usr/lib/cni"),)
    assert (roots.cni_conf_dir / "10-sandbox.conflist").is_file()
    assert roots.proc_root == Path("/proc")


def entry_cap(node: SandboxNode, pod: SandboxPod) -> object:
    return json.loads(node.cache_path(pod).read_bytes())["capabilityArgs"]


Scenario = Callable[[SandboxNode, SandboxPod], None]

SCENARIOS: list[tuple[str, Scenario, bool, dict[str, bool], dict[str, bool]]] = [
    (
        "delete_without_cni_del",
        SandboxNode.delete_without_cni_del,
        False,
        NETWORK_UP,
        KUBELET_GONE,
    ),
    (
        "delete_netns_only",
        SandboxNode.delete_netns_only,
        False,
        NETWORK_UP | {"netns_file": False, "netns_mounted": False, "veth": False},
        KUBELET_GONE,
    ),
    ("delete_leaving_mounts", SandboxNode.delete_leaving_mounts, False, NETWORK_GONE, KUBELET_UP),
    (
        "delete_leaving_dir",
        SandboxNode.delete_leaving_dir,
        False,
        NETWORK_GONE,
        KUBELET_UP | {"volumes_mounted": False, "any_volume_mounted": False},
    ),
    ("terminate", SandboxNode.terminate, True, NETWORK_UP, KUBELET_UP),
    ("delete_cleanly", SandboxNode.delete_cleanly, False, NETWORK_GONE, KUBELET_GONE),
]


@pytest.mark.parametrize(
    ("scenario", "in_api", "net", "kubelet"),
    [pytest.param(s, a, n, k, id=name) for name, s, a, n, k in SCENARIOS],
)
def test_residue_scenario(
    three: tuple[SandboxNode, list[SandboxPod]],
    scenario: Scenario,
    in_api: bool,
    net: dict[str, bool],
    kubelet: dict[str, bool],
) -> None:
    node, (web, db, job) = three
    scenario(node, web)

    assert web.in_api is in_api
    assert network_state(node, web) == net
    assert kubelet_state(web) == kubelet
    if kubelet["pod_dir"]:
        assert (web.pod_dir / "etc-hosts").is_file()
    items = _snapshot_uids(node)
    assert (web.uid in items) is in_api
    if in_api:
        assert items[web.uid]["status"]["phase"] == "Succeeded"
        assert items[web.uid]["status"]["podIP"] == web.ip, "a terminal pod keeps its IP in status"
    for other in (db, job):
        assert network_state(node, other) == NETWORK_UP | {"dnat": False}
        assert kubelet_state(other) == KUBELET_UP
        assert other.uid in items


def test_delete_cleanly_finishes_any_partial_teardown(three: tuple[SandboxNode, list[SandboxPod]]) -> None:
    node, (web, db, job) = three
    node.delete_without_cni_del(web)
    node.delete_leaving_mounts(db)
    node.terminate(job, phase="Failed")
    for pod in (web, db, job):
        node.delete_cleanly(pod)
        assert network_state(node, pod) == NETWORK_GONE
        assert kubelet_state(pod) == KUBELET_GONE
    assert node.pods_snapshot()["items"] == []
    assert "CNI-DN-" not in node.node_exec("iptables-save")


def test_recreate_same_name_gets_new_identity(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    node = sandbox_node
    first = node.add_pod("web-0", host_port=8080)
    node.delete_cleanly(first)
    second = node.add_pod("web-0", host_port=8080)
    assert second.uid != first.uid
    assert second.container_id != first.container_id
    assert network_state(node, second) == NETWORK_UP
    snap = json.loads(node.write_snapshot(tmp_path / "pods.json").read_text())
    assert snap["kind"] == "List"
    assert [i["metadata"]["uid"] for i in snap["items"]] == [second.uid]


def test_pending_pod_has_no_ip_in_status(sandbox_node: SandboxNode) -> None:
    pod = sandbox_node.add_pod("starting", phase="Pending")
    (item,) = sandbox_node.pods_snapshot()["items"]
    assert item["status"]["phase"] == "Pending"
    assert "podIP" not in item["status"]
    ipam = sandbox_node.ipam_path(pod)
    assert ipam is not None
    assert ipam.exists(), "the reservation exists before the status shows it"


def test_close_leaves_nothing(tmp_path: Path) -> None:
    node = SandboxNode.create(tmp_path)
    web = node.add_pod("web-0", host_port=8080)
    node.add_pod("db-0")
    node.delete_leaving_mounts(web)
    root = node.root
    assert len(mounts_under(root)) > 5
    node.close()
    assert mounts_under(root) == []
    assert not root.exists()
    node.close()


def test_plugin_error_is_raised_with_its_message(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    with pytest.raises(CNIError, match="bridge ADD failed"):
        run_conflist(
            command="ADD",
            conflist=node.conflist,
            container_id="abc",
            netns=str(node.root / "no-such-netns"),
            ifname=IFNAME,
            cni_args=[],
            capability_args={},
            cni_path=[Path("/usr/lib/cni")],
            host_netns=node.node_netns,
        )
    with pytest.raises(CNIError, match="not found"):
        run_conflist(
            command="ADD",
            conflist={"name": "x", "cniVersion": "1.0.0", "plugins": [{"type": "no-such-plugin"}]},
            container_id="abc",
            netns="/nonexistent",
            ifname=IFNAME,
            cni_args=[],
            capability_args={},
            cni_path=[Path("/usr/lib/cni")],
            host_netns=node.node_netns,
        )
