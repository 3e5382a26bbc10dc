"""Answers the last read of the API reads found misread: a NotFound body under another HTTP status, a list
that never stops handing out new continue tokens, an error answer without a Content-Type, and a pod whose
metadata is not an object in the EndpointSlice sweeper's list."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import lightkube
import pytest
from lightkube.resources.core_v1 import Pod as PodResource

from nodegc.api import reads
from nodegc.api.errors import KubeError
from nodegc.api.reads import list_all
from nodegc.desired.kube import KubeSource
from nodegc.desired.source import SourceError
from nodegc.kube.endpointslices import EndpointSliceSweeper, SweepOptions
from tests.adversarial.found9.conftest import RawBody, Tamper, pod
from tests.api.fakeapi import FakeKubeAPI, Reply, decode_continue, encode_continue, status_object


def _source(kubeconfig: Path) -> KubeSource:
    return KubeSource("n1", kubeconfig=kubeconfig, prove_current=False)


def test_a_not_found_body_under_a_5xx_is_no_answer(api: FakeKubeAPI, tamper: Tamper, kubeconfig: Path) -> None:
    """The HTTP status is the answer's: a proxy's 502 whose body is a Status saying 404 and naming the pod
    does not say the pod is gone."""
    api.add_pod(pod("web"))

    def rewrite(body: dict[str, Any], query: dict[str, str]) -> Reply:
        status = status_object(404, 'pods "web" not found')
        status["details"] = {"name": "web", "kind": "pods"}
        return Reply(502, status)

    tamper.gets(rewrite)
    with _source(kubeconfig) as source, pytest.raises(SourceError, match="502"):
        source.get_pod("default", "web")


def test_an_error_answer_without_a_content_type_is_a_kube_error(
    api: FakeKubeAPI, tamper: Tamper, kubeconfig: Path
) -> None:
    api.add_pod(pod("web"))
    tamper.gets(lambda body, query: Reply(500, RawBody(b"oops", "")))
    with _source(kubeconfig) as source, pytest.raises(SourceError):
        source.get_pod("default", "web")


def test_a_list_that_hands_out_new_tokens_forever_ends(
    api: FakeKubeAPI, tamper: Tamper, client: lightkube.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every page a new continue token at one resourceVersion (empty pages, say): the list stops after
    MAX_PAGES pages with an error instead of paging forever."""
    monkeypatch.setattr(reads, "MAX_PAGES", 20)
    api.add_pod(pod("a1"))
    count = iter(range(10**6))

    def rewrite(body: dict[str, Any], query: dict[str, str]) -> dict[str, Any]:
        rv = int(body["metadata"]["resourceVersion"])
        if query.get("continue"):
            rv = decode_continue(query["continue"])[0]
        body["items"] = []
        body["metadata"]["continue"] = encode_continue(rv, ("", f"{next(count):08d}"))  # always a new one
        return body

    tamper.lists(rewrite)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            list_all(client, PodResource, what="listing pods", chunk_size=1)
            outcome.append(None)
        except BaseException as e:  # handed to the test thread
            outcome.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), f"list_all still paging after {tamper.calls} pages"
    assert isinstance(outcome[0], KubeError)
    assert "20 pages" in str(outcome[0])
    assert tamper.calls == 20


def test_a_pod_whose_metadata_is_not_an_object_fails_the_sweep_cleanly(
    api: FakeKubeAPI, tamper: Tamper, client: lightkube.Client
) -> None:
    """The sweeper's pod list decodes only the fields read; a pod whose metadata is a string cannot be
    identified, nor can its namespace: the pass fails with KubeError (nothing planned), not a traceback."""
    api.add_pod(pod("a1"))

    def rewrite(body: dict[str, Any], query: dict[str, str]) -> dict[str, Any]:
        body["items"][0]["metadata"] = "x"
        return body

    tamper.lists(rewrite)
    sweeper = EndpointSliceSweeper(client, is_leader=lambda: True, options=SweepOptions(dry_run=True))
    with pytest.raises(KubeError, match="cannot be identified"):
        sweeper.sweep()
