"""A request's timeout bounds each read of the socket, not the answer: a server or proxy that sends a page
of a list or a GET a byte at a time, each within the timeout, held the desired state's fetch (and the
agent's cycle, or its watch thread's relist) for as long as it cared to. A page or GET is read within its
request's timeout as a whole."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from nodegc.desired.kube import KubeSource
from nodegc.desired.source import SourceError
from tests.adversarial.found9.conftest import RawBody, Tamper, pod
from tests.api.fakeapi import FakeKubeAPI, Reply

TIMEOUT = 1.0


def _bounded(fn: Any) -> tuple[float, BaseException | None]:
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            outcome.append(None)
        except BaseException as e:  # handed to the test thread
            outcome.append(e)

    started = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "still reading the answer after 30 s"
    return time.monotonic() - started, outcome[0]


def _trickled(body: dict[str, Any], query: dict[str, str]) -> Reply:
    return Reply(200, RawBody(json.dumps(body).encode(), trickle=TIMEOUT / 4))


def test_a_list_page_sent_a_byte_at_a_time_times_out(api: FakeKubeAPI, tamper: Tamper, kubeconfig: Path) -> None:
    api.add_pod(pod("web"))
    tamper.lists(_trickled)
    with KubeSource("n1", kubeconfig=kubeconfig, prove_current=False, timeout=TIMEOUT) as source:
        took, error = _bounded(source.fetch)
    assert isinstance(error, SourceError), error
    assert took < 5 * TIMEOUT


def test_a_get_sent_a_byte_at_a_time_times_out(api: FakeKubeAPI, tamper: Tamper, kubeconfig: Path) -> None:
    api.add_pod(pod("web"))
    tamper.gets(_trickled)
    with KubeSource("n1", kubeconfig=kubeconfig, prove_current=False, timeout=TIMEOUT) as source:
        took, error = _bounded(lambda: source.get_pod("default", "web"))
    assert isinstance(error, SourceError), error
    assert took < 5 * TIMEOUT


def test_a_node_lease_sent_a_byte_at_a_time_times_out(tamper: Tamper, kubeconfig: Path) -> None:
    """The proof that a list is current reads the node's Lease first: bounded alike."""
    tamper.api.start_kubelet("n1")
    tamper.api.add_pod(pod("web"))
    tamper.leases(_trickled)
    with KubeSource("n1", kubeconfig=kubeconfig, timeout=TIMEOUT) as source:
        took, error = _bounded(source.fetch)
    assert isinstance(error, SourceError), error
    assert took < 5 * TIMEOUT


def test_an_answer_in_time_is_read(api: FakeKubeAPI, tamper: Tamper, kubeconfig: Path) -> None:
    api.add_pod(pod("web"))
    tamper.lists(lambda body, query: Reply(200, RawBody(json.dumps(body).encode(), trickle=0.0005)))
    with KubeSource("n1", kubeconfig=kubeconfig, prove_current=False, timeout=TIMEOUT) as source:
        assert [p.name for p in source.fetch().pods] == ["web"]
