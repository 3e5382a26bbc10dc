"""A watch that sends an event older than the view (a lagging watch cache or proxy replaying history the list
already passed): the event was applied all the same, so a DELETED of a live pod at an old resourceVersion took
the pod out of a view that stayed proven current (its proof is the list's and the node Lease's, and the event
moved no version forward), and the watch resumed from that old version. A view proven current must not lose
a live pod to a replay: an event behind the view is not applied, and the cache lists again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adversarial.watch_answers import (
    first_watch_answers,
    line,
    past_first_answer,
    pod,
    proven_names,
    reflector,
    watch_api,
)
from tests.api.fakeapi import FakeKubeAPI


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with watch_api() as server:
        yield server


@pytest.mark.parametrize("kind", ["DELETED", "MODIFIED"])
def test_an_event_behind_the_view_does_not_change_a_proven_view(
        api: FakeKubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    api.add_pod(pod("a1"))
    old = api.get("pods", "default", "a1")
    assert old is not None
    api.add_pod(pod("a2"))  # the list is newer than a1's version
    replayed = json.loads(json.dumps(old))
    if kind == "MODIFIED":  # a1 as it was before it ran, at its old version: moved to another node
        replayed["spec"]["nodeName"] = "node-b"
    asked = first_watch_answers(api, monkeypatch, line(kind, replayed))
    ref = reflector(kubeconfig)
    try:
        past_first_answer(ref, asked)
        assert ref.stats()["relists_replayed"] >= 1, "the replay is counted apart (its own alert)"
        names = proven_names(ref)
        assert names in (None, ["a1", "a2"]), "a replayed event took a live pod out"  # None: refused
    finally:
        ref.stop()


def test_a_bookmark_behind_the_view_does_not_move_the_watch_back(
        api: FakeKubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bookmark at a version the view already passed set the watch's resume point back to it: the next watch
    asked the server to replay what the view held already (older states of its pods, applied again)."""
    api.add_pod(pod("a1"))
    old = api.resource_version
    api.add_pod(pod("a2"))
    asked = first_watch_answers(api, monkeypatch, line(
        "BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": str(old)}}))
    ref = reflector(kubeconfig)
    try:
        past_first_answer(ref, asked, settle=0.0)
        listed = ref.resource_version()
        assert listed is not None and listed > old
        assert f"resourceVersion={listed}" in asked[1], asked[1]
    finally:
        ref.stop()
