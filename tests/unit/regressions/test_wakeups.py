"""Wakeups: a burst of deletions must not become a burst of back-to-back cycles."""
from __future__ import annotations

import threading

from nodegc.agent import Wakeups


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_deletion_burst_is_coalesced_into_one_cycle_per_slot() -> None:
    clock = Clock()
    w = Wakeups(clock=clock)
    for _ in range(110):  # a node drain: 110 DELETED events (or one relist finding them gone)
        w.after_deletion(consecutive_scans=3, grace=120.0)
    stop = threading.Event()
    immediate = 0
    for _ in range(200):
        before = clock.now
        done = threading.Event()

        def waiter(finished: threading.Event = done) -> None:
            w.wait(30.0, stop)
            finished.set()

        t = threading.Thread(target=waiter)
        t.start()
        if not done.wait(0.2):  # it is sleeping: no more immediate wakeups
            stop.set()
            t.join()
            break
        t.join()
        assert clock.now == before
        immediate += 1
    # one extra cycle is enough for "now"; 110 back-to-back full node scans are not
    assert immediate <= 1, f"{immediate} cycles ran back to back"
