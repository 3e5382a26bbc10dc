"""What nodegc relies on inside lightkube, checked against the HTTP-level fake API.

`nodegc.api.streaming` builds raw watch requests from lightkube's private generic client. If a lightkube
release changes any of it (names, the query it builds, the per-request timeout, streaming), a test here
fails before a reflector silently stops detecting stalled watches.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import lightkube
import pytest
from lightkube.resources.core_v1 import Pod

from nodegc.api import streaming
from nodegc.api.client import make_client
from nodegc.api.errors import KubeError
from nodegc.api.streaming import SUPPORTED, RawReads, WatchRequests, check_lightkube, lightkube_version
from nodegc.kube.endpointslices import RawEndpointSlice
from tests.api.fakeapi import FakeKubeAPI


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(bookmark_interval=0.05) as server:
        yield server


@pytest.fixture
def client(api: FakeKubeAPI, tmp_path: Path) -> Iterator[lightkube.Client]:
    c = make_client(api.write_kubeconfig(tmp_path / "kubeconfig"), timeout=5.0)
    yield c
    c.close()


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"nodeName": "node-a"}, "status": {"phase": "Running"}}


def test_installed_lightkube_is_in_the_supported_range() -> None:
    low, high = SUPPORTED
    assert low <= lightkube_version() < high


def test_the_private_parts_exist(client: lightkube.Client) -> None:
    generic = check_lightkube(client)
    assert generic is client._client
    for name in ("prepare_request", "build_adapter_request", "send"):
        assert callable(getattr(generic, name))
    # every connection reads through the whole answer's deadline (headers included)
    pool = getattr(generic._client._transport, "_pool", None)
    assert isinstance(getattr(pool, "_network_backend", None), streaming._BoundedBackend)


def test_a_watch_request_is_what_the_reflector_means(api: FakeKubeAPI, client: lightkube.Client) -> None:
    api.add_pod(pod("a"))
    rv = str(api.resource_version)
    api.add_pod(pod("b"))
    response = WatchRequests(client).open(
        Pod, namespace=lightkube.ALL_NS, connect_timeout=2.0, read_timeout=2.0,
        params={"fieldSelector": "spec.nodeName=node-a", "allowWatchBookmarks": "true", "timeoutSeconds": "1",
                "resourceVersion": rv, "absent": None},
    )
    try:
        assert response.status_code == 200
        first = json.loads(next(line for line in response.iter_lines() if line.strip()))
    finally:
        response.close()
    assert first["type"] == "ADDED"
    assert first["object"]["metadata"]["name"] == "b"  # streamed from the resourceVersion asked for
    [request] = api.recorded(path_prefix="/api/v1/pods", watch=True)
    assert request.method == "GET"
    assert request.query == {"watch": "true", "fieldSelector": "spec.nodeName=node-a",
                             "allowWatchBookmarks": "true", "timeoutSeconds": "1", "resourceVersion": rv}
    assert request.headers["authorization"] == f"Bearer {api.token}"  # the client's credentials


def test_the_read_timeout_is_per_request(api: FakeKubeAPI, client: lightkube.Client) -> None:
    """The stall detector: a silent watch ends with ReadTimeout after the read timeout asked for, although
    the client's own timeout is 5 s."""
    api.stall_watches(10.0)
    response = WatchRequests(client).open(
        Pod, namespace=lightkube.ALL_NS, connect_timeout=2.0, read_timeout=0.3,
        params={"allowWatchBookmarks": "true", "timeoutSeconds": "30"},
    )
    started = time.monotonic()
    try:
        with pytest.raises(httpx2.ReadTimeout):
            for _line in response.iter_lines():
                pass
    finally:
        response.close()
    assert time.monotonic() - started < 3.0


def test_namespaced_generic_resources_watch_too(api: FakeKubeAPI, client: lightkube.Client) -> None:
    response = WatchRequests(client).open(
        RawEndpointSlice, namespace="shop", connect_timeout=2.0, read_timeout=2.0,
        params={"allowWatchBookmarks": "true", "timeoutSeconds": "1"},
    )
    response.close()
    [request] = api.recorded(watch=True)
    assert request.path == "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices"


def test_a_client_without_the_parts_is_refused_clearly() -> None:
    with pytest.raises(KubeError, match="lacks what raw requests need: prepare_request"):
        check_lightkube(object())  # type: ignore[arg-type]


def _parsed(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


@pytest.mark.parametrize("version", ["0.14.0", "2.0.0"])
def test_a_lightkube_outside_the_range_is_refused(
    client: lightkube.Client, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    monkeypatch.setattr(streaming, "lightkube_version", lambda: _parsed(version))
    with pytest.raises(KubeError, match="lightkube"):
        WatchRequests(client)


def test_a_raw_list_page_is_the_request_lightkube_would_send(api: FakeKubeAPI, client: lightkube.Client) -> None:
    """`api.reads` lists through `RawReads`: the same URL, query and credentials as lightkube's own `list()`,
    the body left undecoded."""
    api.add_pod({**pod("a"), "spec": {"nodeName": "node-a", "containers": [{"name": "app"}]}})  # lightkube's models
    # want containers
    list(client.list(Pod, namespace=lightkube.ALL_NS, chunk_size=7, fields={"spec.nodeName": "node-a"}))
    params = {"limit": 7, "fieldSelector": "spec.nodeName=node-a", "absent": None}
    with RawReads(client).list_page(Pod, namespace=lightkube.ALL_NS, params=params) as body:
        assert [o["metadata"]["name"] for o in json.loads(bytes(body))["items"]] == ["a"]
    theirs, ours = api.recorded(path_prefix="/api/v1/pods")
    assert (ours.method, ours.path, ours.query) == (theirs.method, theirs.path, theirs.query)
    assert ours.headers["authorization"] == theirs.headers["authorization"] == f"Bearer {api.token}"


def test_a_raw_get_fails_as_lightkubes_get_fails(api: FakeKubeAPI, client: lightkube.Client) -> None:
    api.add_pod(pod("a"))
    assert json.loads(RawReads(client).get(Pod, namespace="default", name="a"))["metadata"]["uid"] == "uid-a"
    with pytest.raises(lightkube.ApiError) as theirs:
        client.get(Pod, name="gone", namespace="default")
    with pytest.raises(lightkube.ApiError) as ours:
        RawReads(client).get(Pod, namespace="default", name="gone")
    assert ours.value.status.code == theirs.value.status.code == 404
    first, second = api.recorded(path_prefix="/api/v1/namespaces/default/pods/gone")
    assert (first.method, first.path, first.query) == (second.method, second.path, second.query)


def test_a_raw_list_page_larger_than_its_first_map_arrives_whole(api: FakeKubeAPI, client: lightkube.Client) -> None:
    """A page's body lives in a memory map of its own that grows as the body arrives (several times here):
    every byte comes back, in order, through `view()` and `bytes()`, and the map is gone at the end."""
    filler = "x" * 5000
    names = [f"p{i:04d}" for i in range(900)]  # about 4.6 MB: three doublings of the 1 MiB map
    for name in names:
        api.add_pod({**pod(name), "metadata": {**pod(name)["metadata"], "annotations": {"filler": filler}}})
    with RawReads(client).list_page(Pod, namespace=lightkube.ALL_NS, params={"limit": 1000}) as body:
        assert len(body) > 4 * streaming.Body.INITIAL
        whole = bytes(body)
        assert len(whole) == len(body)
        assert bytes(body.view()) == whole
        items = json.loads(whole)["items"]
    assert [o["metadata"]["name"] for o in items] == names
    assert {o["metadata"]["annotations"]["filler"] for o in items} == {filler}
    with pytest.raises(ValueError, match="closed"):
        body.view()


def test_a_body_is_unmapped_when_its_reading_fails(monkeypatch: pytest.MonkeyPatch, api: FakeKubeAPI,
                                                   client: lightkube.Client) -> None:
    """A list page that fails half-way (here: the read times out) leaves no map behind."""
    made: list[streaming.Body] = []
    real = streaming.Body.__init__

    def tracked(self: streaming.Body) -> None:
        real(self)
        made.append(self)

    monkeypatch.setattr(streaming.Body, "__init__", tracked)
    extend = streaming.Body.extend

    def late(self: streaming.Body, chunk: bytes) -> None:
        # the first chunk arrives, and then the whole answer's deadline passes
        extend(self, chunk)
        raise httpx2.ReadTimeout("past the answer's deadline")

    monkeypatch.setattr(streaming.Body, "extend", late)
    api.add_pod(pod("a"))
    with pytest.raises(httpx2.ReadTimeout):
        RawReads(client).list_page(Pod, namespace=lightkube.ALL_NS, params={"limit": 10})
    assert len(made) == 1
    with pytest.raises(ValueError, match="closed"):
        made[0].view()
