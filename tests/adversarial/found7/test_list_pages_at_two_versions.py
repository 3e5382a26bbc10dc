"""A paged list is one photograph only when every page is at one resourceVersion (the continue token pins
the first page's). A lagging cache or proxy that answered the first page while the store answered the rest
made a list at two versions: the pods created in between that sort into the first page are missing, and the
list reported the LAST page's resourceVersion, newer than the node Lease read just before it, so the
currency check took the photograph with the hole as current. `api.reads.list_all` refuses it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightkube
import pytest
from lightkube.resources.core_v1 import Pod as PodResource

from nodegc.api.client import make_client
from nodegc.api.errors import KubeError
from nodegc.api.reads import list_all
from tests.api.fakeapi import FakeKubeAPI


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "busybox"}]},
            "status": {"phase": "Running"}}


@pytest.fixture
def client(kubeconfig: Path) -> Iterator[lightkube.Client]:
    c = make_client(kubeconfig, field_manager="nodegc-test")
    yield c
    c.close()


def test_pages_at_two_resource_versions_are_not_one_list(api: FakeKubeAPI, client: lightkube.Client) -> None:
    api.add_pod(_pod("a1"))
    api.add_pod(_pod("a2"))
    stale_rv = api.resource_version
    api.add_pod(_pod("a0-web"))  # created after the lagging first page; sorts into it
    api.serve_stale_list(stale_rv, resource="pods", paged=True)
    with pytest.raises(KubeError, match="resourceVersion"):
        list_all(client, PodResource, what="listing pods", chunk_size=1)


def test_pages_at_one_resource_version_are_one_list(api: FakeKubeAPI, client: lightkube.Client) -> None:
    for name in ("a1", "a2", "a3"):
        api.add_pod(_pod(name))
    objects, rv = list_all(client, PodResource, what="listing pods", chunk_size=1)
    assert [o["metadata"]["name"] for o in objects] == ["a1", "a2", "a3"]
    assert rv == str(api.resource_version)


def test_an_empty_list_is_one_list(api: FakeKubeAPI, client: lightkube.Client) -> None:
    objects, _rv = list_all(client, PodResource, what="listing pods", chunk_size=1)
    assert objects == []
