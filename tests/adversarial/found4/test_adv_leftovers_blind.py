"""Adversarial: runtime leftovers judged from a view that cannot see what keeps them.

1. A hostNetwork pod runs, the runtime's list misses its sandbox (containerd's start-up recovery skips a
   sandbox it fails to load; its shim and processes keep running). The list's completeness check counted
   only pods off the host network, so the missing sandbox's state dir and task bundles were judged.
2. The process table nodegc reads is not the host's (the agent's own pid namespace: the shipped DaemonSet
   has no hostPID), or its shims' `-address` is spelled otherwise than the endpoint
   (`unix:///var/run/containerd/containerd.sock` against the shims' `/run/containerd/containerd.sock`):
   no shim is seen, not even those of the READY sandboxes the runtime lists, and no init process. "No shim
   of this id runs" is then no evidence at all, yet a lost sandbox's dirs were `orphaned_runtime_dir`.
"""

from __future__ import annotations

import dataclasses

from nodegc.model.findings import FindingClass
from nodegc.model.runtime import RuntimeLeftover
from tests.unit.factories import OLD, pod
from tests.unit.test_runtime_leftovers import LIVE, STATE, live_sandbox, run, sandbox_dir, task_dir

LOST = "e" * 64
APP = "f" * 64


def _shim(sid: str, pid: int) -> RuntimeLeftover:
    return RuntimeLeftover("shim", sid, f"/proc/{pid}", pid=pid, start_time=1234, mtime=OLD,
                           address=f"{STATE}/containerd.sock")


def test_a_running_host_network_pod_without_a_listed_sandbox_blocks_the_leftovers() -> None:
    proxy = dataclasses.replace(pod("kube-proxy-x", "u-proxy", ns="kube-system"), host_network=True)
    sd, pause, app = sandbox_dir(LOST), task_dir(LOST), task_dir(APP, sandbox_id=LOST)
    # Its shim runs but is not seen (see the second test); the web pod's shim is.
    out = run(sd, pause, app, _shim(LIVE, 11), pods=(pod("web", "u1"), proxy))
    for left in (sd, pause, app):
        assert not out[left.path].cls.is_residue, (left.what, out[left.path].evidence)


def test_no_shim_of_any_ready_sandbox_in_sight_means_the_process_table_is_blind() -> None:
    # The runtime lists a READY sandbox, so its shim runs on the node: a process table without it is not
    # the node's (or does not match the socket's spelling), and shows no other shim either.
    sd, pause, app = sandbox_dir(LOST), task_dir(LOST), task_dir(APP, sandbox_id=LOST)
    out = run(sd, pause, app, sandboxes=(live_sandbox(),))
    for left in (sd, pause, app):
        assert not out[left.path].cls.is_residue, (left.what, out[left.path].evidence)
        assert "shim" in out[left.path].evidence[-1]


def test_with_the_ready_sandboxes_shims_in_sight_an_idle_leftover_still_goes() -> None:
    sd, pause = sandbox_dir(LOST), task_dir(LOST)
    out = run(sd, pause, _shim(LIVE, 11))
    assert out[sd.path].cls is FindingClass.ORPHANED_RUNTIME_DIR
    assert out[pause.path].cls is FindingClass.ORPHANED_RUNTIME_DIR
