"""KubeSource against the HTTP-level fake API: what it sends, how it pages, how it fails."""

from __future__ import annotations

import os
import socket
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lightkube
import pytest
from lightkube.resources.core_v1 import Pod

from nodegc.api.reads import CHUNK_SIZE
from nodegc.desired.kube import KubeSource
from nodegc.desired.source import SourceError
from tests.api.fakeapi import FakeKubeAPI

NODE = "node-a"
FROZEN = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def pod(name: str, node: str | None = NODE, *, namespace: str = "default", **status: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "busybox"}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "creationTimestamp": "2024-05-01T10:00:00Z",
        },
        "spec": spec,
        "status": {"phase": "Running", **status},
    }


def source(kubeconfig: Path, *, timeout: float = 5.0) -> KubeSource:
    return KubeSource(NODE, kubeconfig=kubeconfig, timeout=timeout, clock=lambda: FROZEN, prove_current=False)


def test_lists_only_this_nodes_pods(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1", podIPs=[{"ip": "10.0.0.5"}, {"ip": "fd00::0005"}]))
    api.add_pod(pod("a2", namespace="kube-system"))
    api.add_pod(pod("b1", node="node-b"))
    api.add_pod(pod("pending-unscheduled", node=None, phase="Pending"))

    with source(kubeconfig) as src:
        state = src.fetch()

    assert state.node == NODE
    assert state.source == "kube"
    assert state.fetched_at == FROZEN
    assert sorted((p.namespace, p.name) for p in state.pods) == [("default", "a1"), ("kube-system", "a2")]
    a1 = next(p for p in state.pods if p.name == "a1")
    assert a1.uid == "uid-default-a1"
    assert a1.pod_ips == ("10.0.0.5", "fd00::5")
    assert a1.created_at == datetime(2024, 5, 1, 10, 0, tzinfo=UTC)

    [request] = api.requests
    assert request.method == "GET"
    assert request.path == "/api/v1/pods"
    assert request.query["fieldSelector"] == f"spec.nodeName={NODE}"
    assert request.query["limit"] == str(CHUNK_SIZE)
    assert request.headers["authorization"] == f"Bearer {api.token}"


def test_pages_through_a_large_node_with_continue(api: FakeKubeAPI, kubeconfig: Path) -> None:
    for i in range(1200):
        api.add_pod(pod(f"p{i:04d}", namespace=f"ns{i % 7}"))
    for i in range(30):
        api.add_pod(pod(f"other{i}", node="node-b"))

    state = source(kubeconfig).fetch()

    assert len(state.pods) == 1200
    assert len({p.uid for p in state.pods}) == 1200
    lists = api.requests_to("/api/v1/pods")
    assert len(lists) == 3
    assert "continue" not in lists[0].query
    assert all(r.query.get("continue") for r in lists[1:])
    assert all(r.query["limit"] == "500" for r in lists)
    assert all(r.query["fieldSelector"] == f"spec.nodeName={NODE}" for r in lists)


def test_a_failed_later_page_fails_the_whole_fetch(api: FakeKubeAPI, kubeconfig: Path) -> None:
    for i in range(600):
        api.add_pod(pod(f"p{i:04d}"))
    api.fail_next(500, after=1)
    # the first page succeeds, the second gets a 500: a partial list must never come back
    with pytest.raises(SourceError, match="HTTP 500"):
        source(kubeconfig).fetch()
    lists = api.requests_to("/api/v1/pods")
    assert len(lists) == 2
    assert lists[1].query.get("continue")


@pytest.mark.parametrize(("status", "reason"), [(500, "InternalError"), (503, "ServiceUnavailable")])
def test_server_errors_become_source_errors(
    api: FakeKubeAPI, kubeconfig: Path, status: int, reason: str
) -> None:
    api.add_pod(pod("a1"))
    api.fail_next(status)
    with pytest.raises(SourceError, match=f"HTTP {status} {reason}") as info:
        source(kubeconfig).fetch()
    assert isinstance(info.value.__cause__, lightkube.ApiError)
    assert "injected failure" not in str(info.value)  # the body's message stays out


def test_forbidden_becomes_source_error(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.fail_next(403)
    with pytest.raises(SourceError, match="HTTP 403 Forbidden"):
        source(kubeconfig).fetch()
    # the fault was transient: the same source works on the next fetch
    api.add_pod(pod("a1"))
    src = source(kubeconfig)
    assert [p.name for p in src.fetch().pods] == ["a1"]


def test_wrong_token_is_reported_without_the_token(api: FakeKubeAPI, tmp_path: Path) -> None:
    path = api.write_kubeconfig(tmp_path / "kubeconfig")
    path.write_text(path.read_text().replace(api.token, "wrong-secret-token"))
    with pytest.raises(SourceError, match="HTTP 401 Unauthorized") as info:
        source(path).fetch()
    assert "wrong-secret-token" not in str(info.value)


def test_unreachable_server_fails_fast(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with FakeKubeAPI() as api:
        path = api.write_kubeconfig(tmp_path / "kubeconfig")
        path.write_text(path.read_text().replace(api.url, f"http://127.0.0.1:{port}"))
    started = time.monotonic()
    with pytest.raises(SourceError, match="ConnectError"):
        source(path, timeout=2.0).fetch()
    assert time.monotonic() - started < 5


def test_slow_server_times_out(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1"))
    api.delay(5)
    started = time.monotonic()
    with pytest.raises(SourceError, match="timed out"):
        source(kubeconfig, timeout=0.5).fetch()
    assert time.monotonic() - started < 4


def test_unidentifiable_pod_fails_the_fetch(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1"))
    broken = pod("a2")
    del broken["metadata"]["uid"]
    api.add_pod(broken)
    with pytest.raises(SourceError, match="uid"):
        source(kubeconfig).fetch()


def test_missing_kubeconfig_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="configuration"):
        source(tmp_path / "nope").fetch()


def test_injected_client_is_used(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1"))
    client = lightkube.Client(lightkube.KubeConfig.from_file(kubeconfig))
    try:
        state = KubeSource(NODE, client=client, prove_current=False).fetch()
    finally:
        client.close()
    assert [p.name for p in state.pods] == ["a1"]


def test_fake_api_get_and_selectors(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """The fake itself: GET by name, 404 Status, namespaced list with label and field selectors."""
    labelled = pod("web", namespace="shop")
    labelled["metadata"]["labels"] = {"app": "web"}
    api.add_pod(labelled)
    api.add_pod(pod("db", namespace="shop"))
    rv_before = api.store.resource_version
    api.delete_pod("shop", "db")
    assert api.store.resource_version == rv_before + 1

    with lightkube.Client(lightkube.KubeConfig.from_file(kubeconfig)) as client:
        got = client.get(Pod, "web", namespace="shop")
        assert got.metadata is not None
        assert got.metadata.uid == "uid-shop-web"
        with pytest.raises(lightkube.ApiError) as info:
            client.get(Pod, "db", namespace="shop")
        assert info.value.status.code == 404
        listed = client.list(Pod, namespace="shop", labels={"app": "web"}, fields={"metadata.name": "web"})
        names = [p.metadata.name for p in listed if p.metadata is not None]
        assert names == ["web"]
    assert api.requests[-1].path == "/api/v1/namespaces/shop/pods"
    assert api.requests[-1].query == {"labelSelector": "app=web", "fieldSelector": "metadata.name=web"}


def test_kubeconfig_env_first_entry_is_used(
    api: FakeKubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.add_pod(pod("a1"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", f"{kubeconfig}{os.pathsep}/nonexistent/config")
    assert [p.name for p in KubeSource(NODE, prove_current=False).fetch().pods] == ["a1"]


def test_in_cluster_without_service_account_is_a_source_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists():
        pytest.skip("running inside a pod: the real service account would be used")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(SourceError, match="configuration"):
        KubeSource(NODE).fetch()


def test_get_pod_is_a_live_get(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("web", namespace="shop"))
    with source(kubeconfig) as src:
        got = src.get_pod("shop", "web")
        assert got is not None and got.uid == "uid-shop-web"
        assert src.get_pod("shop", "gone") is None
        gets = [r for r in api.requests if r.path.startswith("/api/v1/namespaces/shop/pods/")]
        assert [r.path for r in gets] == ["/api/v1/namespaces/shop/pods/web", "/api/v1/namespaces/shop/pods/gone"]
        api.fail_next(503)
        with pytest.raises(SourceError, match="503"):
            src.get_pod("shop", "web")
