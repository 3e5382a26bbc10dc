"""The agent's pod sees /sys/fs/cgroup through a cgroup namespace of its own (cgroup v2): its root is the
pod's cgroup, which holds no kubepods tree, and its mountinfo root field reads `/`. Removing a dead
container's cgroup there found nothing and counted it as already gone: the cgroup stayed on the node and the
bundle that names it went. Now a view that is not its hierarchy's root cgroup and does not show the top of
the container's cgroup path is "cannot tell" (the step fails, the bundle stays); the node's tree mounted in
the pod (a hostPath, whose root field reads `/../..` from inside the namespace) is used and the cgroup goes.

Real parts: a real cgroup namespace entered by a process placed in a real cgroup, cgroup2 mounted in it, and
the node's hierarchy bind-mounted beside it, in a private mount namespace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

CHILD = r"""
import json, subprocess, sys
from pathlib import Path
from nodegc.hostio.mountinfo import read_mounts
from nodegc.reclaim.runtime_leftovers import _remove_cgroups
try:
    from nodegc.reclaim.runtime_leftovers import cgroup_view_doubt
except ImportError:  # before the view was checked at all
    cgroup_view_doubt = lambda root, mounts: None
ns, host, node, cid, path = sys.argv[1:6]
subprocess.run(["mount", "-t", "cgroup2", "none", ns], check=True, timeout=10)
subprocess.run(["mount", "--bind", node, host], check=True, timeout=10)
mounts, _ = read_mounts(Path("/proc"))
own = open("/proc/self/cgroup").read().splitlines()[-1]
def said(out):
    return out if isinstance(out, str) else {"ok": out.ok, "gone": out.already_gone, "detail": out.detail}
result = {"own": own, "ns_doubt": cgroup_view_doubt(Path(ns), mounts),
          "ns": said(_remove_cgroups(cid, path, mounts=mounts, cgroup_root=Path(ns))),
          "ns_left": Path(node + path).is_dir(),
          "host_doubt": cgroup_view_doubt(Path(host), mounts),
          "host": said(_remove_cgroups(cid, path, mounts=mounts, cgroup_root=Path(host))),
          "host_left": Path(node + path).is_dir()}
def agent(root):
    # What the agent says at start about the view (log, nodegc_cgroup_view_ok, /readyz's reason).
    try:
        from nodegc.agent import _health
    except ImportError:
        return None
    from nodegc.flags import build_parser
    from nodegc.wiring import agent_from_args
    args = build_parser().parse_args(["agent", "--pods-from", "/dev/null", "--node", "n1", "--cgroup-root", root,
                                      "--runtime-state-dir", "/run/containerd"])
    metrics, heartbeat = _health(agent_from_args(args))
    gauge = [line for line in metrics.render().decode().splitlines() if line.startswith("nodegc_cgroup_view_ok")]
    return {"gauge": gauge, "ready": heartbeat.ready()[1]}
result["ns_agent"], result["host_agent"] = agent(ns), agent(host)
print(json.dumps(result))
"""


def _cgroup2() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        if fields[sep + 1] == "cgroup2" and fields[3] == "/":
            return Path(fields[4])
    return None


@pytest.fixture
def tree() -> Iterator[tuple[Path, str]]:
    node = _cgroup2()
    if node is None:
        pytest.skip("no cgroup2 hierarchy mounted")
    top = f"nodegc-test14-{uuid.uuid4().hex[:8]}"
    try:
        yield node, top
    finally:
        for path in sorted((node / top).rglob("*"), key=lambda p: -len(p.parts)):
            if path.is_dir():
                path.rmdir()
        if (node / top).is_dir():
            (node / top).rmdir()


def test_a_cgroup_namespace_view_is_cannot_tell_and_the_node_tree_removes(tmp_path: Path,
                                                                          tree: tuple[Path, str]) -> None:
    node, top = tree
    cid = "c" * 64
    path = f"/{top}/kubepods/pod1/{cid}"
    Path(f"{node}{path}").mkdir(parents=True)
    agent = node / top / "agent"
    agent.mkdir()
    ns, host = tmp_path / "ns", tmp_path / "host"
    ns.mkdir()
    host.mkdir()

    def enter() -> None:
        (agent / "cgroup.procs").write_text(str(os.getpid()))

    run = subprocess.run(
        ["unshare", "--cgroup", "--mount", "--propagation", "private", sys.executable, "-c", CHILD,
         str(ns), str(host), str(node), cid, path],
        capture_output=True, text=True, timeout=60, preexec_fn=enter, check=False)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.splitlines()[-1])  # the agent logs before it
    assert out["own"] == "0::/"  # the namespace's root: the view of a pod on cgroup v2
    ns_said = out["ns"]
    assert out["ns_left"]
    assert isinstance(ns_said, dict) and not ns_said["ok"] and not ns_said["gone"], ns_said
    assert "cannot tell" in ns_said["detail"]
    assert out["ns_doubt"] and "namespace" in out["ns_doubt"]
    assert out["ns_agent"]["gauge"] == ["nodegc_cgroup_view_ok 0.0"]
    assert "container cgroups cannot be told gone" in out["ns_agent"]["ready"]
    assert out["host_agent"]["gauge"] == ["nodegc_cgroup_view_ok 1.0"]
    assert "cannot be told" not in out["host_agent"]["ready"]
    assert out["host_doubt"] is None
    assert out["host"] == "removed its empty cgroup in 1 hierarchies"
    assert not out["host_left"]
