"""`nodegc scan`'s per-range summary on a sandbox node built with the real CNI plugins: capacity from the
conf dir (and, without it, from the configs cached at ADD), reserved, live and leaked addresses."""

from __future__ import annotations

import json
import subprocess
import sys

from nodegc.sandbox.node import NETWORK_NAME, SandboxNode


def _scan(node: SandboxNode, *extra: str) -> subprocess.CompletedProcess[str]:
    r = node.roots
    snapshot = node.write_snapshot(node.root / "pods.json")
    return subprocess.run(
        [sys.executable, "-m", "nodegc", "scan", "--pods-from", str(snapshot), "--kubelet-root", str(r.kubelet_root),
         "--cni-conf-dir", str(r.cni_conf_dir), "--cni-data-dir", str(r.cni_data_dir), "--netns-dir",
         str(r.netns_dir), "--net-ns", str(r.net_ns), "--min-age", "0", *extra],
        capture_output=True, text=True, timeout=120, check=False)


def test_scan_summarizes_each_range_from_the_conf_dir_and_the_cache(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    node.add_pod("web")
    node.add_pod("api")
    leaky = node.add_pod("leaky")
    node.delete_without_cni_del(leaky)

    doc = json.loads(_scan(node, "-o", "json").stdout)
    assert doc["ipRanges"] == [{"network": NETWORK_NAME, "range": node.subnet, "capacity": 65533, "reserved": 3,
                                "live": 2, "leaked": 1, "held": 0, "free": 65530}]
    assert doc["ipRangeProblems"] == []
    table = _scan(node).stdout
    header, row = [line for line in table.splitlines() if line.startswith(("NETWORK", NETWORK_NAME))]
    assert header.split() == ["NETWORK", "RANGE", "CAPACITY", "RESERVED", "LIVE", "LEAKED", "OTHER", "FREE", "USED"]
    assert row.split() == [NETWORK_NAME, node.subnet, "65533", "3", "2", "1", "0", "65530", "0.0%"]

    # The conf dir loses the network (a new CNI config was rolled out): the cached configs still describe
    # the range of the reservations made under it; a broken file is a range problem, not a scan failure.
    node.conflist_path.unlink()
    (node.cni_conf_dir / "00-broken.conflist").write_text('{"name": "x", "plugins": [')
    result = _scan(node, "-o", "json")
    assert result.returncode == 3, result.stderr  # residue found, as before
    doc = json.loads(result.stdout)
    assert [(r["range"], r["capacity"], r["leaked"]) for r in doc["ipRanges"]] == [(node.subnet, 65533, 1)]
    assert any("00-broken.conflist" in p for p in doc["ipRangeProblems"])
