"""A watch event that carries no resourceVersion (a proxy or a re-encoding layer that dropped it, a server
that sends an opaque version where the view holds numbers). An event behind the view is not applied
(found13_adv), but one whose version cannot be compared at all was: a DELETED of a live pod took it out of a
view that stayed proven current (the proof is the list's and the node Lease's, and the event moved no
version), and so did a MODIFIED that showed it on another node. A view of numeric versions must not change
on an event it cannot place in that history: it lists again."""

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


@pytest.mark.parametrize("version", [None, "", "not-a-number"], ids=["missing", "empty", "opaque"])
@pytest.mark.parametrize("kind", ["DELETED", "MODIFIED"])
def test_an_event_without_a_comparable_version_does_not_change_a_proven_view(
        api: FakeKubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, kind: str, version: str | None) -> None:
    api.add_pod(pod("a1"))
    api.add_pod(pod("a2"))
    current = api.get("pods", "default", "a1")
    assert current is not None
    sent = json.loads(json.dumps(current))
    if version is None:
        sent["metadata"].pop("resourceVersion", None)
    else:
        sent["metadata"]["resourceVersion"] = version
    if kind == "MODIFIED":  # a1 shown on another node: it leaves this node's view
        sent["spec"]["nodeName"] = "node-b"
    asked = first_watch_answers(api, monkeypatch, line(kind, sent))
    ref = reflector(kubeconfig)
    try:
        past_first_answer(ref, asked)
        names = proven_names(ref)
        assert names in (None, ["a1", "a2"]), "an event of no known version took a live pod out"  # None: refused
    finally:
        ref.stop()
