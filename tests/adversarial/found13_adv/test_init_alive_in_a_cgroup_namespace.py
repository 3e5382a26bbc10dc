"""A task bundle's init process is told from a process that reused its pid by the cgroup it is in: the
bundle's cgroupsPath (cgroupfs driver: `/kubepods/<qos>/pod<uid>/<id>`) had to appear verbatim in
/proc/<pid>/cgroup. But that file shows paths relative to the reader's cgroup namespace: an agent in a
container with its own cgroup namespace (cgroup v2's default for a pod) reads
`0::/../../../besteffort/pod<uid>/<id>` for the very init process, so a live init process was taken for a
reused pid and its bundle for one whose container is gone (no `busy`): its rootfs was then unmounted and its
directory removed once its shim was gone. The container's cgroup (its last component, the container id) is
what identifies it, however the path is spelled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodegc.inventory.cri.leftovers import CRI_NAMESPACE, TASKS_DIR, read_leftovers

CID = "c" * 64
POD = "pod0f1e2d3c-aaaa-bbbb-cccc-000000000001"


def _bundle(tmp_path: Path, pid: int, cgroup_file: str) -> Path:
    bundle = tmp_path / "state" / TASKS_DIR / CRI_NAMESPACE / CID
    bundle.mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({"linux": {"cgroupsPath": f"/kubepods/besteffort/{POD}/{CID}"}}))
    (bundle / "init.pid").write_text(str(pid))
    proc = tmp_path / "proc" / str(pid)
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text(cgroup_file)
    return tmp_path / "proc"


@pytest.mark.parametrize("cgroup_file", [
    f"0::/kubepods/besteffort/{POD}/{CID}\n",  # the node's cgroup namespace
    f"0::/../../../besteffort/{POD}/{CID}\n",  # the agent's own namespace at /kubepods/burstable/pod<x>/<y>
    f"0::/../../../../kubepods/besteffort/{POD}/{CID}\n",  # one rooted deeper
    f"12:pids:/../../besteffort/{POD}/{CID}\n11:memory:/../../besteffort/{POD}/{CID}\n0::/\n",  # v1 controllers
])
def test_a_live_init_process_seen_from_another_cgroup_namespace_keeps_its_bundle(
        tmp_path: Path, cgroup_file: str) -> None:
    proc = _bundle(tmp_path, 4242, cgroup_file)
    leftovers, _ = read_leftovers(tmp_path / "state", mounts=[], proc_root=proc)
    task = [left for left in leftovers if left.what == "task_dir"]
    assert [left.id for left in task] == [CID]
    assert task[0].busy is not None and "4242" in task[0].busy


def test_a_reused_pid_in_another_cgroup_is_not_the_init_process(tmp_path: Path) -> None:
    proc = _bundle(tmp_path, 4243, "0::/system.slice/sshd.service\n")
    leftovers, _ = read_leftovers(tmp_path / "state", mounts=[], proc_root=proc)
    task = [left for left in leftovers if left.what == "task_dir"]
    assert [left.id for left in task] == [CID]
    assert task[0].busy is None
