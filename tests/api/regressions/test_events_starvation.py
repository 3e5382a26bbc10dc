"""Keys recorded every pass in the same order: the first max_per_minute keys take every write forever."""
from __future__ import annotations

import lightkube

from nodegc.kube.events import EventType, ObjectRef
from tests.api.fakeapi import FakeKubeAPI
from tests.api.test_events import Clocks, clocks, recorder  # noqa: F401


def test_recurring_keys_beyond_the_cap_are_not_starved(
    api: FakeKubeAPI, client: lightkube.Client, clocks: Clocks  # noqa: F811
) -> None:
    rec = recorder(client, clocks, max_per_minute=3)
    services = [ObjectRef.service("shop", f"svc{i}") for i in range(6)]
    for _ in range(10):  # a controller pass every 30 s finds the same stale endpoints again
        for ref in services:
            rec.record(ref, reason="StaleEndpoint", message="stale", type=EventType.WARNING)
        rec.flush()
        clocks.advance(30)
    seen = {e["involvedObject"]["name"] for e in api.objects("events", namespace="shop")}
    assert seen == {f"svc{i}" for i in range(6)}, f"only {sorted(seen)} ever got an Event in 5 minutes"
