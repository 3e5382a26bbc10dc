"""An orphan shim (a containerd shim whose id the runtime does not list) is an Event on the Node, one per
cycle's report, aggregated by the recorder like every other."""

from __future__ import annotations

import lightkube

from nodegc.agent import record_events
from nodegc.engine.cycle import CycleReport
from nodegc.kube.events import EventRecorder
from nodegc.model.findings import Finding, FindingClass, Owner
from nodegc.model.pods import OwnerState
from nodegc.model.resources import Kind
from tests.api.fakeapi import FakeKubeAPI


def test_orphan_shims_are_node_events(api: FakeKubeAPI, client: lightkube.Client) -> None:
    sid = "a" * 64
    shim = Finding(FindingClass.RUNTIME_LEFTOVER, Kind.RUNTIME_LEFTOVER, "/proc/4242", Owner(container_id=sid),
                   OwnerState.ABSENT, ("shim of id aaaaaaaaaaaa (pid 4242): the runtime lists no such sandbox",))
    events = EventRecorder(client, instance="node-a", host="node-a")
    for _ in range(3):
        record_events(events, "node-a", CycleReport(orphan_shims=[shim]))
    assert events.flush().created == 1
    [event] = api.objects("events", namespace="default")
    assert event["reason"] == "OrphanShim" and event["type"] == "Warning" and event["count"] == 3
    assert event["involvedObject"]["kind"] == "Node" and event["involvedObject"]["name"] == "node-a"
    assert "/proc/4242" in event["message"] and sid[:12] in event["message"]
