"""Races against the desired state's photograph, on a sandbox node with the real CNI plugins."""

from __future__ import annotations

import os
import time

from nodegc.sandbox.node import SandboxNode
from tests.host.adversarial.evidence import held, nodegc, root_flags


def test_a_pod_born_after_the_snapshot_is_not_torn_down(sandbox_node: SandboxNode) -> None:
    """The snapshot is fresh enough for --max-desired-age, and the pod is older than --min-age counted
    from the scan; but it was created after the snapshot was written, so the snapshot cannot show it."""
    node = sandbox_node
    node.add_pod("old")
    snapshot = node.write_snapshot(node.root / "pods.json")  # the photo: taken before "new" exists
    written = snapshot.stat().st_mtime
    os.utime(snapshot, (written - 1, written - 1))
    new = node.add_pod("new", host_port=8081)
    before = held(node, new)
    assert before["eth0"].startswith("eth0") and before["mounted_volumes"]
    time.sleep(2.5)  # "new" is now older than --min-age 2, and the snapshot younger than --max-desired-age 30
    result = nodegc("clean", "--apply", "--pods-from", str(snapshot), *root_flags(node), "--min-age", "2",
                    "--max-desired-age", "30", "--state-dir", str(node.root / "state"), "-o", "json")
    assert result.returncode in (0, 3), result.stderr[-3000:]
    assert held(node, new) == before, result.stdout[-3000:]
