"""nodegc's NodeConditions against the fake API: strategic merge patches on nodes/<name>/status that carry
only nodegc's condition types, set and cleared, transition times kept across restarts (requests asserted)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lightkube
import pytest

from nodegc.api.client import make_client
from nodegc.kube.nodes import NodeConditionWriter
from nodegc.model.conditions import IP_RANGE_PRESSURE, RECLAIM_BLOCKED, NodeCondition
from nodegc.planning.conditions import node_conditions
from tests.api.fakeapi import FakeKubeAPI, RecordedRequest

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
KUBELET_READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready",
                 "lastHeartbeatTime": "2026-12-01T07:59:00Z", "lastTransitionTime": "2026-11-01T00:00:00Z"}


class Clock:
    def __init__(self) -> None:
        self.wall = T0
        self.mono = 10.0

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as server:
        server.add("nodes", {"metadata": {"name": "node-a"}, "status": {"conditions": [KUBELET_READY]}})
        yield server


@pytest.fixture
def client(api: FakeKubeAPI, tmp_path: Path) -> Iterator[lightkube.Client]:
    c = make_client(api.write_kubeconfig(tmp_path / "kubeconfig"))
    yield c
    c.close()


def writer(client: lightkube.Client, clock: Clock) -> NodeConditionWriter:
    return NodeConditionWriter(client, "node-a", clock=lambda: clock.wall, monotonic=lambda: clock.mono)


def status_patches(api: FakeKubeAPI) -> list[RecordedRequest]:
    return [r for r in api.requests if r.method == "PATCH"]


def conditions(api: FakeKubeAPI) -> dict[str, dict[str, str]]:
    node = api.get("nodes", "default", "node-a")
    assert node is not None
    return {c["type"]: c for c in node["status"]["conditions"]}


BLOCKED = NodeCondition(RECLAIM_BLOCKED, "True", "StaleDesiredState", "nodegc reclaims nothing: 300s old")
ALLOWED = NodeCondition(RECLAIM_BLOCKED, "False", "ReclaimAllowed", "nodegc can reclaim residue on this node")
HEADROOM = NodeCondition(IP_RANGE_PRESSURE, "False", "RangesHaveHeadroom", "every range has headroom")


def test_set_then_cleared_with_one_status_patch_each_and_the_kubelet_conditions_kept(
        api: FakeKubeAPI, client: lightkube.Client) -> None:
    clock = Clock()
    w = writer(client, clock)
    assert w.update([BLOCKED, HEADROOM])
    (get,) = [r for r in api.requests if r.method == "GET"]
    assert get.path == "/api/v1/nodes/node-a"
    (first,) = status_patches(api)
    assert first.path == "/api/v1/nodes/node-a/status"
    assert first.headers["content-type"].startswith("application/strategic-merge-patch+json")
    sent = first.body["status"]["conditions"]
    assert [c["type"] for c in sent] == [RECLAIM_BLOCKED, IP_RANGE_PRESSURE]
    assert set(first.body) == {"status"} and set(first.body["status"]) == {"conditions"}
    assert sent[0] == {"type": RECLAIM_BLOCKED, "status": "True", "reason": "StaleDesiredState",
                       "message": BLOCKED.message, "lastHeartbeatTime": "2026-12-01T08:00:00Z",
                       "lastTransitionTime": "2026-12-01T08:00:00Z"}
    have = conditions(api)
    assert have["Ready"] == KUBELET_READY and have[RECLAIM_BLOCKED]["status"] == "True"

    # Nothing changed: nothing is sent.
    clock.advance(30)
    assert w.update([BLOCKED, HEADROOM])
    assert len(status_patches(api)) == 1

    # The cause goes: the condition is cleared (False), with a new transition time; only it is sent.
    clock.advance(30)
    assert w.update([ALLOWED, HEADROOM])
    last = status_patches(api)[-1]
    (cleared,) = last.body["status"]["conditions"]
    assert cleared["type"] == RECLAIM_BLOCKED and cleared["status"] == "False"
    assert cleared["lastTransitionTime"] == "2026-12-01T08:01:00Z"
    have = conditions(api)
    assert have[RECLAIM_BLOCKED]["reason"] == "ReclaimAllowed" and have["Ready"] == KUBELET_READY


def test_heartbeat_rewrites_unchanged_conditions_keeping_their_transition_time(
        api: FakeKubeAPI, client: lightkube.Client) -> None:
    clock = Clock()
    w = writer(client, clock)
    w.update([HEADROOM])
    clock.advance(301)
    w.update([HEADROOM])
    beat = status_patches(api)[-1].body["status"]["conditions"][0]
    assert len(status_patches(api)) == 2
    assert beat["lastHeartbeatTime"] == "2026-12-01T08:05:01Z" and beat["lastTransitionTime"] == "2026-12-01T08:00:00Z"


def test_a_restarted_agent_keeps_the_transition_time_on_the_node(api: FakeKubeAPI, client: lightkube.Client) -> None:
    clock = Clock()
    writer(client, clock).update([BLOCKED])
    clock.advance(600)
    writer(client, clock).update([BLOCKED])
    assert conditions(api)[RECLAIM_BLOCKED]["lastTransitionTime"] == "2026-12-01T08:00:00Z"


def test_a_failed_patch_is_retried_at_the_next_update(api: FakeKubeAPI, client: lightkube.Client) -> None:
    clock = Clock()
    w = writer(client, clock)
    w.update([HEADROOM])
    api.fail_next(503, path_prefix="/api/v1/nodes/node-a/status")
    assert not w.update([BLOCKED])
    assert RECLAIM_BLOCKED not in conditions(api)
    sent = len(status_patches(api))
    clock.advance(30)
    assert not w.update([BLOCKED])  # backing off: nothing sent
    assert len(status_patches(api)) == sent
    clock.advance(31)
    assert w.update([BLOCKED])
    assert conditions(api)[RECLAIM_BLOCKED]["status"] == "True"


def test_a_missing_node_is_not_asked_for_every_cycle(api: FakeKubeAPI, client: lightkube.Client) -> None:
    clock = Clock()
    w = NodeConditionWriter(client, "node-gone", clock=lambda: clock.wall, monotonic=lambda: clock.mono)
    assert not w.update([BLOCKED])
    for _ in range(5):
        clock.advance(10)
        w.update([BLOCKED])
    assert len([r for r in api.requests if "node-gone" in r.path]) == 1


def test_the_planner_conditions_round_trip(api: FakeKubeAPI, client: lightkube.Client) -> None:
    w = writer(client, Clock())
    assert w.update(node_conditions(["blast_radius: 12 of 20 owners look orphaned"], []))
    have = conditions(api)
    assert have[RECLAIM_BLOCKED]["reason"] == "BlastRadiusGuard"
    assert have[IP_RANGE_PRESSURE]["status"] == "False"
