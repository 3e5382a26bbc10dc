"""Pod directories under the kubelet root and the volumes inside them.

Everything here is read through directory entries with follow_symlinks=False: a symlink planted in a pod
directory must never lead a later delete (or even a stat) outside the kubelet root. Volume directories are
usually mount points of filesystems that may hang (a dead NFS server, a stuck FUSE daemon), so they are
named from their parent's directory entries and never stat'ed or listed themselves.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodegc.hostio.files import os_reason, symlink_reason
from nodegc.hostio.kubelet import PLAUSIBLE_UID, csi_mount_point
from nodegc.hostio.mountinfo import MountIndex
from nodegc.model.resources import Kind, Mount, PodDir, ReadProblem, VolumeDir


@dataclass
class _Scan:
    index: MountIndex
    problems: list[ReadProblem] = field(default_factory=list)

    def problem(self, path: str, reason: str, *, kind: Kind = Kind.POD_DIR) -> None:
        self.problems.append(ReadProblem(kind, path, reason))

    def entries(self, path: str, *, kind: Kind = Kind.POD_DIR) -> list[os.DirEntry[str]]:
        """Directory entries sorted by name; a directory that vanished or cannot be read is a problem."""
        try:
            with os.scandir(path) as it:
                found = list(it)
        except OSError as e:
            self.problem(path, os_reason(e), kind=kind)
            return []
        if len(found) > 1:
            found.sort(key=_name)
        return found

    def directory(self, entry: os.DirEntry[str], *, kind: Kind = Kind.POD_DIR) -> bool:
        """True for a real directory; a symlink or anything else is reported and not entered."""
        try:
            if entry.is_symlink():
                self.problem(entry.path, symlink_reason(entry.path), kind=kind)
                return False
            if entry.is_dir(follow_symlinks=False):
                return True
        except OSError as e:
            self.problem(entry.path, os_reason(e), kind=kind)
            return False
        self.problem(entry.path, "not a directory", kind=kind)
        return False

    def named(self, path: str, *, kind: Kind) -> list[os.DirEntry[str]]:
        """Entries whose names are valid UTF-8; kubelet never writes others, so they are reported."""
        found = self.entries(path, kind=kind)
        if all(entry.name.isascii() for entry in found):
            return found
        out: list[os.DirEntry[str]] = []
        for entry in found:
            if _is_utf8(entry.name):
                out.append(entry)
            else:
                self.problem(entry.path, "name is not valid UTF-8", kind=kind)
        return out

    def subdirs(self, path: str, *, kind: Kind = Kind.POD_DIR) -> list[os.DirEntry[str]]:
        return [e for e in self.named(path, kind=kind) if self.directory(e, kind=kind)]

    def leaves(self, path: str, *, kind: Kind = Kind.POD_DIR) -> list[os.DirEntry[str]]:
        """Entries that are not symlinks, of any type, and are not entered (they may be mount points)."""
        found: list[os.DirEntry[str]] = []
        for entry in self.named(path, kind=kind):
            try:
                is_link = entry.is_symlink()
            except OSError as e:
                self.problem(entry.path, os_reason(e), kind=kind)
                continue
            if is_link:
                self.problem(entry.path, symlink_reason(entry.path), kind=kind)
            else:
                found.append(entry)
        return found


def _name(entry: os.DirEntry[str]) -> str:
    return entry.name


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _volume(scan: _Scan, *, uid: str, plugin: str, name: str, path: str, subpath: bool = False) -> VolumeDir:
    mount = scan.index.top_at(path)
    csi = csi_mount_point(path, plugin=plugin, subpath=subpath)
    if mount is None and csi is not None:
        mount = scan.index.top_at(csi)
    return VolumeDir(
        pod_uid=uid,
        plugin=plugin,
        name=name,
        path=path,
        mount_id=mount.mount_id if mount else None,
        fs_type=mount.fs_type if mount else None,
        source=mount.source if mount else None,
        subpath=subpath,
    )


def _volumes(scan: _Scan, uid: str, volumes_path: str) -> list[VolumeDir]:
    return [
        _volume(scan, uid=uid, plugin=plugin.name, name=vol.name, path=vol.path)
        for plugin in scan.subdirs(volumes_path, kind=Kind.VOLUME_MOUNT)
        for vol in scan.leaves(plugin.path, kind=Kind.VOLUME_MOUNT)
    ]


def _subpaths(scan: _Scan, uid: str, subpaths_path: str) -> list[VolumeDir]:
    """`volume-subpaths/<volume>/<container>/<index>`: each leaf is a bind mount (file or directory)."""
    return [
        _volume(
            scan,
            uid=uid,
            plugin=volume.name,
            name=f"{container.name}/{leaf.name}",
            path=leaf.path,
            subpath=True,
        )
        for volume in scan.subdirs(subpaths_path, kind=Kind.VOLUME_MOUNT)
        for container in scan.subdirs(volume.path, kind=Kind.VOLUME_MOUNT)
        for leaf in scan.leaves(container.path, kind=Kind.VOLUME_MOUNT)
    ]


def _pod(scan: _Scan, entry: os.DirEntry[str]) -> PodDir | None:
    uid = entry.name
    if not _is_utf8(uid):
        scan.problem(entry.path, "pod directory name is not valid UTF-8, not a pod UID")
        return None
    if not PLAUSIBLE_UID.fullmatch(uid):
        scan.problem(entry.path, f"pod directory name {uid!r} is not a plausible pod UID")
        return None
    if not scan.directory(entry):
        return None
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError as e:
        scan.problem(entry.path, os_reason(e))
        return None
    volumes: list[VolumeDir] = []
    containers: list[str] = []
    for child in scan.entries(entry.path):
        name = child.name
        if name == "volumes" and scan.directory(child, kind=Kind.VOLUME_MOUNT):
            volumes.extend(_volumes(scan, uid, child.path))
        elif name == "volume-subpaths" and scan.directory(child, kind=Kind.VOLUME_MOUNT):
            volumes.extend(_subpaths(scan, uid, child.path))
        elif name == "containers" and scan.directory(child):
            containers.extend(c.name for c in scan.subdirs(child.path))
    return PodDir(
        uid=uid,
        path=entry.path,
        inode=st.st_ino,
        mtime=st.st_mtime,
        volumes=tuple(volumes),
        container_names=tuple(containers),
        mounts_below=tuple(sorted(m.mount_id for m in scan.index.below(entry.path))),
    )


def scan_pod_dirs(
    kubelet_root: Path, mounts: Sequence[Mount] | MountIndex
) -> tuple[tuple[PodDir, ...], tuple[ReadProblem, ...]]:
    """Every `pods/<uid>` directory with its volumes and the mounts still held below it.

    The configured root itself is resolved once (a kubelet root that is a symlink is common, and the mount
    table names the resolved paths); nothing below it is ever followed.
    """
    index = mounts if isinstance(mounts, MountIndex) else MountIndex.build(mounts)
    scan = _Scan(index=index)
    pods_path = os.path.join(os.path.realpath(os.fsdecode(kubelet_root)), "pods")
    try:
        mode = os.lstat(pods_path).st_mode
    except FileNotFoundError:
        return (), ()
    except OSError as e:
        return (), (ReadProblem(Kind.POD_DIR, pods_path, os_reason(e)),)
    if stat.S_ISLNK(mode):
        return (), (ReadProblem(Kind.POD_DIR, pods_path, symlink_reason(pods_path)),)
    if not stat.S_ISDIR(mode):
        return (), (ReadProblem(Kind.POD_DIR, pods_path, "not a directory"),)
    pods = [pod for entry in scan.entries(pods_path) if (pod := _pod(scan, entry)) is not None]
    return tuple(pods), tuple(scan.problems)
