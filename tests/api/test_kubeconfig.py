"""kubectl habits: $KUBECONFIG with several files merged as kubectl merges them, --context, --request-timeout,
against the HTTP-level test API server (the requests really reach it, or really time out)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodegc.api.client import merged_kubeconfig
from nodegc.desired.source import SourceError
from nodegc.wiring import SourceSettings, make_source
from tests.api.fakeapi import FakeKubeAPI

NODE = "node-a"


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(kubelets=[NODE]) as server:
        yield server


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "creationTimestamp": "2024-05-01T10:00:00Z"},
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "busybox"}]},
            "status": {"phase": "Running"}}


def _config(*, cluster: str, server: str, context: str, current: str | None = None,
            extra_cluster: dict[str, Any] | None = None, token: str = "t") -> dict[str, Any]:  # noqa: S107
    doc: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "insecure-skip-tls-verify": True,
                                                   **(extra_cluster or {})}}],
        "users": [{"name": f"{cluster}-user", "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": f"{cluster}-user"}}],
    }
    if current:
        doc["current-context"] = current
    return doc


def test_merge_follows_kubectl_rules(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "config", tmp_path / "b" / "config"
    first.parent.mkdir()
    second.parent.mkdir()
    # current-context from the first file that sets it, even when that context lives in the second file
    first.write_text(yaml.safe_dump(_config(cluster="one", server="https://one:6443", context="ctx-one",
                                            current="ctx-two")))
    two = _config(cluster="two", server="https://two:6443", context="ctx-two", current="ctx-one",
                  extra_cluster={"certificate-authority": "ca.crt"})
    two["clusters"].append({"name": "one", "cluster": {"server": "https://shadowed:6443"}})  # first one wins
    second.write_text(yaml.safe_dump(two))
    merged = merged_kubeconfig([tmp_path / "missing", first, second])
    assert merged.current_context == "ctx-two"
    assert merged.clusters["one"].server == "https://one:6443"
    assert set(merged.contexts) == {"ctx-one", "ctx-two"}
    # a relative path means what it meant in its own file
    assert merged.clusters["two"].certificate_auth == str(second.parent / "ca.crt")


def test_no_kubeconfig_file_at_all_is_a_source_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    with pytest.raises(SourceError, match="none of the \\$KUBECONFIG files exists"):
        make_source(SourceSettings(node=NODE))


def test_kubeconfig_list_and_context_reach_the_right_server(api: FakeKubeAPI, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    api.add_pod(_pod("web"))
    dead = tmp_path / "dead.yaml"
    dead.write_text(yaml.safe_dump(_config(cluster="dead", server="http://127.0.0.1:9", context="dead",
                                           current="dead")))
    live = tmp_path / "live.yaml"
    live.write_text(yaml.safe_dump(_config(cluster="fake", server=api.url, context="fake", token=api.token)))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(dead), str(live)]))
    # The current context (from the first file) points at a dead server...
    with pytest.raises(SourceError):
        make_source(SourceSettings(node=NODE, request_timeout=2), prove_current=False).fetch()
    # ...--context picks the second file's context, and the list reaches the test server.
    desired = make_source(SourceSettings(node=NODE, context="fake"), prove_current=False).fetch()
    assert [p.name for p in desired.pods] == ["web"]
    with pytest.raises(SourceError, match="Context 'nope' not found"):
        make_source(SourceSettings(node=NODE, context="nope"))


def test_request_timeout_bounds_each_request(api: FakeKubeAPI, tmp_path: Path) -> None:
    api.add_pod(_pod("web"))
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.delay(3.0)
    source = make_source(SourceSettings(node=NODE, kubeconfig=kubeconfig, request_timeout=0.5),
                         prove_current=False)
    with pytest.raises(SourceError):
        source.fetch()
    api.delay(0)
    assert [p.name for p in source.fetch().pods] == ["web"]
