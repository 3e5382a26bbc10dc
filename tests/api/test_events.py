"""The aggregating Event recorder against the fake API: one Event per key, counts patched, a rate cap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import lightkube
import pytest

from nodegc.kube.events import EventRecorder, EventType, ObjectRef
from tests.api.fakeapi import FakeKubeAPI, RecordedRequest

T0 = datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=UTC)


class Clocks:
    def __init__(self) -> None:
        self.wall = T0
        self.mono = 100.0

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


def recorder(client: lightkube.Client, clocks: Clocks, **kw: object) -> EventRecorder:
    return EventRecorder(client, instance="node-a", host="node-a", clock=lambda: clocks.wall,
                         monotonic=lambda: clocks.mono, **kw)  # type: ignore[arg-type]


def event_writes(api: FakeKubeAPI) -> list[RecordedRequest]:
    return [r for r in api.recorded(path_prefix="/api/v1/namespaces/")
            if r.method in ("POST", "PATCH", "PUT")]


NODE = ObjectRef.node("node-a")


def test_a_storm_of_one_kind_is_one_event_with_a_count(
    api: FakeKubeAPI, client: lightkube.Client, clocks: Clocks
) -> None:
    rec = recorder(client, clocks)
    for i in range(500):
        rec.record(NODE, reason="ReclaimedLeakedIP", message=f"released 10.0.{i // 256}.{i % 256}")
        clocks.advance(0.01)
    report = rec.flush()
    assert (report.created, report.patched, report.failed) == (1, 0, 0)

    [post] = event_writes(api)
    assert post.method == "POST" and post.path == "/api/v1/namespaces/default/events"
    body = post.body
    assert body["count"] == 500
    # uid = the node's name, as the kubelet sets it: what `kubectl describe node` searches by.
    assert body["involvedObject"] == {"kind": "Node", "name": "node-a", "apiVersion": "v1", "uid": "node-a"}
    assert body["reason"] == "ReclaimedLeakedIP" and body["type"] == "Normal"
    assert body["message"] == "released 10.0.1.243"  # the latest
    assert body["firstTimestamp"] == "2024-05-01T12:00:00Z"
    assert body["lastTimestamp"] == "2024-05-01T12:00:05Z"
    assert body["source"] == {"component": "nodegc", "host": "node-a"}
    assert body["reportingComponent"] == "nodegc" and body["reportingInstance"] == "node-a"
    assert body["metadata"]["name"].startswith("node-a.")

    # More of the same: the same Event's count goes up, through a patch.
    clocks.advance(30)
    for _ in range(3):
        rec.record(NODE, reason="ReclaimedLeakedIP", message="released 10.0.9.9")
    assert rec.flush().patched == 1
    patch = event_writes(api)[1]
    assert patch.method == "PATCH"
    assert patch.path == f"/api/v1/namespaces/default/events/{body['metadata']['name']}"
    assert patch.headers["content-type"] == "application/merge-patch+json"
    assert patch.body == {
        "count": 503, "lastTimestamp": "2024-05-01T12:00:35Z", "message": "released 10.0.9.9"}
    [stored] = api.objects("events", namespace="default")
    assert stored["count"] == 503

    # Nothing new: a flush writes nothing.
    assert rec.flush().patched == 0
    assert len(event_writes(api)) == 2


def test_keys_are_object_type_and_reason(api: FakeKubeAPI, client: lightkube.Client, clocks: Clocks) -> None:
    rec = recorder(client, clocks)
    pod = ObjectRef.pod("shop", "api-1", "uid-1")
    rec.record(NODE, reason="ReclaimedLeakedIP", message="a")
    rec.record(NODE, reason="ReclaimFailed", message="b", type=EventType.WARNING)
    rec.record(pod, reason="ReclaimedVolumeMount", message="c")
    rec.record(pod, reason="ReclaimedVolumeMount", message="d")
    assert rec.pending() == 3
    assert rec.flush().created == 3
    assert rec.pending() == 0
    pod_events = api.objects("events", namespace="shop")
    assert [(e["involvedObject"]["kind"], e["involvedObject"]["uid"], e["count"]) for e in pod_events] == [
        ("Pod", "uid-1", 2)]
    assert sorted((e["reason"], e["type"]) for e in api.objects("events", namespace="default")) == [
        ("ReclaimFailed", "Warning"), ("ReclaimedLeakedIP", "Normal")]


def test_writes_are_capped_per_minute_and_the_rest_waits(
    api: FakeKubeAPI, client: lightkube.Client, clocks: Clocks
) -> None:
    rec = recorder(client, clocks, max_per_minute=3)
    for i in range(10):
        rec.record(ObjectRef.pod("shop", f"p{i}"), reason="ReclaimedNetns", message="x")
    first = rec.flush()
    assert (first.created, first.deferred) == (3, 7)
    clocks.advance(30)
    assert rec.flush().created == 0  # still within the minute of the first three
    clocks.advance(30)
    assert rec.flush().created == 3
    clocks.advance(60)
    assert rec.flush().created == 3
    clocks.advance(60)
    last = rec.flush()
    assert (last.created, last.deferred) == (1, 0)
    assert len(event_writes(api)) == 10
    assert len(api.objects("events", namespace="shop")) == 10


def test_a_failed_write_is_kept_for_the_next_flush(
    api: FakeKubeAPI, client: lightkube.Client, clocks: Clocks
) -> None:
    rec = recorder(client, clocks)
    rec.record(NODE, reason="ReclaimFailed", message="umount timed out", type=EventType.WARNING)
    api.fail_next(503, path_prefix="/api/v1/namespaces/default/events")
    report = rec.flush()
    assert report.failed == 1 and "503" in report.errors[0]
    assert rec.pending() == 1
    rec.record(NODE, reason="ReclaimFailed", message="umount timed out again", type=EventType.WARNING)
    assert rec.flush().created == 1
    [stored] = api.objects("events", namespace="default")
    assert stored["count"] == 2 and stored["message"] == "umount timed out again"


def test_an_expired_event_is_created_again(
    api: FakeKubeAPI, client: lightkube.Client, clocks: Clocks
) -> None:
    rec = recorder(client, clocks)
    rec.record(NODE, reason="ReclaimedLeakedIP", message="a")
    rec.flush()
    [first] = api.objects("events", namespace="default")
    api.delete("events", "default", first["metadata"]["name"])  # the API server's event TTL
    rec.record(NODE, reason="ReclaimedLeakedIP", message="b")
    report = rec.flush()
    assert report.created == 1 and report.failed == 0
    assert [r.method for r in event_writes(api)] == ["POST", "PATCH", "POST"]
    [again] = api.objects("events", namespace="default")
    assert again["count"] == 2 and again["metadata"]["name"] != first["metadata"]["name"]


def test_maybe_flush_waits_for_the_interval(
    api: FakeKubeAPI, client: lightkube.Client, clocks: Clocks
) -> None:
    rec = recorder(client, clocks, flush_interval=10.0)
    rec.record(NODE, reason="R", message="m")
    assert rec.maybe_flush() is not None
    rec.record(NODE, reason="R", message="m")
    assert rec.maybe_flush() is None
    clocks.advance(10)
    flushed = rec.maybe_flush()
    assert flushed is not None and flushed.patched == 1


def test_memory_is_bounded(api: FakeKubeAPI, client: lightkube.Client, clocks: Clocks) -> None:
    rec = recorder(client, clocks, max_series=2)
    rec.record(ObjectRef.pod("shop", "a"), reason="R", message="m")
    rec.record(ObjectRef.pod("shop", "b"), reason="R", message="m")
    rec.record(ObjectRef.pod("shop", "c"), reason="R", message="m")  # both others still pending: dropped
    assert rec.dropped == 1
    rec.flush()
    rec.record(ObjectRef.pod("shop", "c"), reason="R", message="m")  # now a sent key makes room
    assert rec.dropped == 1 and rec.pending() == 1


def test_background_flushing_and_stop(api: FakeKubeAPI, client: lightkube.Client) -> None:
    rec = EventRecorder(client, flush_interval=0.05)
    rec.start()
    try:
        rec.record(NODE, reason="R", message="m")
        assert api.wait_for(lambda: len(api.objects("events", namespace="default")) == 1)
        rec.record(NODE, reason="Last", message="m")
    finally:
        rec.stop()
    assert len(api.objects("events", namespace="default")) == 2
