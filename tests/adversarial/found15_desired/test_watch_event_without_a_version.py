"""A watch event that carries no resourceVersion (a proxy or a re-encoding layer that dropped it, a server
that sends an opaque version where the view holds numbers). An event behind the view is not applied
(found13_adv), but one whose version cannot be compared at all was: a DELETED of a live pod took it out of a
view that stayed proven current (the proof is the list's and the node Lease's, and the event moved no
version), and so did a MODIFIED that showed it on another node. A view of numeric versions must not change
on an event it cannot place in that history: it lists again."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodegc.desired.reflector import PodReflector
from nodegc.desired.source import SourceError
from tests.adversarial.found9.conftest import RawBody, send_raw_bodies
from tests.api.fakeapi import FakeKubeAPI, Reply

NODE = "node-a"


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "creationTimestamp": "2024-05-01T10:00:00Z"},
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "busybox"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}}


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=(NODE,)) as server:
        yield server


def _wait(check: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


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
    line = (json.dumps({"type": kind, "object": sent}) + "\n").encode()
    handle = api.handle
    watches = [0]

    def wrap(method: str, raw_path: str, headers: Any, raw_body: bytes = b"") -> Any:
        if method == "GET" and "watch=true" in raw_path:
            watches[0] += 1
            if watches[0] == 1:
                return Reply(200, RawBody(line))
        return handle(method, raw_path, headers, raw_body)

    monkeypatch.setattr(api, "handle", wrap)
    send_raw_bodies(monkeypatch)
    ref = PodReflector(NODE, kubeconfig=kubeconfig, resync_seconds=60.0, idle_timeout_seconds=0.5,
                       request_timeout=2.0, retry_seconds=0.02, max_retry_seconds=0.2)
    try:
        ref.start()
        assert ref.wait_synced(20)
        assert _wait(lambda: watches[0] >= 2)  # the event answered, and the watch went on after it
        time.sleep(0.5)
        try:
            view = ref.proven(max_age_seconds=40.0)
        except SourceError:
            return  # refused: nothing acts on it
        assert sorted(p.name for p in view.pods) == ["a1", "a2"], "an event of no known version took a live pod out"
    finally:
        ref.stop()
