"""What a sandbox containerd leaves when the process that started it dies without tearing down (SIGKILL, an
OOM kill): the daemon, its shims and the containers they run go on, in the dead process's namespaces, and
their cgroups stay in the machine's cgroup tree.

`start_reaper` starts a small watcher in its own session that blocks on a pipe; the pipe reaches EOF when
its parent exits, however it exits. The watcher then kills exactly what that sandbox started (the daemon
by its configuration path, shims by their bundle below the node root, containers by the sandbox's own
cgroup), removes that cgroup tree and unmounts and removes the node root. Nothing else is touched: every
criterion names a path or a cgroup unique to one sandbox.

    python -m nodegc.sandbox.reaper --root DIR --config FILE --cgroup NAME   (stdin: the parent's pipe)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from nodegc.hostio import libc
from nodegc.sandbox.containerd import remove_cgroups, thaw_cgroups
from nodegc.sandbox.node import _sys_umount, mounts_under

_WAIT = 10.0


def start_reaper(*, root: Path, config: Path, cgroup: str) -> subprocess.Popen[bytes]:
    """Close the returned process's stdin (or exit) to let it clean up; `wait()` for it afterwards."""
    return subprocess.Popen(
        [sys.executable, "-m", "nodegc.sandbox.reaper", "--root", str(root), "--config", str(config),
         "--cgroup", cgroup],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
    )


def _theirs(pid: int, *, root: str, config: str, cgroup: str) -> bool:
    proc = Path(f"/proc/{pid}")
    try:
        argv = (proc / "cmdline").read_bytes().split(b"\0")
        if config.encode() in argv and argv[0].endswith(b"containerd"):
            return True
        if argv[0].endswith(b"containerd-shim-runc-v2"):
            cwd = os.readlink(proc / "cwd")
            return cwd == root or cwd.startswith(root + "/")
        return any(line.split(":", 2)[-1].startswith(f"/{cgroup}/")
                   for line in (proc / "cgroup").read_text().splitlines())
    except OSError:
        return False


def reap(*, root: Path, config: Path, cgroup: str) -> None:
    own = os.getpid()
    thaw_cgroups(cgroup)  # a frozen process (a test's forced survivor) holds its SIGKILL until thawed
    deadline = time.monotonic() + _WAIT
    while time.monotonic() < deadline:
        pids = [int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) != own]
        theirs = [p for p in pids if _theirs(p, root=str(root), config=str(config), cgroup=cgroup)]
        if not theirs:
            break
        for pid in theirs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    remove_cgroups(cgroup)
    for point in mounts_under(root):
        with contextlib.suppress(OSError):
            _sys_umount(point, libc.MNT_DETACH)
    if not mounts_under(root):
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="nodegc.sandbox.reaper")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--cgroup", required=True)
    args = parser.parse_args()
    if (not args.root.is_absolute() or not args.root.name.startswith("nodegc-node-")
            or not args.cgroup.startswith("nodegc-sandbox-")):
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        sys.stdin.buffer.read()  # EOF: the parent closed the pipe or exited
    reap(root=args.root, config=args.config, cgroup=args.cgroup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
