"""These tests make containerd forget sandboxes whose processes keep running; SandboxContainerd.close()
kills the shims' process groups only, which leaves such pause processes behind. Reap every process of
the test's own cgroup tree before the runtime is closed."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.sandbox.containerd import SandboxContainerd
from nodegc.sandbox.node import SandboxNode


def _pids(cgroup_parent: str, root: Path = Path("/sys/fs/cgroup")) -> set[int]:
    pids: set[int] = set()
    for hierarchy in [root, *root.iterdir()] if root.is_dir() else []:
        top = hierarchy / cgroup_parent
        if not top.is_dir():
            continue
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids |= {int(line) for line in procs.read_text().split()}
    return pids


@pytest.fixture(autouse=True)
def _reap(containerd_node: tuple[SandboxNode, SandboxContainerd]) -> Iterator[None]:
    yield
    _, rt = containerd_node
    for pid in _pids(rt.cgroup_parent):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
