"""A request's timeout bounds each read of the socket, not the answer. Lists, GETs and the node Lease were
read whole within 3 read timeouts (found9), but an error answer's body (a 5xx or a 409 with its Status) was
read with `response.read()`, and every write went through lightkube, which reads its answer the same way: a
server or proxy sending the answer a byte at a time, each byte within the timeout, held the cycle (an Event
flush, the node's conditions), the controller's sweep (an EndpointSlice patch) or its Lease renewal for as
long as it cared to. Each answer is now read whole within 3 read timeouts, through lightkube's own requests
and decoding. The test API server is rewritten on the wire, never the client."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lightkube
import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType

from nodegc.api.client import make_client
from nodegc.api.errors import KubeError, call
from nodegc.api.streaming import Requests
from nodegc.desired.kube import KubeSource
from nodegc.desired.source import SourceError
from nodegc.kube.endpointslices import RawEndpointSlice
from nodegc.kube.events import EventRecorder, ObjectRef
from nodegc.kube.leases import LeaderElector, LeaseConfig
from nodegc.kube.nodes import NodeConditionWriter
from nodegc.model.conditions import RECLAIM_BLOCKED, NodeCondition
from tests.adversarial.found9.conftest import RawBody, pod, send_raw_bodies
from tests.api.fakeapi import FakeKubeAPI, Reply, status_object

TIMEOUT = 1.0
BOUND = 5 * TIMEOUT
"""3 read timeouts for the answer, one for its headers, and some slack on a loaded machine."""

Match = Callable[[str, str], bool]


class Trickle:
    """Answers the requests `match(method, path)` selects a byte every TIMEOUT/4 s (with `code`, or the
    server's own status and body)."""

    def __init__(self, api: FakeKubeAPI) -> None:
        self.api = api
        self.rules: list[tuple[Match, int | None]] = []
        self.hits = 0

    def on(self, match: Match, *, code: int | None = None) -> None:
        self.rules.append((match, code))

    def wrap(self, method: str, raw_path: str, headers: Any, raw_body: bytes = b"") -> Any:
        reply = FakeKubeAPI.handle(self.api, method, raw_path, headers, raw_body)
        path = raw_path.split("?", 1)[0]
        for match, code in self.rules:
            if isinstance(reply, Reply) and match(method, path):
                self.hits += 1
                body = reply.body if code is None else status_object(code, "trickled failure")
                return Reply(code or reply.code, RawBody(json.dumps(body).encode(), trickle=TIMEOUT / 4))
        return reply


@pytest.fixture
def trickle(api: FakeKubeAPI, monkeypatch: pytest.MonkeyPatch) -> Trickle:
    t = Trickle(api)
    monkeypatch.setattr(api, "handle", t.wrap)
    send_raw_bodies(monkeypatch)
    return t


@pytest.fixture
def client(kubeconfig: Path) -> Iterator[lightkube.Client]:
    c = make_client(kubeconfig, timeout=TIMEOUT, field_manager="nodegc-test")
    yield c
    c.close()


def bounded(fn: Callable[[], Any]) -> tuple[float, Any, BaseException | None]:
    """(seconds taken, result, exception) of fn run in a thread, failing the test past 30 s."""
    outcome: list[tuple[Any, BaseException | None]] = []

    def run() -> None:
        try:
            outcome.append((fn(), None))
        except BaseException as e:  # handed to the test thread
            outcome.append((None, e))

    started = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "still reading the answer after 30 s"
    return time.monotonic() - started, *outcome[0]


def _is(method: str, part: str) -> Match:
    return lambda m, path: m == method and part in path


# -- error answers -----------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [500, 404, 403])
def test_a_live_gets_error_answer_sent_a_byte_at_a_time_times_out(
        api: FakeKubeAPI, trickle: Trickle, kubeconfig: Path, code: int) -> None:
    api.add_pod(pod("web"))
    trickle.on(_is("GET", "/pods/web"), code=code)
    with KubeSource("n1", kubeconfig=kubeconfig, prove_current=False, timeout=TIMEOUT) as source:
        took, _, error = bounded(lambda: source.get_pod("default", "web"))
    assert trickle.hits and isinstance(error, SourceError), error
    assert took < BOUND


def test_a_lists_error_answer_sent_a_byte_at_a_time_times_out(
        api: FakeKubeAPI, trickle: Trickle, kubeconfig: Path) -> None:
    api.add_pod(pod("web"))
    trickle.on(lambda m, path: m == "GET" and path.endswith("/pods"), code=503)
    with KubeSource("n1", kubeconfig=kubeconfig, prove_current=False, timeout=TIMEOUT) as source:
        took, _, error = bounded(source.fetch)
    assert isinstance(error, SourceError), error
    assert took < BOUND


def test_an_error_answer_in_time_keeps_its_status(api: FakeKubeAPI, kubeconfig: Path, client: lightkube.Client,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounded read hands lightkube the answer as sent: a 404 of the object is still a NotFound, a 409 a
    conflict."""
    with pytest.raises(KubeError) as missing:
        call("get", lambda: Requests(client).get(Lease, "none", namespace="default"))
    assert missing.value.not_found
    lease = Lease(metadata=ObjectMeta(name="l", namespace="default"))
    call("create", lambda: Requests(client).create(lease))
    with pytest.raises(KubeError) as twice:
        call("create", lambda: Requests(client).create(Lease(metadata=ObjectMeta(name="l", namespace="default"))))
    assert twice.value.conflict


# -- writes ------------------------------------------------------------------------------------------


def test_a_write_answer_sent_a_byte_at_a_time_times_out(trickle: Trickle, client: lightkube.Client) -> None:
    trickle.on(_is("POST", "/leases"))
    lease = Lease(metadata=ObjectMeta(name="l", namespace="default"))
    took, _, error = bounded(lambda: call("creating lease", lambda: Requests(client).create(lease)))
    assert isinstance(error, KubeError) and error.timed_out, error
    assert took < BOUND


def test_a_write_answer_in_time_is_lightkubes_typed_object(client: lightkube.Client) -> None:
    lease = Requests(client).create(Lease(metadata=ObjectMeta(name="l", namespace="default")))
    assert isinstance(lease, Lease) and lease.metadata is not None and lease.metadata.resourceVersion
    patched = Requests(client).patch(Lease, "l", {"spec": {"holderIdentity": "me"}}, namespace="default",
                                     patch_type=PatchType.MERGE)
    assert isinstance(patched, Lease) and patched.spec is not None and patched.spec.holderIdentity == "me"
    got = Requests(client).get(Lease, "l", namespace="default")
    assert got.spec is not None and got.spec.holderIdentity == "me"


def test_an_event_flush_whose_answer_trickles_is_bounded(trickle: Trickle, client: lightkube.Client) -> None:
    trickle.on(_is("POST", "/events"))
    recorder = EventRecorder(client, component="nodegc", host="n1")
    recorder.record(ObjectRef.node("n1"), reason="ResidueReclaimed", message="one")
    took, report, error = bounded(recorder.flush)
    assert error is None and report.failed == 1 and report.created == 0, (error, report)
    assert took < BOUND


def test_an_event_update_whose_answer_trickles_is_bounded(trickle: Trickle, client: lightkube.Client,
                                                          api: FakeKubeAPI) -> None:
    recorder = EventRecorder(client, component="nodegc", host="n1", flush_interval=0)
    recorder.record(ObjectRef.node("n1"), reason="ResidueReclaimed", message="one")
    assert recorder.flush().created == 1
    trickle.on(_is("PATCH", "/events/"))
    recorder.record(ObjectRef.node("n1"), reason="ResidueReclaimed", message="one")
    took, report, error = bounded(recorder.flush)
    assert error is None and report.failed == 1, (error, report)
    assert took < BOUND
    assert Event is not None


def test_a_lease_renewal_whose_answer_trickles_loses_leadership_in_time(
        trickle: Trickle, client: lightkube.Client) -> None:
    config = LeaseConfig(namespace="default", name="nodegc-controller", identity="a")
    elector = LeaderElector(client, config)
    assert elector.try_acquire_or_renew() and elector.is_leader()
    trickle.on(_is("PATCH", "/leases/nodegc-controller"))
    took, renewed, error = bounded(elector.try_acquire_or_renew)
    assert error is None and renewed is False and not elector.is_leader()
    assert took < BOUND


def test_a_lease_read_whose_answer_trickles_is_bounded(trickle: Trickle, client: lightkube.Client) -> None:
    trickle.on(_is("GET", "/leases/nodegc-controller"))
    elector = LeaderElector(client, LeaseConfig(namespace="default", name="nodegc-controller", identity="a"))
    took, acquired, error = bounded(elector.try_acquire_or_renew)
    assert error is None and acquired is False
    assert took < BOUND


def test_a_node_condition_patch_whose_answer_trickles_is_bounded(
        trickle: Trickle, client: lightkube.Client, api: FakeKubeAPI) -> None:
    api.add("nodes", {"metadata": {"name": "n1"}, "status": {"conditions": []}})
    trickle.on(_is("PATCH", "/nodes/n1/status"))
    writer = NodeConditionWriter(client, "n1")
    condition = NodeCondition(type=RECLAIM_BLOCKED, status="True", reason="StaleDesiredState", message="stale")
    took, written, error = bounded(lambda: writer.update([condition]))
    assert error is None and written is False
    assert took < BOUND


def test_an_endpointslice_patch_whose_answer_trickles_is_bounded(
        trickle: Trickle, client: lightkube.Client, api: FakeKubeAPI) -> None:
    api.add("endpointslices", {"metadata": {"name": "web-x", "namespace": "default",
                                            "labels": {"kubernetes.io/service-name": "web"}},
                               "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.9"]}]})
    trickle.on(_is("PATCH", "/endpointslices/web-x"))
    took, _, error = bounded(lambda: call("patching endpointslice", lambda: Requests(client).patch(
        RawEndpointSlice, "web-x", {"endpoints": []}, namespace="default", patch_type=PatchType.MERGE)))
    assert isinstance(error, KubeError) and error.timed_out, error
    assert took < BOUND
