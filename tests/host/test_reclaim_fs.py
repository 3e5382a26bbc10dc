"""Filesystem executors against real mounts on a sandbox node: leftover volumes are unmounted (lazily when
busy or hung), a pod directory goes only once nothing is mounted below it, and a mount inside a pod
directory is never entered."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.hostio.mountinfo import MountIndex, read_mounts
from nodegc.inventory.scanning import scan_node
from nodegc.model.resources import PodDir, VolumeDir
from nodegc.reclaim.filesystem import UNMOUNT_CHILD_CODE, remove_pod_dir, unmount_volume
from nodegc.sandbox.node import SandboxNode, SandboxPod, is_mounted


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=10)


def _pod_dir(node: SandboxNode, pod: SandboxPod) -> PodDir:
    found = [p for p in scan_node(node.roots).pod_dirs if p.uid == pod.uid]
    assert len(found) == 1
    return found[0]


def _mounted_volumes(record: PodDir) -> list[VolumeDir]:
    return [v for v in record.volumes if v.mounted]


def _top_id(path: Path) -> int:
    mount = MountIndex.build(read_mounts()[0]).top_at(str(path))
    assert mount is not None
    return mount.mount_id


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait(timeout=10)


def test_leftover_volumes_unmounted_then_pod_dir_removed(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    live = node.add_pod("live", volumes=("a",))
    gone = node.add_pod("gone", volumes=("a", "b"))
    node.delete_leaving_mounts(gone)
    record = _pod_dir(node, gone)
    volumes = _mounted_volumes(record)
    assert len(volumes) == 3  # a, b and the projected token volume
    marker = gone.volume_paths[0] / "data"
    marker.write_text("still mounted")

    blocked = remove_pod_dir(record, kubelet_root=node.kubelet_root)
    assert not blocked.ok and "mount(s) remain below" in blocked.detail
    assert marker.read_text() == "still mounted" and (gone.pod_dir / "etc-hosts").exists()

    for volume in volumes:
        out = unmount_volume(volume)
        assert out.ok and not out.lazy and not out.already_gone, out
        assert not is_mounted(Path(volume.path))
        again = unmount_volume(volume)
        assert again.ok and again.already_gone, again

    out = remove_pod_dir(record, kubelet_root=node.kubelet_root)
    assert out.ok, out
    assert not gone.pod_dir.exists()
    assert remove_pod_dir(record, kubelet_root=node.kubelet_root).already_gone
    # The live pod next door is untouched.
    assert all(is_mounted(p) for p in live.volume_paths)
    assert (live.pod_dir / "etc-hosts").exists()


def test_remount_at_the_same_path_is_changed_and_left_mounted(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    pod = node.add_pod("gone", volumes=("a",))
    node.delete_leaving_mounts(pod)
    volume = _mounted_volumes(_pod_dir(node, pod))[0]
    path = Path(volume.path)
    subprocess.run(["umount", str(path)], check=True, timeout=10)
    # Mount ids are recycled (lowest free, freed lazily): park ids elsewhere until the new mount at the
    # same place gets another one, which is what this test is about.
    for attempt in range(50):
        _mount("-t", "tmpfs", "tmpfs", str(path))
        if _top_id(path) != volume.mount_id:
            break
        subprocess.run(["umount", str(path)], check=True, timeout=10)
        parking = node.root / f"parking-{attempt}"
        parking.mkdir()
        _mount("-t", "tmpfs", "tmpfs", str(parking))
    assert _top_id(path) != volume.mount_id
    out = unmount_volume(volume)
    assert out.identity_changed and not out.ok, out
    assert is_mounted(path)


def test_stacked_mounts_top_first_and_more_reported(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    pod = node.add_pod("gone", volumes=("a",))
    node.delete_leaving_mounts(pod)
    path = pod.volume_paths[0]
    under = _top_id(path)
    _mount("-t", "tmpfs", "tmpfs", str(path))
    top = _top_id(path)
    assert top != under
    volume = next(v for v in _mounted_volumes(_pod_dir(node, pod)) if v.path == str(path))
    assert volume.mount_id == top

    out = unmount_volume(volume)
    assert not out.ok and not out.identity_changed and "1 more mount(s) remain" in out.detail, out
    assert _top_id(path) == under
    # The next round sees the one that was underneath and reclaims it.
    again = next(v for v in _mounted_volumes(_pod_dir(node, pod)) if v.path == str(path))
    assert again.mount_id == under
    assert unmount_volume(again).ok
    assert not is_mounted(path)


def test_mount_below_a_volume_is_not_taken_along(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    pod = node.add_pod("gone", volumes=("a",))
    node.delete_leaving_mounts(pod)
    path = pod.volume_paths[0]
    (path / "nested").mkdir()
    _mount("-t", "tmpfs", "tmpfs", str(path / "nested"))
    volume = next(v for v in _mounted_volumes(_pod_dir(node, pod)) if v.path == str(path))
    out = unmount_volume(volume)
    assert not out.ok and "must be unmounted first" in out.detail, out
    assert is_mounted(path) and is_mounted(path / "nested")


def test_busy_mount_is_detached_lazily(
    sandbox_node: SandboxNode, holder: list[subprocess.Popen[bytes]]
) -> None:
    node = sandbox_node
    pod = node.add_pod("gone", volumes=("a",))
    node.delete_leaving_mounts(pod)
    path = pod.volume_paths[0]
    (path / "in-use").write_text("open")
    holder.append(subprocess.Popen(["sleep", "300"], cwd=path))  # a cwd inside: plain umount gets EBUSY
    volume = next(v for v in _mounted_volumes(_pod_dir(node, pod)) if v.path == str(path))
    out = unmount_volume(volume)
    assert out.ok and out.lazy, out
    assert not is_mounted(path)
    # The holder still sees the detached filesystem through its cwd.
    assert (Path(f"/proc/{holder[0].pid}/cwd") / "in-use").read_text() == "open"


def test_hung_unmount_times_out_and_is_detached_lazily(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    pod = node.add_pod("gone", volumes=("a",))
    node.delete_leaving_mounts(pod)
    path = pod.volume_paths[0]
    volume = next(v for v in _mounted_volumes(_pod_dir(node, pod)) if v.path == str(path))
    # A plain unmount (flags 0) that never returns, like umount(2) of a dead NFS server.
    hangs = "import sys, time\nif sys.argv[3] == '0':\n    time.sleep(600)\n" + UNMOUNT_CHILD_CODE
    out = unmount_volume(volume, timeout=0.5, child=(sys.executable, "-I", "-S", "-c", hangs))
    assert out.ok and out.lazy, out
    assert not is_mounted(path)


def test_hung_lazy_detach_too_fails_and_leaves_the_mount(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    pod = node.add_pod("gone", volumes=("a",))
    node.delete_leaving_mounts(pod)
    path = pod.volume_paths[0]
    volume = next(v for v in _mounted_volumes(_pod_dir(node, pod)) if v.path == str(path))
    hangs = "import time\ntime.sleep(600)\n"
    out = unmount_volume(volume, timeout=0.3, child=(sys.executable, "-I", "-S", "-c", hangs))
    assert not out.ok and "timed out" in out.detail, out
    assert is_mounted(path)


def _without_mounts_below(tmp_path: Path, below: Path) -> Path:
    """A proc root whose mount table misses the mounts below `below` (as if they appeared after the
    check) but whose fdinfo is this process's real one: the walk's own guard must catch them."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    prefix = str(below) + "/"
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    kept = [line for line in lines if not line.split(" ")[4].startswith(prefix)]
    (proc / "self" / "mountinfo").write_text("\n".join(kept) + "\n")
    (proc / "self" / "fdinfo").symlink_to("/proc/self/fdinfo")
    return proc


def test_bind_mount_inside_a_pod_dir_survives_with_its_content(
    sandbox_node: SandboxNode, tmp_path: Path
) -> None:
    node = sandbox_node
    pod = node.add_pod("gone", volumes=("a",))
    node.delete_leaving_dir(pod)
    precious = node.root / "precious"  # same filesystem as the pod directory: only the mount id differs
    (precious / "sub").mkdir(parents=True)
    (precious / "sub" / "data").write_text("keep")
    crossing = pod.pod_dir / "containers" / "app" / "bound"
    crossing.mkdir()
    _mount("--bind", str(precious), str(crossing))
    foreign = pod.pod_dir / "plugins" / "other-fs"  # another filesystem: another device
    foreign.mkdir()
    _mount("-t", "tmpfs", "tmpfs", str(foreign))
    (foreign / "data").write_text("keep too")
    record = _pod_dir(node, pod)
    assert len(record.mounts_below) == 2

    refused = remove_pod_dir(record, kubelet_root=node.kubelet_root)
    assert not refused.ok and "2 mount(s) remain below" in refused.detail, refused
    assert (pod.pod_dir / "etc-hosts").exists()

    hidden = _without_mounts_below(tmp_path, pod.pod_dir)
    out = remove_pod_dir(record, kubelet_root=node.kubelet_root, proc_root=hidden)
    assert not out.ok, out
    assert "a mount point" in out.detail and "another filesystem" in out.detail, out
    assert (precious / "sub" / "data").read_text() == "keep"
    assert (crossing / "sub" / "data").read_text() == "keep"
    assert (foreign / "data").read_text() == "keep too"
    assert not (pod.pod_dir / "etc-hosts").exists()  # everything else went

    for point in (crossing, foreign):
        subprocess.run(["umount", str(point)], check=True, timeout=10)
    assert remove_pod_dir(record, kubelet_root=node.kubelet_root).ok
    assert not pod.pod_dir.exists()
    assert (precious / "sub" / "data").read_text() == "keep"


def test_pod_dir_of_a_cleanly_unmounted_pod_is_removed(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    pod = node.add_pod("gone", volumes=("a", "b"))
    node.delete_leaving_dir(pod)
    record = _pod_dir(node, pod)
    assert record.mounts_below == ()
    out = remove_pod_dir(record, kubelet_root=node.kubelet_root)
    assert out.ok, out
    assert not pod.pod_dir.exists()
    assert not os.listdir(node.kubelet_root / "pods")
