"""Run by tests/host/test_fixture_reaper.py (not collected on its own: the name is not test_*): a test that
holds the `containerd_node` fixture with a running sandbox, says where everything is, and waits to be
killed."""

from __future__ import annotations

import json
import sys
import time

from nodegc.sandbox.containerd import SandboxContainerd, SandboxSpec
from nodegc.sandbox.node import SandboxNode


def test_holds_containerd(containerd_node: tuple[SandboxNode, SandboxContainerd]) -> None:
    node, rt = containerd_node
    rt.run_sandbox(SandboxSpec("web-0", "shop", "uid-web-0"))
    shims = rt.shim_pids()
    assert rt.proc is not None and shims
    print(json.dumps({"root": str(node.root), "config": str(rt.config), "cgroup": rt.cgroup_parent,
                      "pids": [rt.proc.pid, *shims]}), flush=True)
    sys.stdout.flush()
    time.sleep(600)
