"""Races on containerd's leftovers against a real containerd: its state dir changed between the judgement and
the step (a `sandboxes` folder or a task bundle turned into a symlink to a directory outside the state dir),
and a crash of the shim stop after its checkpoint, before or after the signal, resumed when the shim's pid
names another process.

A kernel hands out pids on its own; a test cannot pick one without touching the machine's pid counter. So
the reuse of the shim's pid is written into the ledger: the checkpoint is moved onto the pid of a process that
looks exactly like the same shim (the same `-id` and `-address`) but started later, which is what the
checkpoint would name once the pid went to such a process.

What each case holds: a `sandboxes` folder turned symlink is stopped by the descent's O_NOFOLLOW
(`reclaim.removing.open_dir_below`); a task bundle turned symlink by its lstat'ed inode and, behind it, the
removal walk's O_NOFOLLOW (either alone keeps it); the resumed stop by the start time in a shim's identity
(`planning.phases.identity_of`): without it the resumed cycle signals the process the pid went to. The
executor's own checks of a shim's pid (pinned with a pidfd, then its start time and command line read) are
`tests/host/test_runtime_leftovers.py`'s."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import CycleReport, Engine, EngineSettings, NullMetrics
from nodegc.inventory.cri.leftovers import start_ticks
from nodegc.ledger.store import Ledger
from nodegc.model.items import Phase
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import Batch, HostExecutor, OnOutcome
from nodegc.sandbox.containerd import SandboxContainerd, new_spec, pod_record, write_pods
from nodegc.sandbox.node import SandboxNode, is_mounted
from nodegc.settings import ScanOptions
from tests.host.test_runtime_leftovers import (
    CRI,
    TASKS,
    _alive,
    _power_loss_leftovers,
    _roots,
    _shims_of,
    _status,
)

Runtime = tuple[SandboxNode, SandboxContainerd]


def _engine(node: SandboxNode, rt: SandboxContainerd, snap: Path, ledger: Ledger, *, executor: object,
            consecutive_scans: int = 1, stop_orphan_shims: bool = False) -> Engine:
    settings = EngineSettings(
        phases=PhasePolicy(consecutive_scans=consecutive_scans, grace_seconds=0),
        correlation=CorrelationPolicy(min_age_seconds=0, stop_orphan_shims=stop_orphan_shims),
        scan=ScanOptions(min_age_seconds=0, runtime_endpoint=rt.endpoint, runtime_state_dir=rt.state),
        max_desired_age_seconds=1e9)
    return Engine(roots=node.roots, source=SnapshotSource(snap, node.node_name), ledger=ledger,
                  executor=executor, settings=settings, metrics=NullMetrics())  # type: ignore[arg-type]


def _host(node: SandboxNode, rt: SandboxContainerd) -> HostExecutor:
    return HostExecutor(node.roots, runtime_endpoint=rt.endpoint, runtime_state_dir=rt.state)


@dataclass
class _ChangedFirst:
    """The host executor, with the state dir changed right before it acts (after terminate's re-verification)."""

    inner: HostExecutor
    change: Callable[[], None]
    destructive: bool = True

    def execute(self, batch: Batch, *, on_outcome: OnOutcome) -> None:
        self.change()
        self.inner.execute(batch, on_outcome=on_outcome)


@contextmanager
def _symlinked(target: Path, outside: Path) -> Iterator[Callable[[], None]]:
    """A change that moves `target` (a directory of the state dir) to `outside` and leaves a symlink to it in
    its place; undone afterwards, so that the runtime's teardown finds its tree again."""
    moved = outside / target.name

    def change() -> None:
        outside.mkdir()
        target.rename(moved)
        target.symlink_to(moved)

    try:
        yield change
    finally:
        if target.is_symlink():
            target.unlink()
            moved.rename(target)


@pytest.mark.parametrize("which", ["sandboxes", "task_dir"])
def test_a_state_dir_folder_turned_symlink_before_the_step_is_not_followed(containerd_node: Runtime,
                                                                           tmp_path: Path, which: str) -> None:
    node, rt = containerd_node
    [(sid, cid)] = _power_loss_leftovers(rt, "gone")
    sandbox_dir, task_dir = rt.state / CRI / "sandboxes" / sid, rt.state / TASKS / cid
    target, item_path = (sandbox_dir.parent, sandbox_dir) if which == "sandboxes" else (task_dir, task_dir)
    outside = rt.state.parent / "elsewhere"  # the same filesystem, outside the state dir
    assert not os.path.realpath(outside).startswith(os.path.realpath(rt.state) + "/")
    shm, rootfs = sandbox_dir / "shm", task_dir / "rootfs"
    live = new_spec("live")
    status = _status(rt, rt.run_sandbox(live))
    assert status is not None
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, live, status[1][0])])
    with _symlinked(target, outside) as change, Ledger(tmp_path / "ledger.db") as ledger:
        def planted() -> None:
            change()
            # What is outside now, as the step would reach it through the symlink.
            (outside / (f"sandboxes/{sid}" if which == "sandboxes" else cid) / "keep").write_text("not the runtime's")

        report = _engine(node, rt, snap, ledger, executor=_ChangedFirst(_host(node, rt), planted)).cycle()
        outcomes = {i.resource_id: o for i, o in report.outcomes}
        assert str(item_path) in outcomes, sorted(outcomes)
        assert outcomes[str(item_path)].identity_changed and not outcomes[str(item_path)].ok, outcomes[str(item_path)]
        assert "symlink" in outcomes[str(item_path)].detail or "inode" in outcomes[str(item_path)].detail
        moved = outside / (f"sandboxes/{sid}" if which == "sandboxes" else cid)
        assert (moved / "keep").read_text() == "not the runtime's"
        assert is_mounted(moved / ("shm" if which == "sandboxes" else "rootfs"))
        assert target.is_symlink()
        item = ledger.get(f"runtime_leftover:{item_path}")
        assert item is not None and item.phase is Phase.DETECTED  # sent back: judged again from scratch
    # Back in place, the leftover is still whole and reclaimed as usual.
    assert is_mounted(shm if which == "sandboxes" else rootfs)


# -- a crash of the shim stop -------------------------------------------------------------------------


def _lost_shim(node: SandboxNode, rt: SandboxContainerd, tmp: Path) -> tuple[str, int, int, Path]:
    """A shim whose sandbox the runtime no longer knows, beside a live pod's: (its id, its pid, the live
    shim's pid, the snapshot with the live pod)."""
    lost = new_spec("lost")
    lost_sid = rt.run_sandbox(lost)
    rt.run_container(lost_sid, lost)
    rt.kill()  # the daemon dies; its shims keep running...
    subprocess.run(["rm", "-rf", str(rt.root / "io.containerd.metadata.v1.bolt")], check=True, timeout=30)
    rt.start()  # ...and it comes back without its database
    live = new_spec("live")
    live_sid = rt.run_sandbox(live)
    status = _status(rt, live_sid)
    assert status is not None and status[0]
    shims = _shims_of(rt)
    return lost_sid, shims[lost_sid], shims[live_sid], write_pods(tmp / "pods.json", [pod_record(node, live,
                                                                                              status[1][0])])


def _crash_in_the_stop(node: SandboxNode, rt: SandboxContainerd, snap: Path, state: Path, point: str) -> None:
    env = {**os.environ, "NODEGC_FAULT": f"{point}:runtime_leftover"}
    crashed = subprocess.run([sys.executable, "-m", "nodegc", "clean", "--apply", "--stop-orphan-shims",
                              "--state-dir", str(state), *_roots(node, rt, snap)],
                             env=env, capture_output=True, text=True, timeout=300, check=False)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]


def _wait_gone(pid: int, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def _look_alike(shim_id: str, address: str) -> subprocess.Popen[bytes]:
    """A process with the command line of the shim of `shim_id` (another process: another start time)."""
    proc = subprocess.Popen(["containerd-shim-runc-v2", "-c", "import time; time.sleep(600)",
                             "-namespace", "k8s.io", "-id", shim_id, "-address", address],
                            executable=sys.executable)
    deadline = time.monotonic() + 10
    while b"-address" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def _move_checkpoint(ledger_path: Path, old_pid: int, new_pid: int) -> None:
    """The checkpointed shim item, as it reads once `old_pid` has gone to another process that got `new_pid`
    (see the module's docstring): the same item, the same verified identity, another process behind it."""
    db = sqlite3.connect(ledger_path)
    try:
        rows = db.execute("SELECT key, identity FROM items WHERE key = ? AND phase = 'terminating'",
                          (f"runtime_leftover:/proc/{old_pid}",)).fetchall()
        assert len(rows) == 1, db.execute("SELECT key, phase FROM items").fetchall()
        identity = [[k, str(new_pid) if k == "pid" else v] for k, v in json.loads(rows[0][1])]
        db.execute("UPDATE items SET key = ?, resource_id = ?, identity = ? WHERE key = ?",
                   (f"runtime_leftover:/proc/{new_pid}", f"/proc/{new_pid}", json.dumps(identity), rows[0][0]))
        db.commit()
    finally:
        db.close()


@pytest.mark.parametrize("point", ["before_clean", "after_clean"])
def test_a_resumed_shim_stop_never_signals_the_process_its_pid_went_to(containerd_node: Runtime, tmp_path: Path,
                                                                        point: str) -> None:
    node, rt = containerd_node
    lost_sid, lost_pid, live_pid, snap = _lost_shim(node, rt, tmp_path)
    state = tmp_path / "state"
    ticks = start_ticks(Path("/proc"), lost_pid)
    _crash_in_the_stop(node, rt, snap, state, point)
    if point == "before_clean":
        assert _alive(lost_pid), "the crash came before the signal"
        os.kill(lost_pid, signal.SIGKILL)  # it exits meanwhile, freeing its pid
    _wait_gone(lost_pid)
    other = _look_alike(lost_sid, str(rt.socket))
    try:
        other_ticks = start_ticks(Path("/proc"), other.pid)
        assert ticks is not None and other_ticks is not None and other_ticks != ticks
        _move_checkpoint(state / "ledger.db", lost_pid, other.pid)
        # A photograph taken after the look-alike started, so that it is old enough to be judged on its own.
        time.sleep(1.5)
        os.utime(snap)
        with Ledger(state / "ledger.db") as ledger:
            # K=2: the look-alike is a shim of an id the runtime does not list, so after two scans of its own it
            # is judged an orphan shim; the resumed cycle must not act on the checkpoint of the one before.
            report = _engine(node, rt, snap, ledger, executor=_host(node, rt), consecutive_scans=2,
                             stop_orphan_shims=True).cycle()
            assert not [o for i, o in report.outcomes if i.resource_id == f"/proc/{other.pid}"], report.outcomes
            assert other.poll() is None, "the process the pid went to was signalled"
            item = ledger.get(f"runtime_leftover:/proc/{other.pid}")
            assert item is not None and item.phase is Phase.DETECTED, item
            trail = ledger.history(key=f"runtime_leftover:/proc/{other.pid}")
            assert any("identity" in r.reason for r in trail), trail
        assert _alive(live_pid)
    finally:
        other.kill()
        other.wait()


def test_a_shim_stop_crashed_before_the_signal_resumes_on_that_shim(containerd_node: Runtime,
                                                                    tmp_path: Path) -> None:
    node, rt = containerd_node
    _, lost_pid, live_pid, snap = _lost_shim(node, rt, tmp_path)
    state = tmp_path / "state"
    _crash_in_the_stop(node, rt, snap, state, "before_clean")
    assert _alive(lost_pid)
    with Ledger(state / "ledger.db") as ledger:
        item = ledger.get(f"runtime_leftover:/proc/{lost_pid}")
        assert item is not None and item.phase is Phase.TERMINATING
        report: CycleReport = _engine(node, rt, snap, ledger, executor=_host(node, rt), consecutive_scans=2,
                                      stop_orphan_shims=True).cycle()
        assert [(i.resource_id, o.ok) for i, o in report.outcomes if i.resource_id.startswith("/proc/")] == [
            (f"/proc/{lost_pid}", True)], report.outcomes
    _wait_gone(lost_pid)
    assert _alive(live_pid)
