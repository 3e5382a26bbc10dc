"""`make demo`, as the README's first command runs it: in private mount and network namespaces of its own,
with the real CNI plugins and a real containerd. It must end with every residue reclaimed (the runtime's
leftovers too: orphan shims stopped on opt-in, their task bundles gone), and leave nothing behind, even
when it is killed outright halfway through: no process of its containerd, no cgroup, no node root."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodegc.sandbox.containerd import containerd_available

ISOLATE = ["unshare", "--mount", "--net", "--propagation", "private", "--", "bash", "-c",
           'ip link set lo up && exec "$0" "$@"']
DEMO = [*ISOLATE, sys.executable, "-m", "nodegc.sandbox.demo"]
_ROOT = re.compile(r"building sandbox node \S+ under (\S+)")


@pytest.fixture(autouse=True)
def _runtime() -> None:
    missing = containerd_available()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing}; under CI the demo's runtime part must run (make deps installs it)", pytrace=False)
        pytest.skip(missing)


def _cgroups() -> set[str]:
    """The sandbox cgroups in any hierarchy (cgroup v2, or each v1 controller's)."""
    top = Path("/sys/fs/cgroup")
    return {p.name for pattern in ("nodegc-sandbox-*", "*/nodegc-sandbox-*") for p in top.glob(pattern)}


def _cgroups_of_children(parents: list[int]) -> set[str]:
    """The sandbox cgroups (`/nodegc-sandbox-<id>/...`) of the processes the shims `parents` started."""
    out = set()
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) if entry.name.isdigit() else 0
            if ppid not in parents:
                continue
            for line in (entry / "cgroup").read_text().splitlines():
                top = line.split(":", 2)[-1].strip("/").split("/")[0]
                if top.startswith("nodegc-sandbox-"):
                    out.add(top)
        except (OSError, IndexError, ValueError):
            continue
    return out


def _processes_under(root: str) -> list[int]:
    """Processes whose command line, working directory or cgroup names the demo's node root."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if root.encode() in cmdline or cwd == root or cwd.startswith(root + "/"):
            found.append(int(entry.name))
    return found


def test_the_demo_reclaims_everything_it_shows() -> None:
    done = subprocess.run(DEMO, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    match = _ROOT.search(out)
    assert match, out[:2000]
    root = match.group(1)
    # The first part: every kind of residue found, reclaimed, and the rescan clean.
    for cls in ("orphaned_pod_dir", "orphaned_volume_mount", "leaked_ip", "stale_cni_cache", "leaked_netns",
                "dangling_veth", "leaked_chain", "leaked_hostport_rule"):
        assert cls in out, cls
    assert "21 of 21 reclaimed, 21 confirmed absent" in out
    # The runtime's part: containerd's leftovers, why they are kept, then stopped and gone.
    runtime = out[out.index("the container runtime's part"):]
    assert "runtime_leftover" in runtime and "kept while its shim" in runtime
    assert "stopped only with --stop-orphan-shims" in runtime
    assert len(re.findall(r"^ok +runtime_leftover:/proc/\d+ +stopped shim", runtime, re.M)) == 3, runtime[-4000:]
    assert "orphaned_sandbox" in runtime and "running_orphan" in runtime
    final = runtime[runtime.rindex("$ nodegc scan"):]
    assert "0 residue, 0 conflicts, 0 unknown" in final, final
    assert "runtime_leftover" not in final.split("why")[0], final
    assert out.rstrip().endswith("sandbox node torn down")
    assert not Path(root).exists()
    assert not _processes_under(root)


def test_a_demo_killed_outright_leaves_nothing_behind() -> None:
    before = _cgroups()
    proc = subprocess.Popen(DEMO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    root = None
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 300
        for line in proc.stdout:
            match = _ROOT.search(line)
            root = match.group(1) if match else root
            if line.startswith("$ crictl pods"):  # containerd, its shims and the containers all run now
                break
            assert time.monotonic() < deadline
        assert root is not None and _processes_under(root), "the runtime part did not start"
        new = _cgroups_of_children(_processes_under(root))
        assert new and new <= _cgroups() - before, new
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (_processes_under(root) or Path(root).exists() or new & _cgroups()):
        time.sleep(0.2)
    assert not _processes_under(root)
    assert not Path(root).exists()
    assert not new & _cgroups()
