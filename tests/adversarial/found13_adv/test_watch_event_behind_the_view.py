"""A watch that sends an event older than the view (a lagging watch cache or proxy replaying history the list
already passed): the event was applied all the same, so a DELETED of a live pod at an old resourceVersion took
the pod out of a view that stayed proven current (its proof is the list's and the node Lease's, and the event
moved no version forward), and the watch resumed from that old version. A view proven current must not lose
a live pod to a replay: an event behind the view is not applied, and the cache lists again."""

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
    line = (json.dumps({"type": kind, "object": replayed}) + "\n").encode()
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
        assert _wait(lambda: watches[0] >= 2)  # the replay answered, and the watch went on after it
        assert ref.stats()["relists_replayed"] >= 1, "the replay is counted apart (its own alert)"
        time.sleep(0.5)
        try:
            view = ref.proven(max_age_seconds=40.0)
        except SourceError:
            return  # refused: nothing acts on it
        assert sorted(p.name for p in view.pods) == ["a1", "a2"], "a replayed event took a live pod out"
    finally:
        ref.stop()


def test_a_bookmark_behind_the_view_does_not_move_the_watch_back(
        api: FakeKubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bookmark at a version the view already passed set the watch's resume point back to it: the next watch
    asked the server to replay what the view held already (older states of its pods, applied again)."""
    api.add_pod(pod("a1"))
    old = api.resource_version
    api.add_pod(pod("a2"))
    line = (json.dumps({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                                                        "metadata": {"resourceVersion": str(old)}}}) + "\n").encode()
    handle = api.handle
    asked: list[str] = []

    def wrap(method: str, raw_path: str, headers: Any, raw_body: bytes = b"") -> Any:
        if method == "GET" and "watch=true" in raw_path:
            asked.append(raw_path)
            if len(asked) == 1:
                return Reply(200, RawBody(line))
        return handle(method, raw_path, headers, raw_body)

    monkeypatch.setattr(api, "handle", wrap)
    send_raw_bodies(monkeypatch)
    ref = PodReflector(NODE, kubeconfig=kubeconfig, resync_seconds=60.0, idle_timeout_seconds=0.5,
                       request_timeout=2.0, retry_seconds=0.02, max_retry_seconds=0.2)
    try:
        ref.start()
        assert ref.wait_synced(20)
        assert _wait(lambda: len(asked) >= 2)
        listed = ref.resource_version()
        assert listed is not None and listed > old
        assert f"resourceVersion={listed}" in asked[1], asked[1]
    finally:
        ref.stop()
