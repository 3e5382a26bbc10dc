"""A live GET's 404 is read as "the pod does not exist", the fresh word terminate and the EndpointSlice
sweeper act on. The API server's NotFound for a pod names it (details.name, details.kind "pods"); a 404 that
does not (a route the server or a proxy in front of it does not serve: "the server could not find the
requested resource", an HTML error page) says nothing about that pod and must not read as its absence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodegc.desired.kube import KubeSource
from nodegc.desired.source import SourceError
from tests.adversarial.found9.conftest import RawBody, Tamper, pod
from tests.api.fakeapi import FakeKubeAPI, Reply, status_object


def _source(kubeconfig: Path) -> KubeSource:
    return KubeSource("n1", kubeconfig=kubeconfig, prove_current=False)


def _not_found(body: dict[str, Any], query: dict[str, str]) -> Reply:
    return Reply(404, status_object(404, "the server could not find the requested resource"))


def _not_found_html(body: dict[str, Any], query: dict[str, str]) -> Reply:
    return Reply(404, RawBody(b"<html><body>404 page not found</body></html>", "text/html"))


def _not_found_of(name: str) -> Any:
    def rewrite(body: dict[str, Any], query: dict[str, str]) -> Reply:
        status = status_object(404, f'pods "{name}" not found')
        status["details"] = {"name": name, "kind": "pods"}
        return Reply(404, status)
    return rewrite


@pytest.mark.parametrize("rewrite", [_not_found, _not_found_html, _not_found_of("web-2")],
                         ids=["no-details", "html", "another-pod"])
def test_a_404_that_does_not_name_the_pod_is_no_answer(
    api: FakeKubeAPI, tamper: Tamper, kubeconfig: Path, rewrite: Any
) -> None:
    api.add_pod(pod("web"))
    tamper.gets(rewrite)
    with _source(kubeconfig) as source, pytest.raises(SourceError, match="404"):
        source.get_pod("default", "web")


def test_the_api_servers_not_found_names_the_pod(api: FakeKubeAPI, tamper: Tamper, kubeconfig: Path) -> None:
    tamper.gets(_not_found_of("web"))
    with _source(kubeconfig) as source:
        assert source.get_pod("default", "web") is None


def test_the_fake_api_servers_own_not_found_names_the_pod(api: FakeKubeAPI, kubeconfig: Path) -> None:
    with _source(kubeconfig) as source:
        assert source.get_pod("default", "gone") is None
