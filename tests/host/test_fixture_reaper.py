"""A pytest killed outright (SIGKILL) while it holds the `containerd_node` fixture leaves nothing behind: no
containerd, no shim, no `nodegc-sandbox-*` cgroup, no node root (the fixture's reaper, `sandbox.reaper`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodegc.sandbox.containerd import containerd_available

_REPO = Path(__file__).resolve().parents[2]
_HOLDER = Path(__file__).with_name("holds_containerd.py")


def _left(info: dict[str, object]) -> list[str]:
    left = [f"pid {p}" for p in info["pids"] if Path(f"/proc/{p}").exists()]  # type: ignore[attr-defined]
    cgroups = Path("/sys/fs/cgroup")
    left += [str(h / str(info["cgroup"])) for h in [cgroups, *cgroups.iterdir()] if (h / str(info["cgroup"])).exists()]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(info["config"]).encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                    left.append(f"containerd {entry.name}")
            except OSError:
                continue
    if Path(str(info["root"])).exists():
        left.append(str(info["root"]))
    return left


def test_a_killed_pytest_leaves_no_containerd_shim_cgroup_or_root() -> None:
    missing = containerd_available()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(missing, pytrace=False)
        pytest.skip(missing)
    holder = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", str(_HOLDER)],
        cwd=_REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert holder.stdout is not None
        deadline = time.monotonic() + 120
        info: dict[str, object] | None = None
        while info is None and time.monotonic() < deadline:
            line = holder.stdout.readline()
            if not line:
                break
            if line.startswith(b"{"):
                info = json.loads(line)
        assert info is not None, "the holder never reported its containerd"
        assert all(Path(f"/proc/{p}").exists() for p in info["pids"]), info  # type: ignore[attr-defined]
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        deadline = time.monotonic() + 60
        while _left(info) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _left(info) == []
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)
