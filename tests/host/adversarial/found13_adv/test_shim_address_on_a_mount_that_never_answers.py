"""A process named as a shim (`containerd-shim-runc-v2 -namespace k8s.io -id <id> -address <endpoint>`: any
pod's process can name itself so, and the agent sees every process of the node) whose own mount namespace
has a file system that never answers at the endpoint's directory (an NFS volume whose server is gone, a FUSE
mount nobody serves): the scan stats `-address` inside that process's root to tell whether it is this
runtime's socket, and that stat never returned, so neither did the scan, cycle after cycle (the pod
directory scan, for the same reason, never stats inside a volume). A shim whose socket cannot be told
within a bounded wait is one "whose containerd cannot be told" (reported, never signalled), and the scan
goes on."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from nodegc.inventory.cri.leftovers import read_leftovers
from nodegc.model.resources import ReadProblem
from nodegc.model.runtime import RuntimeLeftover
from tests.host.adversarial.unserved_fuse import mount_unserved_fuse, unmount_lazily

_SHIM = "/usr/bin/containerd-shim-runc-v2"
SID = "ab" * 32

# In a mount namespace of its own: a FUSE file system nobody serves over the socket's directory (every lookup
# in it waits for the FUSE daemon's answer, which never comes), its device kept open, then exec'd as a shim.
_STAND_IN = r"""
import ctypes, os, sys
target, sid, address, name = sys.argv[1:5]
fd = os.open("/dev/fuse", os.O_RDWR)
os.set_inheritable(fd, True)
libc = ctypes.CDLL(None, use_errno=True)
opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
if libc.mount(b"nodegc-test", target.encode(), b"fuse", 0, opts) != 0:
    sys.exit(f"mount: {os.strerror(ctypes.get_errno())}")
print("up", flush=True)
os.execv(sys.executable, [name, "-c", "import time; time.sleep(600)", "-namespace", "k8s.io", "-id", sid,
                          "-address", address])
"""


def test_a_shim_whose_address_never_answers_does_not_hold_the_scan(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    endpoint = run / "containerd.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(endpoint))
    state = tmp_path / "state"
    state.mkdir()
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", _STAND_IN,
                             str(run), SID, str(endpoint), _SHIM], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(_SHIM.encode()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        found: list[tuple[tuple[RuntimeLeftover, ...], tuple[ReadProblem, ...]]] = []
        scan = threading.Thread(target=lambda: found.append(read_leftovers(
            state, mounts=[], proc_root=Path("/proc"), socket=str(endpoint))), daemon=True)
        scan.start()
        scan.join(15)
        assert not scan.is_alive(), "the scan is held by a stat inside the stand-in's root"
        leftovers, _ = found[0]
        shims = [left for left in leftovers if left.what == "shim" and left.id == SID]
        assert len(shims) == 1
        assert shims[0].problem is not None and "cannot be told" in shims[0].problem
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its FUSE device closes: a stat still waiting fails
        proc.wait(timeout=10)
        server.close()


def test_a_shim_address_through_a_mount_that_never_answers_here_does_not_hold_the_scan(tmp_path: Path) -> None:
    """The same through the agent's own namespace: an `-address` spelt otherwise than the endpoint is resolved
    there (realpath: /var/run is a link to /run) before anything else, and a path through a volume of a pod
    (an NFS server gone: the kubelet's mounts are the agent's too) held the scan as well."""
    run = tmp_path / "run"
    run.mkdir()
    endpoint = run / "containerd.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(endpoint))
    hung = tmp_path / "hung"
    hung.mkdir()
    fd = mount_unserved_fuse(hung)
    shim = (f'echo up && exec -a {_SHIM} "$0" -c "import time; time.sleep(600)" -namespace k8s.io -id {SID}'
            ' -address "$1"')
    proc = subprocess.Popen(["bash", "-c", shim, sys.executable, str(hung / "containerd.sock")],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    scan: threading.Thread | None = None
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(_SHIM.encode()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        found: list[tuple[tuple[RuntimeLeftover, ...], tuple[ReadProblem, ...]]] = []
        scan = threading.Thread(target=lambda: found.append(read_leftovers(
            tmp_path / "state", mounts=[], proc_root=Path("/proc"), socket=str(endpoint))), daemon=True)
        scan.start()
        scan.join(15)
        assert not scan.is_alive(), "the scan is held resolving the stand-in's -address"
        leftovers, _ = found[0]
        assert not [left for left in leftovers if left.what == "shim" and left.id == SID]  # not this runtime's
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        os.close(fd)  # the FUSE connection ends: a lookup still waiting fails
        if scan is not None:
            scan.join(10)
        unmount_lazily(hung)
        server.close()
