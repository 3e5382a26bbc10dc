"""A watch event without a numeric resourceVersion while the view holds one is no longer applied, nor taken
as the point the next watch resumes from (found15_desired). A BOOKMARK's version still was: an opaque one
(a proxy or re-encoding layer that rewrote it) became the resume point, the API server answered every
following watch 400 (an invalid resourceVersion), and the cache retried that same version, backed off,
until the resync: the view went stale and every cycle was refused meanwhile, never progressing."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from nodegc.desired.reflector import PodReflector
from tests.adversarial.found9.conftest import RawBody, send_raw_bodies
from tests.adversarial.found15_desired.test_watch_event_without_a_version import NODE, _wait, api, pod
from tests.api.fakeapi import FakeKubeAPI, Reply

__all__ = ["api"]


@pytest.mark.parametrize("version", ["", "not-a-number"], ids=["empty", "opaque"])
def test_a_bookmark_without_a_comparable_version_is_not_resumed_from(
        api: FakeKubeAPI, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    api.add_pod(pod("a1"))
    line = (json.dumps({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": version}}})
            + "\n").encode()
    handle = api.handle
    resumed: list[str] = []

    def wrap(method: str, raw_path: str, headers: Any, raw_body: bytes = b"") -> Any:
        if method == "GET" and "watch=true" in raw_path:
            resumed.append(parse_qs(urlsplit(raw_path).query).get("resourceVersion", [""])[0])
            if len(resumed) == 1:
                return Reply(200, RawBody(line))
        return handle(method, raw_path, headers, raw_body)

    monkeypatch.setattr(api, "handle", wrap)
    send_raw_bodies(monkeypatch)
    ref = PodReflector(NODE, kubeconfig=kubeconfig, resync_seconds=600.0, idle_timeout_seconds=0.5,
                       request_timeout=2.0, retry_seconds=0.02, max_retry_seconds=0.2)
    try:
        ref.start()
        assert ref.wait_synced(20)
        assert _wait(lambda: len(resumed) >= 2)  # the bookmark answered, and the watch went on after it
        time.sleep(0.5)
        assert all(rv.isdigit() for rv in resumed), resumed
        assert [p.name for p in ref.proven(max_age_seconds=40.0).pods] == ["a1"]
    finally:
        ref.stop()
