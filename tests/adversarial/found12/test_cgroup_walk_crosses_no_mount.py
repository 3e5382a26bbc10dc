"""A container's cgroup is `<hierarchy><cgroupsPath>`, walked from the hierarchy's mount point with
O_NOFOLLOW. Nothing checked the mounts on the way: with another file system mounted below the hierarchy on
that path (a tmpfs over `kubepods`, a bind mount), the walk went into it and rmdir'd a directory of that
file system, which is no cgroup. A mount on the way (or at the cgroup itself) is not crossed: that hierarchy
is not touched, and the step stops with the reason (the bundle, which names the cgroup, stays)."""

from __future__ import annotations

from pathlib import Path

from nodegc.model.resources import Mount
from nodegc.reclaim.runtime_leftovers import _remove_cgroups

CID = "c" * 64


def _mount(i: int, point: Path, fs_type: str) -> Mount:
    return Mount(mount_id=100 + i, parent_id=1, device="0:1", root="/", mount_point=str(point), options="rw",
                 fs_type=fs_type, source=fs_type)


def test_a_mount_on_the_cgroups_path_is_not_crossed(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    hierarchy = root / "unified"
    (hierarchy / "kubepods" / "pod1" / CID).mkdir(parents=True)
    mounts = [_mount(0, hierarchy, "cgroup2"), _mount(1, hierarchy / "kubepods", "tmpfs")]
    out = _remove_cgroups(CID, f"/kubepods/pod1/{CID}", mounts=mounts, cgroup_root=root)
    assert not isinstance(out, str) and not out.ok, out
    assert "mount" in out.detail
    assert (hierarchy / "kubepods" / "pod1" / CID).is_dir()


def test_a_mount_at_the_cgroup_itself_is_not_crossed(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    hierarchy = root / "unified"
    (hierarchy / "kubepods" / CID).mkdir(parents=True)
    mounts = [_mount(0, hierarchy, "cgroup2"), _mount(1, hierarchy / "kubepods" / CID, "tmpfs")]
    out = _remove_cgroups(CID, f"/kubepods/{CID}", mounts=mounts, cgroup_root=root)
    assert not isinstance(out, str) and not out.ok, out
    assert (hierarchy / "kubepods" / CID).is_dir()


def test_mounts_beside_the_path_do_not_stop_it(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    hierarchy = root / "unified"
    (hierarchy / "kubepods" / CID).mkdir(parents=True)
    (hierarchy / "kubepods-other").mkdir()
    mounts = [_mount(0, hierarchy, "cgroup2"), _mount(1, hierarchy / "kubepods-other", "tmpfs")]
    assert _remove_cgroups(CID, f"/kubepods/{CID}", mounts=mounts, cgroup_root=root) == \
        "removed its empty cgroup in 1 hierarchies"


def test_a_file_system_stacked_over_the_hierarchy_is_not_walked(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    hierarchy = root / "unified"
    (hierarchy / "kubepods" / CID).mkdir(parents=True)
    under = _mount(0, hierarchy, "cgroup2")
    over = Mount(mount_id=200, parent_id=under.mount_id, device="0:2", root="/", mount_point=str(hierarchy),
                 options="rw", fs_type="tmpfs", source="tmpfs")
    out = _remove_cgroups(CID, f"/kubepods/{CID}", mounts=[under, over], cgroup_root=root)
    assert not isinstance(out, str) and not out.ok, out
    assert (hierarchy / "kubepods" / CID).is_dir()
