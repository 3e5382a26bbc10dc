"""A shim of another containerd, in another mount namespace, whose `-address` is the same path as the
endpoint's (a nested node, a second runtime, a second sandbox node on one machine): that path names
another socket file there, so the shim is not this runtime's, and it is neither listed nor signalled,
even with --stop-orphan-shims. A shim whose `-address` is this runtime's socket file, and which the runtime
does not list, still is.

The stand-in shims are processes named `containerd-shim-runc-v2` with the flags containerd gives a shim;
the foreign one binds its own socket at /run/containerd/containerd.sock in its own mount namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.inventory.cri.leftovers import serves_socket, socket_file
from nodegc.sandbox.containerd import SandboxContainerd, new_spec, pod_record, sandbox_ips, write_pods
from nodegc.sandbox.node import SandboxNode
from tests.host.test_runtime_leftovers import _alive, _leftovers, _nodegc

Runtime = tuple[SandboxNode, SandboxContainerd]
_SHIM = "/usr/bin/containerd-shim-runc-v2"
_BIND = '"$0" -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" "$1"'


def _stand_in(sid: str, address: str, *, foreign: bool) -> subprocess.Popen[str]:
    """A process named as a shim with a shim's flags; `foreign`: in a mount namespace of its own, where a
    socket of its own is at `address`."""
    # No child: a real shim's children are its containers' processes, which a stand-in has none of.
    shim = (f'echo up && exec -a {_SHIM} "$0" -c "import time; time.sleep(600)" -namespace k8s.io -id {sid}'
            ' -address "$1"')
    argv = ["bash", "-c", shim, sys.executable, address]
    if foreign:
        argv = ["unshare", "--mount", "--propagation", "private", "bash", "-c",
                f'mount -t tmpfs tmpfs "$(dirname "$1")" && {_BIND} && {shim}', sys.executable, address]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(_SHIM.encode()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc


@pytest.fixture
def stand_ins(containerd_node: Runtime) -> Iterator[tuple[subprocess.Popen[str], subprocess.Popen[str]]]:
    _, rt = containerd_node
    foreign = _stand_in(uuid.uuid4().hex * 2, str(rt.socket), foreign=True)
    ours = _stand_in(uuid.uuid4().hex * 2, str(rt.socket), foreign=False)
    try:
        yield foreign, ours
    finally:
        for proc in (foreign, ours):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_a_shim_of_another_containerd_at_the_same_path_is_not_this_runtimes(
    containerd_node: Runtime, stand_ins: tuple[subprocess.Popen[str], subprocess.Popen[str]], tmp_path: Path
) -> None:
    node, rt = containerd_node
    foreign, ours = stand_ins
    want = socket_file(str(rt.socket))
    assert want is not None
    assert serves_socket(Path("/proc"), foreign.pid, str(rt.socket), want) is False
    assert serves_socket(Path("/proc"), ours.pid, str(rt.socket), want) is True
    assert os.stat(f"/proc/{foreign.pid}/ns/mnt").st_ino != os.stat("/proc/self/ns/mnt").st_ino

    live = new_spec("live")
    sid = rt.run_sandbox(live)
    time.sleep(1.5)  # the stand-ins are older than the photographs (start times are read to the second)
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, live, sandbox_ips(rt, sid)[0])])
    scan = _nodegc(node, rt, snap, "scan", "-o", "json")
    assert scan.returncode in (0, 3), scan.stderr[-2000:]
    left = _leftovers(json.loads(scan.stdout))
    assert f"/proc/{foreign.pid}" not in left, left[f"/proc/{foreign.pid}"]
    assert left[f"/proc/{ours.pid}"]["class"] == "runtime_leftover", left

    clean = _nodegc(node, rt, snap, "clean", "--apply", "--stop-orphan-shims", "--state-dir",
                    str(tmp_path / "state"), "-o", "json")
    assert clean.returncode in (0, 3), clean.stderr[-2000:]
    deadline = time.monotonic() + 15
    while _alive(ours.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(ours.pid), clean.stdout[-3000:]
    assert _alive(foreign.pid) and foreign.poll() is None
