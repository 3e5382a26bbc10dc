"""Adversarial, with real namespaces and processes: the proof that a namespace left by a partial teardown is
dead counts the tasks of the process table inside it. A process inside, or only one thread of a process
that entered it on its own (setns), keeps it; the READY sandbox's namespace, with its process, is the
witness that the table is the node's; a namespace nothing is inside is reclaimed, and its removal really
ends it. Real netns files bind-mounted in a private mount namespace; the runtime's word is a literal view.

The scenario runs in a pid namespace of its own (`unshare --pid --fork --mount-proc`), whose process table
holds only its own processes: a machine's table may hold a task nodegc may not look into (EACCES), and then
nothing is counted (that refusal is the first check here)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from nodegc.hostio.libc import CLONE_NEWNET, setns
from nodegc.hostio.mountinfo import read_mounts
from nodegc.inventory.netns import count_tasks_in, scan_netns
from nodegc.inventory.scanning import _with_tasks
from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory, Kind
from nodegc.reclaim.netns import remove_netns
from tests.host.test_netns_addresses_by_netnsid import _new_ns
from tests.unit.factories import NOW, pod
from tests.unit.test_runtime_ownership import run, sandbox, view

_ROOT = Path(__file__).resolve().parents[4]
DEAD = "cni-5b1c7a8e-1f2d-4c3b-9a8e-7d6c5b4a3f21"
LIVE = "cni-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


def _inventory(netns_dir: Path) -> Inventory:
    mounts, _ = read_mounts(Path("/proc"))
    entries, _ = scan_netns(netns_dir, mounts)
    entries = tuple(e.__class__(**{**{f: getattr(e, f) for f in e.__slots__}, "addresses_read": True, "mtime": 0.0})
                    for e in entries)
    runtime = view(sandbox("live", "u1", ips=("10.0.0.3",), netns_path=f"/run/netns/{LIVE}"))
    return Inventory(taken_at=NOW, mounts=mounts, netns=entries, runtime=runtime)


def _wait_inside(path: Path) -> None:
    """Until a task is inside the namespace (nsenter has entered it and exec'd)."""
    st = os.stat(path)
    key = (st.st_dev, st.st_ino)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = count_tasks_in(Path("/proc"), {key})
        if isinstance(found, dict) and found[key]:
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing entered {path}")


def _verdict(inv: Inventory, name: str) -> FindingClass:
    [found] = [f for (kind, _), f in run(inv, pod("web", "u1", ip="10.0.0.3")).items()
               if kind is Kind.NETNS and f.id.endswith(name)]
    return found.cls


def test_tasks_inside_keep_it_and_none_inside_makes_it_dead(tmp_path: Path) -> None:
    proc = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                           "import sys; from tests.host.adversarial.found11.test_dead_netns_tasks import scenario;"
                           " scenario(sys.argv[1])", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False, cwd=_ROOT,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("scenario done")


def test_a_task_that_cannot_be_looked_into_leaves_nothing_counted(tmp_path: Path) -> None:
    proc_root = tmp_path / "proc"
    (proc_root / "7" / "task" / "7" / "ns").mkdir(parents=True)
    (proc_root / "7" / "task" / "7" / "ns" / "net").mkdir(mode=0)
    (proc_root / "8" / "task").mkdir(parents=True, mode=0o000)
    os.chmod(proc_root / "8" / "task", 0)
    found = count_tasks_in(proc_root, {(1, 2)})
    # root reads a mode-0 directory all the same: one made unreadable by taking its place with a file is used
    if not isinstance(found, str):
        (proc_root / "8" / "task").rmdir()
        (proc_root / "8" / "task").write_text("")
        found = count_tasks_in(proc_root, {(1, 2)})
    assert isinstance(found, str) and "cannot list" in found


def scenario(where: str) -> None:  # noqa: PLR0915 - one story, told in order
    netns_dir = Path(where) / "netns"
    netns_dir.mkdir()
    dead, live = netns_dir / DEAD, netns_dir / LIVE
    _new_ns(dead)
    _new_ns(live)
    pause = subprocess.Popen(["nsenter", f"--net={live}", "sleep", "120"])
    intruder: subprocess.Popen[bytes] | None = None
    release = threading.Event()
    try:
        st = os.stat(dead)
        assert count_tasks_in(Path("/proc"), {(st.st_dev, st.st_ino)}) == {(st.st_dev, st.st_ino): 0}

        _wait_inside(live)
        intruder = subprocess.Popen(["nsenter", f"--net={dead}", "sleep", "120"])
        _wait_inside(dead)
        inv = _with_tasks(_inventory(netns_dir), Path("/proc"))
        by_name = {e.name: e for e in inv.netns}
        assert by_name[DEAD].tasks == 1 and (by_name[LIVE].tasks or 0) >= 1
        assert _verdict(inv, DEAD) is FindingClass.UNKNOWN
        intruder.kill()
        intruder.wait(30)

        entered = threading.Event()

        def inside() -> None:  # one thread of this process enters it on its own
            fd = os.open(dead, os.O_RDONLY | os.O_CLOEXEC)
            try:
                setns(fd, CLONE_NEWNET, what="enter")
            finally:
                os.close(fd)
            entered.set()
            release.wait(60)

        thread = threading.Thread(target=inside, daemon=True)
        thread.start()
        assert entered.wait(30)
        inv = _with_tasks(_inventory(netns_dir), Path("/proc"))
        assert {e.name: e for e in inv.netns}[DEAD].tasks == 1
        assert _verdict(inv, DEAD) is FindingClass.UNKNOWN
        release.set()
        thread.join(30)  # the thread ends: nothing is inside any more

        inv = _with_tasks(_inventory(netns_dir), Path("/proc"))
        assert {e.name: e for e in inv.netns}[DEAD].tasks == 0
        assert _verdict(inv, DEAD) is FindingClass.LEAKED_NETNS
        assert _verdict(inv, LIVE) is FindingClass.IN_USE
        entry = {e.name: e for e in inv.netns}[DEAD]
        assert remove_netns(entry, netns_dir=netns_dir).ok
        assert not dead.exists()

        # Without the witness's process the table is not shown to be the node's: nothing is proven.
        _new_ns(dead)
        pause.kill()
        pause.wait(30)
        inv = _with_tasks(_inventory(netns_dir), Path("/proc"))
        assert _verdict(inv, DEAD) is FindingClass.UNKNOWN
    finally:
        release.set()
        for proc in (pause, intruder):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(30)
        for path in (dead, live):
            subprocess.run(["umount", str(path)], capture_output=True, timeout=30, check=False)
    print("scenario done")
