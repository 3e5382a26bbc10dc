"""The shim scan reads /proc/<pid>/cmdline of every process of the node. The kernel reads no file-backed page
for it (since 4.18), but it takes the process's mmap lock first, and a process can hold that lock for ever:
an mmap of a FUSE file (direct I/O) waits, under the lock, for a page whose READ nobody answers. Any pod's
process can do that; the read never returned, nor did the scan, cycle after cycle. Now each command line
is read within STAT_WAIT seconds; a process that cannot be told is reported, the scan goes on, and no
runtime leftover is judged while any process cannot be told (it may be a shim of any id). The shim's identity
re-read before a signal is bounded the same way. Real parts: a FUSE file system that answers everything but
its READ, a process locked on it."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.inventory.cri import leftovers as leftovers_mod
from nodegc.inventory.cri.leftovers import read_leftovers, shim_args
from nodegc.model.resources import ReadProblem
from nodegc.model.runtime import RuntimeLeftover
from tests.host.adversarial.found14_safe.fuse_stall import FILE, STAND_IN, StallingFuse

pytestmark = pytest.mark.host

Scan = tuple[tuple[RuntimeLeftover, ...], tuple[ReadProblem, ...]]


def _read_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):  # the process gone when the lock is let go
        path.read_bytes()


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[int]:
    """The pid of a process whose mmap lock is held until the test ends."""
    point = tmp_path / "fuse"
    point.mkdir()
    fs = StallingFuse(point)
    proc = subprocess.Popen([sys.executable, "-c", STAND_IN, str(point / FILE)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        for _ in range(10):  # until its mmap is under way (it says "up" just before)
            probe = threading.Thread(target=_read_quietly, args=(Path(f"/proc/{proc.pid}/cmdline"),), daemon=True)
            probe.start()
            probe.join(1.0)
            if probe.is_alive():
                break
        assert probe.is_alive(), "the stand-in's command line reads: its mmap lock is not held"
        yield proc.pid
    finally:
        fs.close()  # the FUSE connection ends: the READ fails, the lock is let go, every read waiting returns
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=30)


def _scan(state: Path) -> Scan | None:
    found: list[Scan] = []
    scan = threading.Thread(target=lambda: found.append(read_leftovers(state, mounts=[], proc_root=Path("/proc"))),
                            daemon=True)
    scan.start()
    scan.join(15)
    return found[0] if found else None


def test_a_process_whose_memory_map_is_locked_does_not_hold_the_scan(tmp_path: Path, locked: int) -> None:
    state = tmp_path / "state"
    state.mkdir()
    got = _scan(state)
    assert got is not None, "the scan is held reading a locked process's command line"
    untold = [left for left in got[0] if left.pid == locked]
    assert len(untold) == 1 and untold[0].what == "shim" and untold[0].id == ""
    assert untold[0].problem and "cannot be told" in untold[0].problem
    # A second scan while it still waits: not read again (no thread more), told the same way.
    threads = threading.active_count()
    again = _scan(state)
    assert again is not None and [left.pid for left in again[0] if left.pid == locked] == [locked]
    assert threading.active_count() <= threads
    # The shim's identity, re-read before any signal: bounded too.
    took: list[object] = []
    reread = threading.Thread(target=lambda: took.append(shim_args(Path("/proc"), locked)), daemon=True)
    reread.start()
    reread.join(15)
    assert took == [None]
    assert leftovers_mod.STAT_WAIT <= 2.0
