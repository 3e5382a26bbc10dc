"""`nodegc controller` serves /healthz and /readyz next to /metrics, as its Deployment's probes expect."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from nodegc.controller import add_controller_parser, cmd_controller
from nodegc.flags import Parser
from tests.api.fakeapi import FakeKubeAPI


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - a local test URL
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_controller_probes_and_metrics(api: FakeKubeAPI, tmp_path: Path) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    port = _free_port()
    parser = Parser(prog="nodegc")
    add_controller_parser(parser.add_subparsers(dest="command"), [])
    args = parser.parse_args(["controller", "--kubeconfig", str(kubeconfig), "--lease-namespace", "nodegc-system",
                              "--identity", "r1", "--interval", "0.2", "--metrics-address", f"127.0.0.1:{port}",
                              "--max-passes", "15"])
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(cmd_controller(args)))
    thread.start()
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        ready = (0, "")
        while time.monotonic() < deadline:
            try:
                ready = _get(f"{base}/readyz")
            except OSError:
                time.sleep(0.05)
                continue
            if ready[0] == 200:
                break
            time.sleep(0.05)
        assert ready[0] == 200 and "leader" in ready[1], ready
        live = _get(f"{base}/healthz")
        assert live[0] == 200 and "last loop turn" in live[1]
        status, body = _get(f"{base}/metrics")
        assert status == 200 and "nodegc_controller_leader 1.0" in body
    finally:
        thread.join(timeout=30)
    assert result == [0]
