"""A watch whose answer is one line that never ends, sent a byte at a time (each byte within the read
timeout): `iter_lines()` hands out nothing until the line is whole, and the reflector looked at the clock
only between lines, so the resync never came and the watch thread was held as long as the server cared
to (the view then goes stale: nothing is destructive, but the cache does not come back without an outside
relist request, which the controller's slice cache never makes). A watch must end at its resync
however its bytes come."""

from __future__ import annotations

import time
from pathlib import Path

from nodegc.desired.reflector import PodReflector
from tests.adversarial.found12.conftest import IDLE, NODE, Trickle
from tests.api.fakeapi import FakeKubeAPI

RESYNC = 1.0


def test_a_watch_line_that_never_ends_does_not_hold_the_watch_past_its_resync(
        api: FakeKubeAPI, trickle: Trickle, kubeconfig: Path) -> None:
    endless = b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"' + b"1" * 1000  # ~100 s
    trickle.answer = lambda _m, _p, n: (200, endless) if n == 1 else None
    reflector = PodReflector(NODE, kubeconfig=kubeconfig, resync_seconds=RESYNC, idle_timeout_seconds=IDLE,
                             request_timeout=2.0, retry_seconds=0.02, max_retry_seconds=0.2)
    try:
        reflector.start()
        assert reflector.wait_synced(10)
        deadline = time.monotonic() + 10  # the resync is due within 1.2 s
        while time.monotonic() < deadline and trickle.lists < 2:
            time.sleep(0.05)
        assert trickle.watches >= 1
        assert trickle.lists >= 2, "no resync: the watch thread is still reading the first watch's line"
    finally:
        reflector.stop()
