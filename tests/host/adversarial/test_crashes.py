"""Crash findings on a real sandbox node (real mounts, netns, CNI plugins): the audit trail after a SIGKILL
between a step and its record, and cache entries no ledger or terminal can carry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodegc.sandbox.node import SandboxNode


def _roots(node: SandboxNode) -> list[str]:
    r = node.roots
    return ["--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir),
            "--netns-dir", str(r.netns_dir), "--net-ns", str(r.net_ns), "--cni-bin-dir", "/usr/lib/cni"]


def _clean(node: SandboxNode, state: Path) -> list[str]:
    return [sys.executable, "-m", "nodegc", "clean", "--apply", "--pods-from", str(node.root / "pods.json"),
            "--min-age", "0", *_roots(node), "--state-dir", str(state), "-o", "json"]


def _nodegc(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nodegc", *argv], capture_output=True, text=True, timeout=120,
                          check=False, env={**os.environ, "LANG": "C.UTF-8"})


@pytest.mark.parametrize(("fault", "kind"), [("after_clean:pod_dir", "pod_dir"), ("after_clean:netns", "netns"),
                                             ("after_clean:ip_reservation", "ip_reservation")])
def test_history_and_explain_say_nodegc_removed_what_it_removed_before_a_sigkill(
    sandbox_node: SandboxNode, tmp_path: Path, fault: str, kind: str,
) -> None:
    node = sandbox_node
    node.add_pod("live")
    gone = node.add_pod("gone")
    if kind == "pod_dir":
        node.delete_leaving_dir(gone)
    else:
        node.delete_without_cni_del(gone)
    node.write_snapshot(node.root / "pods.json")
    state = tmp_path / "state"
    crashed = subprocess.run(_clean(node, state), env={**os.environ, "NODEGC_FAULT": fault}, capture_output=True,
                             timeout=300, check=False)
    assert crashed.returncode == -9, crashed.stderr.decode()[-2000:]
    rerun = subprocess.run(_clean(node, state), capture_output=True, timeout=300, check=False)
    assert rerun.returncode == 0, rerun.stdout.decode()[-3000:]

    shown = _nodegc("history", "--state-dir", str(state), "--kind", kind, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)["items"]
    closing = [r for r in rows if r["to"] == "closed"]
    assert len(closing) == 1, rows
    assert "gone before it was reclaimed" not in closing[0]["reason"]
    assert "removed by nodegc" in closing[0]["reason"] and "restart" in closing[0]["reason"]

    item = closing[0]["item"].split(":", 1)[1]
    explained = _nodegc("explain", item, "--state-dir", str(state))
    assert explained.returncode == 0, explained.stderr
    assert "removed by nodegc" in explained.stdout and "gone before it was reclaimed" not in explained.stdout


def test_scan_and_clean_survive_cache_entries_no_terminal_can_print(sandbox_node: SandboxNode,
                                                                      tmp_path: Path) -> None:
    """A cache entry with "\\ud800" in its pod name and one with a non-UTF-8 file name, next to real
    attachments: `scan -o json` printed a traceback and the ledger write crashed `clean --apply`."""
    node = sandbox_node
    live = node.add_pod("live")
    node.delete_without_cni_del(node.add_pod("gone"))
    node.write_snapshot(node.root / "pods.json")
    results = node.roots.cni_data_dir / "results"
    real = json.loads(node.cache_path(live).read_text())
    odd = dict(real, containerId="f" * 64, cniArgs=[["K8S_POD_NAME", "x\ud800"], ["K8S_POD_UID", "u-odd"]])
    (results / f"{real['networkName']}-{'f' * 64}-eth0").write_text(json.dumps(odd))
    with open(os.fsencode(results) + b"/net-\xff-eth0", "w") as f:
        f.write(json.dumps(dict(real, containerId="e" * 64)))

    scanned = _nodegc("scan", "--pods-from", str(node.root / "pods.json"), "--min-age", "0", *_roots(node),
                      "-o", "json")
    assert scanned.returncode == 3, scanned.stderr[-2000:]
    doc = json.loads(scanned.stdout)
    assert sum("UTF-8" in p["reason"] or "Unicode" in p["reason"] for p in doc["problems"]) == 2
    state = tmp_path / "state"
    cleaned = _nodegc("clean", "--apply", "--pods-from", str(node.root / "pods.json"), "--min-age", "0",
                      *_roots(node), "--state-dir", str(state), "-o", "json")
    assert "Traceback" not in cleaned.stderr, cleaned.stderr[-2000:]
    assert cleaned.returncode == 0, cleaned.stdout[-2000:]
