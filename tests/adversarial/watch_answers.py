"""A pod watch whose first answer is one raw line the test writes (an event or a bookmark the server would not
send: a replay, a version dropped or rewritten by a proxy), against the test API server; every later watch is
the server's own. Shared by the rounds that attack what a watch event may change in a proven view
(found13_adv, found15_desired, found20_rev)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def watch_api() -> Iterator[FakeKubeAPI]:
    """The test API server, bookmarking often, with NODE's kubelet renewing its Lease."""
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=(NODE,)) as server:
        yield server


def wait(check: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return (json.dumps({"type": kind, "object": obj}) + "\n").encode()


def first_watch_answers(api: FakeKubeAPI, monkeypatch: pytest.MonkeyPatch, raw: bytes) -> list[str]:
    """The first watch request gets `raw` as its whole body; the raw path of every watch request is recorded
    in the list returned, in order."""
    handle = api.handle
    asked: list[str] = []

    def wrap(method: str, raw_path: str, headers: Any, raw_body: bytes = b"") -> Any:
        if method == "GET" and "watch=true" in raw_path:
            asked.append(raw_path)
            if len(asked) == 1:
                return Reply(200, RawBody(raw))
        return handle(method, raw_path, headers, raw_body)

    monkeypatch.setattr(api, "handle", wrap)
    send_raw_bodies(monkeypatch)
    return asked


def reflector(kubeconfig: Any, *, resync_seconds: float = 60.0) -> PodReflector:
    return PodReflector(NODE, kubeconfig=kubeconfig, resync_seconds=resync_seconds, idle_timeout_seconds=0.5,
                        request_timeout=2.0, retry_seconds=0.02, max_retry_seconds=0.2)


def past_first_answer(ref: PodReflector, asked: list[str], *, settle: float = 0.5) -> None:
    """Start `ref`, and return once it has listed, taken the first watch's answer and watched again, plus
    `settle` seconds for whatever that answer makes it do."""
    ref.start()
    assert ref.wait_synced(20)
    assert wait(lambda: len(asked) >= 2)  # the first answer taken, and the watch went on after it
    time.sleep(settle)


def proven_names(ref: PodReflector) -> list[str] | None:
    """The names of the pods of `ref`'s proven view, sorted; None: the view was refused (nothing acts on it)."""
    try:
        view = ref.proven(max_age_seconds=40.0)
    except SourceError:
        return None
    return sorted(p.name for p in view.pods)
