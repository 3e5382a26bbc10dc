"""Filesystem executors on temporary trees (no root needed): pod directory removal and the mount checks
that refuse before anything is touched (fed a synthetic mount table)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodegc.model.resources import PodDir, VolumeDir
from nodegc.reclaim.filesystem import remove_pod_dir, unmount_volume

UID = "0b3c2f5e-6d8a-4a1e-9c55-2f1f3b1d9e01"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    kubelet = Path(os.path.realpath(tmp_path)) / "kubelet"
    (kubelet / "pods").mkdir(parents=True)
    return kubelet


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = Path(os.path.realpath(tmp_path)) / "outside"
    (out / "deep").mkdir(parents=True)
    (out / "deep" / "precious").write_text("keep me")
    (out / "file").write_text("keep me too")
    return out


def _record(path: Path, uid: str = UID) -> PodDir:
    st = os.lstat(path)
    return PodDir(uid=uid, path=str(path), inode=st.st_ino, mtime=st.st_mtime)


def _pod_tree(root: Path, uid: str = UID) -> Path:
    pod = root / "pods" / uid
    (pod / "containers" / "app").mkdir(parents=True)
    (pod / "containers" / "app" / "0a1b2c3d").write_text("log")
    (pod / "plugins" / "kubernetes.io~empty-dir" / "data").mkdir(parents=True)
    (pod / "plugins" / "kubernetes.io~empty-dir" / "data" / "ready").touch()
    (pod / "volumes" / "kubernetes.io~empty-dir" / "data").mkdir(parents=True)
    (pod / "volumes" / "kubernetes.io~empty-dir" / "data" / "file").write_text("x")
    (pod / "etc-hosts").write_text("127.0.0.1 localhost\n")
    os.mkfifo(pod / "fifo")  # never opened: opening a FIFO would block
    return pod


def _mountinfo_line(mount_id: int, point: Path | str, *, parent: int = 1) -> str:
    return f"{mount_id} {parent} 0:42 / {point} rw,relatime shared:1 - tmpfs tmpfs rw"


def _fake_proc(tmp_path: Path, *lines: str) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    root_line = "1 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw"
    (proc / "self" / "mountinfo").write_text("\n".join([root_line, *lines]) + "\n")
    return proc


# --- remove_pod_dir ------------------------------------------------------------------------------------


def test_removes_the_whole_tree(root: Path) -> None:
    pod = _pod_tree(root)
    out = remove_pod_dir(_record(pod), kubelet_root=root)
    assert out.ok and not out.already_gone, out
    assert not pod.exists()
    assert (root / "pods").is_dir()


def test_missing_dir_is_gone(root: Path) -> None:
    pod = _pod_tree(root)
    record = _record(pod)
    assert remove_pod_dir(record, kubelet_root=root).ok
    again = remove_pod_dir(record, kubelet_root=root)
    assert again.ok and again.already_gone


def test_missing_pods_dir_is_gone(tmp_path: Path) -> None:
    record = PodDir(uid=UID, path=str(Path(os.path.realpath(tmp_path)) / "pods" / UID), inode=1, mtime=0.0)
    out = remove_pod_dir(record, kubelet_root=tmp_path)
    assert out.ok and out.already_gone


def test_symlinks_are_removed_as_links_and_targets_survive(root: Path, outside: Path) -> None:
    pod = _pod_tree(root)
    (pod / "volumes" / "kubernetes.io~empty-dir" / "to-dir").symlink_to(outside / "deep")
    (pod / "containers" / "app" / "to-file").symlink_to(outside / "file")
    (pod / "to-root").symlink_to("/")
    (pod / "relative").symlink_to("../../../outside/deep")
    (pod / "dangling").symlink_to("/nonexistent/nowhere")
    out = remove_pod_dir(_record(pod), kubelet_root=root)
    assert out.ok, out
    assert not pod.exists()
    assert (outside / "deep" / "precious").read_text() == "keep me"
    assert (outside / "file").read_text() == "keep me too"


def test_pod_dir_that_became_a_symlink_is_changed(root: Path, outside: Path) -> None:
    pod = _pod_tree(root)
    record = _record(pod)
    pod.rename(root / "moved")
    pod.symlink_to(outside)
    out = remove_pod_dir(record, kubelet_root=root)
    assert out.identity_changed and not out.ok
    assert (outside / "deep" / "precious").exists()
    assert pod.is_symlink()


@pytest.mark.parametrize(
    "path",
    [
        "{root}/pods/../../outside",
        "{root}/pods/{uid}/../../../outside",
        "{root}/pods/{uid}/containers",
        "{root}/other/{uid}",
        "{root}/pods//{uid}",
        "{outside}",
        "pods/{uid}",
    ],
)
def test_paths_other_than_root_pods_uid_are_refused(root: Path, outside: Path, path: str) -> None:
    pod = _pod_tree(root)
    bad = PodDir(uid=UID, path=path.format(root=root, uid=UID, outside=outside), inode=pod.stat().st_ino,
                 mtime=0.0)
    out = remove_pod_dir(bad, kubelet_root=root)
    assert not out.ok and "refused" in out.detail, out
    assert (outside / "deep" / "precious").exists()
    assert (pod / "etc-hosts").exists()


@pytest.mark.parametrize("uid", ["..", ".", "", "a/b", "../outside"])
def test_implausible_uids_are_refused(root: Path, outside: Path, uid: str) -> None:
    bad = PodDir(uid=uid, path=os.path.join(root, "pods", uid), inode=outside.stat().st_ino, mtime=0.0)
    out = remove_pod_dir(bad, kubelet_root=root)
    assert not out.ok and "refused" in out.detail, out
    assert (outside / "deep" / "precious").exists()


def test_inode_changed_is_changed_and_untouched(root: Path) -> None:
    pod = _pod_tree(root)
    record = _record(pod)
    pod.rename(root / "old")
    _pod_tree(root)  # a new pod with the same UID path (a new incarnation of the directory)
    out = remove_pod_dir(record, kubelet_root=root)
    assert out.identity_changed and not out.ok, out
    assert (pod / "etc-hosts").exists()


def test_non_utf8_names_are_removed(root: Path) -> None:
    pod = _pod_tree(root)
    raw = os.fsencode(pod)
    os.mkdir(raw + b"/dir-\xff\xfe")
    with open(raw + b"/dir-\xff\xfe/file-\x80", "wb") as f:
        f.write(b"x")
    with open(raw + b"/\xc3\x28", "wb") as f:
        f.write(b"y")
    os.symlink(b"/etc/\xff", raw + b"/link-\xff")
    out = remove_pod_dir(_record(pod), kubelet_root=root)
    assert out.ok, out
    assert not pod.exists()


def test_kubelet_root_given_through_a_symlink(root: Path, tmp_path: Path) -> None:
    link = tmp_path / "kubelet-link"
    link.symlink_to(root)
    pod = _pod_tree(root)
    assert remove_pod_dir(_record(pod), kubelet_root=link).ok
    assert not pod.exists()


def test_entry_budget_fails_with_a_reason_and_resumes(root: Path) -> None:
    pod = _pod_tree(root)
    for i in range(20):
        (pod / f"f{i}").touch()
    record = _record(pod)
    out = remove_pod_dir(record, kubelet_root=root, max_entries=5)
    assert not out.ok and "more than 5 entries" in out.detail, out
    assert pod.exists()
    assert remove_pod_dir(record, kubelet_root=root).ok
    assert not pod.exists()


def test_depth_limit_fails_with_a_reason(root: Path) -> None:
    pod = _pod_tree(root)
    deep = pod.joinpath(*["d"] * 10)
    deep.mkdir(parents=True)
    out = remove_pod_dir(_record(pod), kubelet_root=root, max_depth=4)
    assert not out.ok and "deeper than 4" in out.detail, out
    assert deep.exists()


def test_mount_below_in_the_mount_table_refuses_before_touching(root: Path, tmp_path: Path) -> None:
    pod = _pod_tree(root)
    vol = pod / "volumes" / "kubernetes.io~empty-dir" / "data"
    proc = _fake_proc(tmp_path, _mountinfo_line(77, vol))
    out = remove_pod_dir(_record(pod), kubelet_root=root, proc_root=proc)
    assert not out.ok and "mount(s) remain below" in out.detail, out
    assert (vol / "file").exists()
    assert (pod / "etc-hosts").exists()


def test_mount_on_a_sibling_with_a_common_prefix_does_not_block(root: Path, tmp_path: Path) -> None:
    """`pods/<uid>x` is not below `pods/<uid>`; with no fdinfo in the fake proc the walk still refuses,
    but for the right reason."""
    pod = _pod_tree(root)
    proc = _fake_proc(tmp_path, _mountinfo_line(77, f"{pod}x/volumes/v"))
    out = remove_pod_dir(_record(pod), kubelet_root=root, proc_root=proc)
    assert not out.ok and "mount id" in out.detail, out


def test_unreadable_mount_table_refuses(root: Path, tmp_path: Path) -> None:
    pod = _pod_tree(root)
    out = remove_pod_dir(_record(pod), kubelet_root=root, proc_root=tmp_path / "no-proc")
    assert not out.ok and "cannot prove" in out.detail, out
    assert (pod / "etc-hosts").exists()


# --- unmount_volume: the refusals decided from the mount table alone -----------------------------------


def _volume(path: Path, mount_id: int | None) -> VolumeDir:
    return VolumeDir(pod_uid=UID, plugin="kubernetes.io~empty-dir", name="data", path=str(path),
                     mount_id=mount_id)


def test_unmount_nothing_mounted_is_gone(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    proc = _fake_proc(tmp_path, _mountinfo_line(50, tmp_path / "other"))
    out = unmount_volume(_volume(vol, 50), proc_root=proc)
    assert out.ok and out.already_gone, out


def test_unmount_other_mount_id_is_changed(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    proc = _fake_proc(tmp_path, _mountinfo_line(51, vol))
    out = unmount_volume(_volume(vol, 50), proc_root=proc)
    assert out.identity_changed and not out.ok, out
    assert "51" in out.detail


def test_unmount_verified_mount_under_another_is_changed(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    proc = _fake_proc(tmp_path, _mountinfo_line(50, vol), _mountinfo_line(60, vol, parent=50))
    out = unmount_volume(_volume(vol, 50), proc_root=proc)
    assert out.identity_changed and not out.ok, out


def test_unmount_with_mounts_below_refuses(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    proc = _fake_proc(tmp_path, _mountinfo_line(50, vol), _mountinfo_line(61, vol / "sub", parent=50))
    out = unmount_volume(_volume(vol, 50), proc_root=proc)
    assert not out.ok and not out.identity_changed and "below" in out.detail, out


def test_unmount_csi_volume_is_looked_up_at_its_mount_leaf(tmp_path: Path) -> None:
    vol = tmp_path / "csi-vol"
    proc = _fake_proc(tmp_path, _mountinfo_line(52, vol / "mount"))
    csi = VolumeDir(pod_uid=UID, plugin="kubernetes.io~csi", name="pv", path=str(vol), mount_id=51)
    out = unmount_volume(csi, proc_root=proc)
    assert out.identity_changed and "mount" in out.detail, out


def test_unmount_unreadable_mount_table_fails(tmp_path: Path) -> None:
    out = unmount_volume(_volume(tmp_path / "vol", 50), proc_root=tmp_path / "no-proc")
    assert not out.ok and not out.already_gone, out


def test_unmount_child_is_a_module_of_the_package() -> None:
    import errno
    import subprocess

    from nodegc.reclaim import unmount_child, unmounting

    assert unmounting.UNMOUNT_CHILD[-1] == unmount_child.__file__
    proc = subprocess.run([*unmounting.UNMOUNT_CHILD, "/nonexistent/nodegc", "1", "0", "/proc"],
                          capture_output=True, timeout=30, check=False)
    assert proc.returncode == 0 and proc.stdout.split() == [b"errno", str(errno.ENOENT).encode()]
    usage = subprocess.run([*unmounting.UNMOUNT_CHILD], capture_output=True, timeout=30, check=False)
    assert usage.returncode == 2 and b"usage" in usage.stderr
