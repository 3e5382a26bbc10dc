"""Pod directory scanning on a temporary kubelet root with synthetic mount records."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodegc.inventory.pod_dirs import scan_pod_dirs
from nodegc.model.resources import Kind, Mount, PodDir

UID = "0b3c2f5e-6d8a-4a1e-9c55-2f1f3b1d9e01"
STATIC_UID = "6e1f0a5b2f0c4b0e9d3f2a1b0c9d8e7f"


def _mount(mount_id: int, path: Path, *, fs_type: str = "tmpfs", source: str = "tmpfs") -> Mount:
    return Mount(
        mount_id=mount_id,
        parent_id=1,
        device="0:99",
        root="/",
        mount_point=str(path),
        options="rw",
        fs_type=fs_type,
        source=source,
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    kubelet = Path(os.path.realpath(tmp_path)) / "kubelet"
    (kubelet / "pods").mkdir(parents=True)
    return kubelet


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A tree outside the kubelet root that would look like volumes if a symlink were followed."""
    out = Path(os.path.realpath(tmp_path)) / "outside"
    (out / "kubernetes.io~empty-dir" / "stolen").mkdir(parents=True)
    (out / "volumes" / "kubernetes.io~empty-dir" / "stolen").mkdir(parents=True)
    return out


def _pod(root: Path, uid: str = UID) -> Path:
    pod = root / "pods" / uid
    pod.mkdir()
    return pod


def _by_uid(pods: tuple[PodDir, ...]) -> dict[str, PodDir]:
    return {p.uid: p for p in pods}


def test_missing_pods_dir_is_empty_without_problems(tmp_path: Path) -> None:
    assert scan_pod_dirs(tmp_path / "nothing", []) == ((), ())


def test_full_pod_layout_with_mounted_and_unmounted_volumes(root: Path) -> None:
    pod = _pod(root)
    vols = pod / "volumes"
    cache = vols / "kubernetes.io~empty-dir" / "cache"
    scratch = vols / "kubernetes.io~empty-dir" / "scratch"
    token = vols / "kubernetes.io~projected" / "kube-api-access-7x2"
    csi = vols / "kubernetes.io~csi" / "pvc-1234"
    for d in (cache, scratch, token, csi / "mount"):
        d.mkdir(parents=True)
    (csi / "vol_data.json").write_text("{}")
    sub = pod / "volume-subpaths" / "config" / "app" / "0"
    sub.parent.mkdir(parents=True)
    sub.write_text("")  # a file bind mount
    (pod / "plugins" / "kubernetes.io~empty-dir" / "wrapped_kube-api-access-7x2").mkdir(parents=True)
    (pod / "containers" / "app").mkdir(parents=True)
    (pod / "containers" / "app" / "5f1c").write_text("")
    (pod / "containers" / "init").mkdir()
    (pod / "etc-hosts").write_text("127.0.0.1 localhost\n")
    mounts = [
        _mount(1, Path("/")),
        _mount(10, cache),
        _mount(11, token),
        _mount(12, csi / "mount", fs_type="ext4", source="/dev/sdb"),
        _mount(13, sub, fs_type="ext4", source="/dev/sda1"),
        _mount(14, root / "pods" / "other-uid" / "volumes" / "x"),
        _mount(15, Path(str(pod) + "-lookalike")),
    ]

    pods, problems = scan_pod_dirs(root, mounts)

    assert problems == ()
    (found,) = pods
    assert found.uid == UID
    assert found.path == str(pod)
    st = os.lstat(pod)
    assert (found.inode, found.mtime) == (st.st_ino, st.st_mtime)
    assert found.container_names == ("app", "init")
    assert found.mounts_below == (10, 11, 12, 13)
    volumes = {(v.plugin, v.name): v for v in found.volumes}
    assert set(volumes) == {
        ("kubernetes.io~empty-dir", "cache"),
        ("kubernetes.io~empty-dir", "scratch"),
        ("kubernetes.io~projected", "kube-api-access-7x2"),
        ("kubernetes.io~csi", "pvc-1234"),
        ("config", "app/0"),
    }
    assert volumes[("kubernetes.io~empty-dir", "cache")].mount_id == 10
    assert volumes[("kubernetes.io~empty-dir", "cache")].path == str(cache)
    assert not volumes[("kubernetes.io~empty-dir", "scratch")].mounted
    assert volumes[("kubernetes.io~empty-dir", "scratch")].fs_type is None
    assert volumes[("kubernetes.io~csi", "pvc-1234")].mount_id == 12
    assert volumes[("kubernetes.io~csi", "pvc-1234")].source == "/dev/sdb"
    subpath = volumes[("config", "app/0")]
    assert subpath.subpath
    assert (subpath.mount_id, subpath.fs_type, subpath.source) == (13, "ext4", "/dev/sda1")
    assert all(v.pod_uid == UID and not v.subpath for k, v in volumes.items() if k[0] != "config")


def test_mount_below_but_not_at_the_volume_does_not_mark_it_mounted(root: Path) -> None:
    pod = _pod(root)
    vol = pod / "volumes" / "kubernetes.io~empty-dir" / "data"
    (vol / "inner").mkdir(parents=True)
    pods, _ = scan_pod_dirs(root, [_mount(20, vol / "inner")])
    (found,) = pods
    (volume,) = found.volumes
    assert not volume.mounted
    assert found.mounts_below == (20,)


def test_stacked_mounts_report_the_top_one(root: Path) -> None:
    vol = _pod(root) / "volumes" / "kubernetes.io~empty-dir" / "data"
    vol.mkdir(parents=True)
    pods, _ = scan_pod_dirs(root, [_mount(30, vol), _mount(31, vol, fs_type="overlay")])
    (volume,) = pods[0].volumes
    assert (volume.mount_id, volume.fs_type) == (31, "overlay")
    assert pods[0].mounts_below == (30, 31)


def test_static_pod_hash_uid_is_plausible(root: Path) -> None:
    _pod(root, STATIC_UID)
    pods, problems = scan_pod_dirs(root, [])
    assert [p.uid for p in pods] == [STATIC_UID]
    assert problems == ()


def test_non_utf8_and_odd_names_are_problems_not_pods(root: Path) -> None:
    _pod(root)
    pods_b = os.fsencode(root / "pods")
    os.mkdir(pods_b + b"/\xff\xfe")
    os.mkdir(pods_b + b"/bad name!")
    os.mkdir(pods_b + b"/new\nline")
    (root / "pods" / "not-a-dir").write_text("")
    vols_b = os.fsencode(root / "pods" / UID / "volumes" / "kubernetes.io~empty-dir")
    os.makedirs(vols_b + b"/ok")
    os.mkdir(vols_b + b"/\xc3\x28")

    pods, problems = scan_pod_dirs(root, [])

    assert [p.uid for p in pods] == [UID]
    assert [v.name for v in pods[0].volumes] == ["ok"]
    reasons = {os.fsencode(p.path).rsplit(b"/", 1)[1]: p.reason for p in problems}
    assert set(reasons) == {b"\xff\xfe", b"bad name!", b"new\nline", b"not-a-dir", b"\xc3\x28"}
    assert "UTF-8" in reasons[b"\xff\xfe"]
    assert "plausible" in reasons[b"bad name!"]
    assert "plausible" in reasons[b"new\nline"]
    assert "not a directory" in reasons[b"not-a-dir"]
    assert "UTF-8" in reasons[b"\xc3\x28"]


class _Recorder:
    """Records every path the scanner hands to the os functions that could reach a symlink's target."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[str] = []
        for name in ("scandir", "lstat", "stat", "open", "listdir"):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._wrap(real))

    def _wrap(self, real: Any) -> Any:
        def wrapper(path: Any, *args: Any, **kwargs: Any) -> Any:
            self.paths.append(os.fsdecode(path))
            return real(path, *args, **kwargs)

        return wrapper

    def touched(self, prefix: Path) -> Iterator[str]:
        return (p for p in self.paths if p == str(prefix) or p.startswith(str(prefix) + "/"))


def test_symlinks_inside_the_tree_are_reported_and_never_followed(
    root: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = _pod(root)
    empty_dir = pod / "volumes" / "kubernetes.io~empty-dir"
    (empty_dir / "real").mkdir(parents=True)
    (empty_dir / "evil").symlink_to(outside / "kubernetes.io~empty-dir" / "stolen")
    (pod / "volumes" / "kubernetes.io~secret").symlink_to(outside / "kubernetes.io~empty-dir")
    (pod / "etc-hosts").symlink_to("/etc/hosts")
    second = _pod(root, STATIC_UID)
    (second / "volumes").symlink_to(outside / "volumes")
    (root / "pods" / "1f2e3d4c-0000-4000-8000-000000000000").symlink_to(outside)
    (pod / "volume-subpaths" / "cfg" / "app").mkdir(parents=True)
    (pod / "volume-subpaths" / "cfg" / "app" / "0").symlink_to(outside)
    recorder = _Recorder(monkeypatch)

    pods, problems = scan_pod_dirs(root, [])

    by_uid = _by_uid(pods)
    assert set(by_uid) == {UID, STATIC_UID}
    assert [(v.plugin, v.name) for v in by_uid[UID].volumes] == [("kubernetes.io~empty-dir", "real")]
    assert by_uid[STATIC_UID].volumes == ()
    assert all(not v.path.startswith(str(outside)) for p in pods for v in p.volumes)
    reasons = {p.path: p.reason for p in problems}
    assert reasons == {
        str(empty_dir / "evil"): f"symlink to {outside / 'kubernetes.io~empty-dir' / 'stolen'}, not followed",
        str(pod / "volumes" / "kubernetes.io~secret"): (
            f"symlink to {outside / 'kubernetes.io~empty-dir'}, not followed"
        ),
        str(second / "volumes"): f"symlink to {outside / 'volumes'}, not followed",
        str(root / "pods" / "1f2e3d4c-0000-4000-8000-000000000000"): f"symlink to {outside}, not followed",
        str(pod / "volume-subpaths" / "cfg" / "app" / "0"): f"symlink to {outside}, not followed",
    }
    assert {p.kind for p in problems} <= {Kind.POD_DIR, Kind.VOLUME_MOUNT}
    assert list(recorder.touched(outside)) == []
    assert any(recorder.touched(root))  # the recorder did see the scan


def test_symlinked_pods_dir_is_refused(tmp_path: Path, outside: Path) -> None:
    kubelet = Path(os.path.realpath(tmp_path)) / "kubelet2"
    kubelet.mkdir()
    (kubelet / "pods").symlink_to(outside)
    pods, problems = scan_pod_dirs(kubelet, [])
    assert pods == ()
    assert [p.reason for p in problems] == [f"symlink to {outside}, not followed"]


def test_symlinked_kubelet_root_is_resolved_once(tmp_path: Path) -> None:
    real = Path(os.path.realpath(tmp_path)) / "data" / "kubelet"
    vol = real / "pods" / UID / "volumes" / "kubernetes.io~empty-dir" / "v"
    vol.mkdir(parents=True)
    link = tmp_path / "kubelet-link"
    link.symlink_to(real)
    pods, problems = scan_pod_dirs(link, [_mount(40, vol)])
    assert problems == ()
    assert pods[0].volumes[0].mount_id == 40


def test_vanishing_directory_is_a_problem(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pod = _pod(root)
    (pod / "volumes" / "kubernetes.io~empty-dir" / "v").mkdir(parents=True)
    _pod(root, STATIC_UID)
    real_scandir = os.scandir
    gone = str(pod / "volumes")

    def racing_scandir(path: Any) -> Any:
        if os.fsdecode(path) == gone:
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", racing_scandir)
    pods, problems = scan_pod_dirs(root, [])
    assert {p.uid for p in pods} == {UID, STATIC_UID}
    assert _by_uid(pods)[UID].volumes == ()
    assert [(p.path, p.kind) for p in problems] == [(gone, Kind.VOLUME_MOUNT)]
    assert "No such file" in problems[0].reason


def test_unreadable_pods_dir_is_a_problem(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(path: Any) -> Any:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "scandir", denied)
    pods, problems = scan_pod_dirs(root, [])
    assert pods == ()
    assert len(problems) == 1
    assert "Permission denied" in problems[0].reason
