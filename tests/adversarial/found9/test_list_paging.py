"""`api.reads.list_all` decodes its pages itself: every way a page can lie about being part of one whole list
must still be refused (KubeError), and no answer may hold the list forever."""

from __future__ import annotations

import json
import threading
from typing import Any

import lightkube
import pytest
from lightkube.resources.core_v1 import Pod as PodResource

from nodegc.api.errors import KubeError
from nodegc.api.reads import list_all
from tests.adversarial.found9.conftest import Tamper, pod
from tests.api.fakeapi import FakeKubeAPI


def _three(api: FakeKubeAPI) -> None:
    for name in ("a1", "a2", "a3"):
        api.add_pod(pod(name))


def _listed(client: lightkube.Client) -> list[str]:
    objects, _ = list_all(client, PodResource, what="listing pods", chunk_size=1)
    return [o["metadata"]["name"] for o in objects]


def test_the_untampered_list_is_whole(api: FakeKubeAPI, tamper: Tamper, client: lightkube.Client) -> None:
    _three(api)
    tamper.lists(lambda body, query: body)
    assert _listed(client) == ["a1", "a2", "a3"]
    assert tamper.calls == 3


def test_an_empty_middle_page_at_another_version_is_refused(
    api: FakeKubeAPI, tamper: Tamper, client: lightkube.Client
) -> None:
    """A lagging cache answered the middle page (it had not yet seen a2), the store the others: no item on that
    page carries the version, only the page's metadata does."""
    _three(api)
    older = str(api.resource_version - 1)

    def rewrite(body: dict[str, Any], query: dict[str, str]) -> dict[str, Any]:
        if query.get("continue") and body["items"] and body["items"][0]["metadata"]["name"] == "a2":
            body["items"] = []
            body["metadata"]["resourceVersion"] = older
        return body

    tamper.lists(rewrite)
    with pytest.raises(KubeError, match="resourceVersion"):
        _listed(client)


def test_a_last_page_that_says_more_remain_is_refused(
    api: FakeKubeAPI, tamper: Tamper, client: lightkube.Client
) -> None:
    """A page without a continue token that counts objects still to come (metadata.remainingItemCount) is a
    list cut short (a proxy that dropped the token): what it did not send would look gone."""
    _three(api)

    def rewrite(body: dict[str, Any], query: dict[str, str]) -> dict[str, Any]:
        if not query.get("continue"):
            body["metadata"].pop("continue", None)
            body["metadata"]["remainingItemCount"] = 2
        return body

    tamper.lists(rewrite)
    with pytest.raises(KubeError, match="remain"):
        _listed(client)


def test_a_page_that_counts_none_remaining_may_end_the_list(
    api: FakeKubeAPI, tamper: Tamper, client: lightkube.Client
) -> None:
    _three(api)

    def rewrite(body: dict[str, Any], query: dict[str, str]) -> dict[str, Any]:
        if "continue" in body["metadata"]:
            body["metadata"]["remainingItemCount"] = 1
        else:
            body["metadata"]["remainingItemCount"] = 0
        return body

    tamper.lists(rewrite)
    assert _listed(client) == ["a1", "a2", "a3"]


def test_a_continue_token_handed_out_again_is_refused_not_followed_forever(
    api: FakeKubeAPI, tamper: Tamper, client: lightkube.Client
) -> None:
    """A proxy that ignores `continue` answers the first page again, with the same token, forever."""
    _three(api)
    first: dict[str, Any] = {}

    def rewrite(body: dict[str, Any], query: dict[str, str]) -> dict[str, Any]:
        if not first:
            first.update(body)
        again: dict[str, Any] = json.loads(json.dumps(first))
        return again

    tamper.lists(rewrite)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            _listed(client)
            outcome.append(None)
        except BaseException as e:  # handed to the test thread
            outcome.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), f"list_all still paging after {tamper.calls} pages"
    assert isinstance(outcome[0], KubeError)
    assert tamper.calls < 10


@pytest.mark.parametrize("raw", [
    b'{"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": [{"metadata": {"name": "a1", "uid"',
    b"",
    b"<html>502 Bad Gateway</html>",
    b'{"kind": "Status", "status": "Failure", "code": 500}',
    b'{"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": null}',
    b'{"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": {"metadata": {}}}',
    b'{"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": ["a1"]}',
    b'{"kind": "PodList", "metadata": {"resourceVersion": 5}, "items": []}',
    b'{"kind": "PodList", "metadata": {"resourceVersion": "5", "continue": 7}, "items": []}',
    b'[]',
], ids=["truncated", "empty", "html", "status-200", "items-null", "items-object", "item-string", "rv-number",
        "continue-number", "array"])
def test_a_page_that_is_not_a_list_is_refused(
    api: FakeKubeAPI, tamper: Tamper, client: lightkube.Client, raw: bytes
) -> None:
    _three(api)
    tamper.lists(lambda body, query: raw if query.get("continue") else body)
    with pytest.raises(KubeError):
        _listed(client)
