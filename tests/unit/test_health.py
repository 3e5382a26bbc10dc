"""The agent's HTTP endpoints on a real socket (127.0.0.1, port 0), and the heartbeat's rules."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator

import pytest

from nodegc.observe.health import HealthServer, HealthServerError, Heartbeat
from nodegc.observe.metrics import Metrics


class Flags:
    def __init__(self) -> None:
        self.live: tuple[bool, str] = (True, "turning")
        self.ready: tuple[bool, str] = (False, "desired state not synced")

    def get_live(self) -> tuple[bool, str]:
        return self.live

    def get_ready(self) -> tuple[bool, str]:
        return self.ready


def get(port: int, path: str, method: str = "GET") -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read().decode()
    finally:
        conn.close()


@pytest.fixture
def flags() -> Flags:
    return Flags()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def server(flags: Flags, metrics: Metrics) -> Iterator[HealthServer]:
    s = HealthServer("127.0.0.1", 0, metrics=metrics, live=flags.get_live, ready=flags.get_ready).start()
    try:
        yield s
    finally:
        s.shutdown()


def test_metrics_serves_the_given_registry(server: HealthServer, metrics: Metrics) -> None:
    metrics.blocked("stale_source")
    metrics.desired_age(7.0)
    status, ctype, body = get(server.port, "/metrics")
    assert status == 200
    assert ctype.startswith("text/plain")
    assert 'nodegc_actions_blocked_total{reason="stale_source"} 1.0' in body
    assert "nodegc_desired_state_age_seconds 7.0" in body


def test_healthz_follows_live(server: HealthServer, flags: Flags) -> None:
    assert get(server.port, "/healthz")[::2] == (200, "ok: turning\n")
    flags.live = (False, "last cycle started 400s ago")
    status, _, body = get(server.port, "/healthz")
    assert status == 503
    assert body == "not ok: last cycle started 400s ago\n"


def test_readyz_follows_ready_not_live(server: HealthServer, flags: Flags) -> None:
    status, _, body = get(server.port, "/readyz")
    assert (status, body) == (503, "not ok: desired state not synced\n")
    flags.ready = (True, "synced")
    assert get(server.port, "/readyz")[::2] == (200, "ok: synced\n")
    assert get(server.port, "/healthz")[0] == 200


def test_a_check_that_raises_is_a_503_with_the_reason(metrics: Metrics) -> None:
    def boom() -> tuple[bool, str]:
        raise RuntimeError("ledger closed")

    s = HealthServer("127.0.0.1", 0, metrics=metrics, live=boom, ready=boom).start()
    try:
        status, _, body = get(s.port, "/readyz")
        assert status == 503
        assert "RuntimeError: ledger closed" in body
        assert get(s.port, "/metrics")[0] == 200
    finally:
        s.shutdown()


def test_unknown_path_query_and_head(server: HealthServer) -> None:
    assert get(server.port, "/nope")[0] == 404
    assert get(server.port, "/healthz?verbose=1")[0] == 200
    status, _, body = get(server.port, "/healthz", method="HEAD")
    assert (status, body) == (200, "")


def test_metrics_disabled_is_404_but_probes_answer(flags: Flags) -> None:
    s = HealthServer("127.0.0.1", 0, metrics=None, live=flags.get_live, ready=flags.get_ready).start()
    try:
        assert get(s.port, "/metrics")[0] == 404
        assert get(s.port, "/healthz")[0] == 200
    finally:
        s.shutdown()


def test_shutdown_frees_the_port_and_is_idempotent(flags: Flags) -> None:
    s = HealthServer("127.0.0.1", 0, metrics=None, live=flags.get_live, ready=flags.get_ready).start()
    port = s.port
    s.shutdown()
    s.shutdown()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))


def test_port_in_use_is_our_error(flags: Flags) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        s = HealthServer("127.0.0.1", port, metrics=None, live=flags.get_live, ready=flags.get_ready)
        with pytest.raises(HealthServerError) as err:
            s.start()
        assert isinstance(err.value.__cause__, OSError)
        with pytest.raises(HealthServerError):
            _ = s.port


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_heartbeat_live_until_the_loop_stalls() -> None:
    clock = Clock()
    hb = Heartbeat(30, stall_intervals=3, clock=clock)
    assert hb.live() == (True, "starting")
    clock.t += 91
    ok, reason = hb.live()
    assert not ok and "no cycle started" in reason
    hb.cycle_started()
    assert hb.live()[0]
    clock.t += 90
    assert hb.live()[0]
    clock.t += 1
    ok, reason = hb.live()
    assert not ok and "stuck" in reason


def test_heartbeat_ready_only_when_the_desired_state_is_synced_and_fresh() -> None:
    clock = Clock()
    hb = Heartbeat(10, stall_intervals=3, clock=clock)
    assert hb.ready() == (False, "no cycle finished yet")
    hb.cycle_started()
    hb.cycle_finished(["blast_radius"])  # a guard that is not about the desired state: still ready
    assert hb.ready()[0]
    hb.cycle_finished(["stale_source", "rate_limit"])
    assert hb.ready() == (False, "desired state not synced (stale_source)")
    hb.cycle_finished(error="ledger is locked")
    assert hb.ready() == (False, "last cycle failed: ledger is locked")
    hb.cycle_finished()
    assert hb.ready()[0]
    clock.t += 31
    ok, reason = hb.ready()
    assert not ok and "finished 31s ago" in reason
