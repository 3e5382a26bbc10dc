"""Adversarial: `--runtime-endpoint unix:///var/run/containerd/containerd.sock` (the spelling many guides
use) against shims started with `-address /run/containerd/containerd.sock`. The shims were matched by the
literal string, so none was seen: every leftover's "its shim runs" protection and the orphan shim report
were blind. The socket is one file: both spellings resolve to it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nodegc.inventory.cri.leftovers import scan_leftovers

SID = "ab" * 32


@pytest.mark.skipif(os.path.realpath("/var/run") != "/run", reason="needs /var/run -> /run, as on Debian")
def test_a_shim_is_seen_whichever_way_the_socket_is_spelled(tmp_path: Path) -> None:
    # A process whose command line is a shim's (argv[0] and its flags), as /proc shows it.
    argv = ["bash", "-c", "exec -a containerd-shim-runc-v2 bash -c 'sleep 30; true' shim"
            f" -namespace k8s.io -id {SID} -address /run/containerd/containerd.sock"]
    shim = subprocess.Popen(argv, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{shim.pid}/cmdline").read_bytes().startswith(b"containerd-shim-runc-v2\0"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for socket in ("/run/containerd/containerd.sock", "/var/run/containerd/containerd.sock"):
            found = [x for x in scan_leftovers(tmp_path, mounts=(), socket=socket)
                     if x.what == "shim" and x.pid == shim.pid]
            assert found and found[0].id == SID, socket
        other = [x for x in scan_leftovers(tmp_path, mounts=(), socket="/run/k3s/containerd/containerd.sock")
                 if x.pid == shim.pid]
        assert other == []  # another runtime's socket: not its shim
    finally:
        os.killpg(shim.pid, signal.SIGKILL)
        shim.wait()
