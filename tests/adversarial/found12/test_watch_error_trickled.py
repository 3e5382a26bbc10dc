"""A watch answered with an error status: the reflector read that answer's body with `response.read()`,
which the read timeout bounds per read of the socket only. A server or proxy sending the error's body a
byte at a time, each byte within the timeout, held the watch thread for as long as it cared to: no retry,
no relist, no resync (the resync is checked between lines), so the cache could not come back however long
the API server was healthy again. The body is never used (the status line says it all); the thread must
be free again within a bound, and watch again."""

from __future__ import annotations

import json
import time
from pathlib import Path

from nodegc.desired.reflector import PodReflector
from tests.adversarial.found12.conftest import IDLE, NODE, Trickle
from tests.api.fakeapi import FakeKubeAPI, status_object


def test_a_watch_error_whose_body_trickles_does_not_hold_the_watch_thread(
        api: FakeKubeAPI, trickle: Trickle, kubeconfig: Path) -> None:
    error = json.dumps(status_object(500, "x" * 500, reason="InternalError")).encode()  # ~100 s a byte at a time
    trickle.answer = lambda _m, _p, n: (500, error) if n == 1 else None
    reflector = PodReflector(NODE, kubeconfig=kubeconfig, resync_seconds=60.0, idle_timeout_seconds=IDLE,
                             request_timeout=2.0, retry_seconds=0.02, max_retry_seconds=0.2)
    try:
        reflector.start()
        assert reflector.wait_synced(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and trickle.watches < 2:
            time.sleep(0.05)
        assert trickle.watches >= 2, "the watch thread is still reading the first watch's error body"
    finally:
        reflector.stop()
