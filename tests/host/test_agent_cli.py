"""`nodegc agent`, `history` and `explain` as a user runs them, against a sandbox node."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from nodegc.ledger.store import Ledger
from nodegc.sandbox.node import SandboxNode


def nodegc(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nodegc", *argv], capture_output=True, text=True, timeout=300,
                          check=False)


def test_agent_reclaims_after_k_scans_and_keeps_an_audit_trail(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    node = sandbox_node
    node.add_pod("live")
    gone = node.add_pod("gone", host_port=8088)
    node.delete_without_cni_del(gone)
    snapshot = node.write_snapshot(node.root / "pods.json")
    r = node.roots
    state = tmp_path / "state"
    roots = ["--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir), "--netns-dir",
             str(r.netns_dir), "--net-ns", str(r.net_ns), "--cni-bin-dir", "/usr/lib/cni"]
    agent = nodegc("agent", "--pods-from", str(snapshot), *roots, "--state-dir", str(state), "--min-age", "0",
                   "--interval", "0.1", "--consecutive-scans", "3", "--grace", "0", "--metrics-address", "",
                   "--max-cycles", "4", "--log-format", "json", "--log-level", "info")
    assert agent.returncode == 0, agent.stderr[-3000:]
    events = [json.loads(line) for line in agent.stderr.splitlines() if line.startswith("{")]
    assert any(e.get("event") == "reclaim" and e.get("result") == "ok" for e in events)
    scan = nodegc("scan", "--pods-from", str(snapshot), *roots, "--min-age", "0", "-o", "json")
    assert scan.returncode == 0, scan.stdout[-3000:]

    history = nodegc("history", "--state-dir", str(state), "--owner", gone.uid, "-o", "json")
    doc = json.loads(history.stdout)
    assert (doc["apiVersion"], doc["kind"]) == ("nodegc.io/v1alpha1", "History")
    rows = doc["items"]
    by_item: dict[str, list[str]] = {}
    for row in rows:
        by_item.setdefault(row["item"], []).append(row["to"])
    assert by_item and all(p == ["detected", "marked", "terminating", "cleaned", "closed"] for p in by_item.values())
    explain = nodegc("explain", "--state-dir", str(state), f"k8s-pod-network/{gone.ip}")
    assert explain.returncode == 0, explain.stderr
    assert "phase     closed" in explain.stdout and "orphaned in 3 consecutive scans" in explain.stdout

    # A second nodegc on the same ledger is refused while the first holds it.
    with Ledger(state / "ledger.db"):
        second = nodegc("clean", "--apply", "--pods-from", str(snapshot), *roots, "--state-dir", str(state))
    assert second.returncode == 5 and "another nodegc holds the ledger lock" in second.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - a loopback URL built here
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.parametrize("watch", [True, False])
def test_agent_serves_metrics_and_health_and_stops_on_sigterm(sandbox_node: SandboxNode, tmp_path: Path,
                                                              watch: bool) -> None:
    node = sandbox_node
    node.add_pod("live")
    snapshot = node.write_snapshot(node.root / "pods.json")
    r = node.roots
    port = _free_port()
    argv = [sys.executable, "-m", "nodegc", "agent", "--pods-from", str(snapshot), "--kubelet-root",
            str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir), "--netns-dir", str(r.netns_dir),
            "--net-ns", str(r.net_ns), "--state-dir", str(tmp_path / "state"), "--interval", "0.5",
            "--metrics-address", f"127.0.0.1:{port}", *([] if watch else ["--no-watch-pod-dirs"])]
    agent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        status = 0
        while time.monotonic() < deadline:
            try:
                status, _ = _get(f"http://127.0.0.1:{port}/readyz")
            except OSError:
                status = 0
            if status == 200:
                break
            time.sleep(0.2)
        assert status == 200
        assert _get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        code, body = _get(f"http://127.0.0.1:{port}/metrics")
        assert code == 200 and "nodegc_scan_duration_seconds_count" in body
        assert 'nodegc_pod_dir_watch_fallbacks_total{reason="watch_limit"} 0.0' in body
        if not watch:
            assert "nodegc_pod_dir_watch_active 0.0" in body
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=30) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
