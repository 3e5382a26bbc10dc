"""The watch's proof for acting is dated at the node Lease's renewal and aged by the wall clock. A clock
that steps back leaves the proof dated in the future: it must not be handed out as a proof (a photograph
dated in the future is a broken clock), nor keep the cache from reading the Lease again, which the kubelet,
on the same clock, renews at the new time: the view is proven again at once, not an hour later."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nodegc.desired.reflector import PodReflector
from nodegc.desired.source import FUTURE_TOLERANCE_SECONDS, SourceError
from tests.api.fakeapi import FakeKubeAPI
from tests.api.test_reflector import NODE, eventually, pod, reflector

MAX_AGE = 2.0


class SteppingClock:
    def __init__(self) -> None:
        self.offset = timedelta()
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return datetime.now(UTC) + self.offset

    def step(self, by: timedelta) -> None:
        with self._lock:
            self.offset += by


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(bookmark_interval=0.05) as server:
        yield server


def test_a_clock_stepped_back_hands_out_no_proof_from_the_future(api: FakeKubeAPI, tmp_path: Path) -> None:
    clock = SteppingClock()
    api.add_pod(pod("db"))
    api.renew_node_lease(NODE, at=clock())
    ref: PodReflector = reflector(api.write_kubeconfig(tmp_path / "kubeconfig"), idle_timeout_seconds=30.0,
                                  clock=clock).start()
    try:
        assert ref.wait_synced(30)
        assert ref.proven(max_age_seconds=MAX_AGE).fetched_at <= clock()
        clock.step(-timedelta(hours=1))
        api.renew_node_lease(NODE, at=clock())  # the kubelet renews on the same, stepped, clock
        api.update("pods", "default", "db", {"metadata": {"annotations": {"a": "1"}}})  # the view moves on

        def proven_now() -> bool:
            try:
                state = ref.proven(max_age_seconds=MAX_AGE)
            except SourceError:
                return False
            ahead = (state.fetched_at - clock()).total_seconds()
            assert ahead <= FUTURE_TOLERANCE_SECONDS, f"a proof dated {ahead:.0f}s in the future"
            return True

        eventually(api, proven_now, timeout=10)
    finally:
        ref.stop()
