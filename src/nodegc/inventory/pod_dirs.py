"""Pod directories under the kubelet root and the volumes inside them.

Everything here is read through directory entries with follow_symlinks=False: a symlink planted in a pod
directory must never lead a later delete (or even a stat) outside the kubelet root. Volume directories are
usually mount points of filesystems that may hang (a dead NFS server, a stuck FUSE daemon), so they are
named from their parent's directory entries and never stat'ed or listed themselves.

The agent scans the same tree every cycle, so it may pass a `PodDirWatcher`: each directory the walk
lists gets an inotify watch before it is listed, and a pod directory's walk is taken again only while no
event touched any directory of it since, its inode is the one listed now and the mounts below it are the
same; the mount-dependent parts (each volume's mount) are always computed from this scan's mount table.
See `PodDirWatcher` for when it walks everything anyway.
"""

from __future__ import annotations

import dataclasses
import errno
import math
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodegc.hostio.files import Shared, os_reason, symlink_reason
from nodegc.hostio.inotify import IN_DELETE_SELF, IN_IGNORED, IN_MOVE_SELF, IN_Q_OVERFLOW, IN_UNMOUNT, Inotify
from nodegc.hostio.kubelet import PLAUSIBLE_UID, csi_mount_point
from nodegc.hostio.mountinfo import MountIndex
from nodegc.model.resources import Kind, Mount, PodDir, ReadProblem, VolumeDir
from nodegc.observe.logs import get_logger

log = get_logger(__name__)


@dataclass
class _Scan:
    index: MountIndex
    problems: list[ReadProblem] = field(default_factory=list)
    watch: Callable[[str], None] | None = None
    shared: Shared = field(default_factory=Shared)
    """Volume plugin and container names, one string each (every pod repeats them)."""

    def problem(self, path: str, reason: str, *, kind: Kind = Kind.POD_DIR) -> None:
        self.problems.append(ReadProblem(kind, path, reason))

    def entries(self, path: str, *, kind: Kind = Kind.POD_DIR) -> list[os.DirEntry[str]]:
        """Directory entries sorted by name; a directory that vanished or cannot be read is a problem."""
        if self.watch is not None:
            self.watch(path)  # before the listing: a change after it is an event, one before it is listed
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
        name=sys.intern(name),  # a volume name that every pod of a workload repeats
        path=sys.intern(path),  # its mount's mount point, the same string
        mount_id=mount.mount_id if mount else None,
        fs_type=mount.fs_type if mount else None,
        source=mount.source if mount else None,
        subpath=subpath,
    )


def _volumes(scan: _Scan, uid: str, volumes_path: str) -> list[VolumeDir]:
    return [
        _volume(scan, uid=uid, plugin=scan.shared.text(plugin.name), name=vol.name, path=vol.path)
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
    uid = sys.intern(entry.name)  # the UID the cache entries and the findings name: one string
    if not _is_utf8(uid):
        scan.problem(entry.path, "pod directory name is not valid UTF-8, not a pod UID")
        return None
    if not PLAUSIBLE_UID.fullmatch(uid):
        scan.problem(entry.path, f"pod directory name {uid!r} is not a plausible pod UID")
        return None
    if not scan.directory(entry):
        return None
    # Listed (and watched, for a PodDirWatcher) before its stat: a write into it after the stat raises an event.
    children = scan.entries(entry.path)
    try:
        st = os.lstat(entry.path)
    except OSError as e:
        scan.problem(entry.path, os_reason(e))
        return None
    if not stat.S_ISDIR(st.st_mode):
        scan.problem(entry.path, "no longer a directory")
        return None
    volumes: list[VolumeDir] = []
    containers: list[str] = []
    for child in children:
        name = child.name
        if name == "volumes" and scan.directory(child, kind=Kind.VOLUME_MOUNT):
            volumes.extend(_volumes(scan, uid, child.path))
        elif name == "volume-subpaths" and scan.directory(child, kind=Kind.VOLUME_MOUNT):
            volumes.extend(_subpaths(scan, uid, child.path))
        elif name == "containers" and scan.directory(child):
            containers.extend(scan.shared.text(c.name) for c in scan.subdirs(child.path))
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
    kubelet_root: Path, mounts: Sequence[Mount] | MountIndex, *, watcher: PodDirWatcher | None = None
) -> tuple[tuple[PodDir, ...], tuple[ReadProblem, ...]]:
    """Every `pods/<uid>` directory with its volumes and the mounts still held below it.

    The configured root itself is resolved once (a kubelet root that is a symlink is common, and the mount
    table names the resolved paths); nothing below it is ever followed.
    """
    index = mounts if isinstance(mounts, MountIndex) else MountIndex.build(mounts)
    scan = _Scan(index=index)
    pods_path = os.path.join(os.path.realpath(os.fsdecode(kubelet_root)), "pods")
    try:
        st = os.lstat(pods_path)
    except FileNotFoundError:
        return (), ()
    except OSError as e:
        return (), (ReadProblem(Kind.POD_DIR, pods_path, os_reason(e)),)
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return (), (ReadProblem(Kind.POD_DIR, pods_path, symlink_reason(pods_path)),)
    if not stat.S_ISDIR(mode):
        return (), (ReadProblem(Kind.POD_DIR, pods_path, "not a directory"),)
    if watcher is not None:
        return watcher.scan(scan, pods_path, st, mounts=mounts)
    pods = [pod for entry in scan.entries(pods_path) if (pod := _pod(scan, entry)) is not None]
    return tuple(pods), tuple(scan.problems)


FULL_WALK_SECONDS = 300.0
"""The longest a pod directory's walk is taken again: then every directory is walked, events or not."""

WATCH_LIMIT_RETRY_SECONDS = 3600.0
"""After the inotify watch limit was hit: every pod directory is walked, and the watches are tried again only
after this long (they compete with the kubelet's and the runtime's watches for the same per-user limit)."""

FALLBACK_REASONS = ("watch_limit", "inotify_unavailable", "events_unreadable")
"""Why the watcher turned to walking every pod directory every scan (`PodDirWatcher.fallbacks`)."""

LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs", "zfs"})
"""Where inotify sees every change: a network or FUSE filesystem changed from elsewhere raises no event,
and an overlay's lower layers can change under it; on any other filesystem every scan walks everything."""

_NO_OWNER = "\0"  # a watch descriptor this watcher did not make


@dataclass(frozen=True, slots=True)  # one per pod directory, held between scans
class _Remembered:
    inode: int
    pod: PodDir
    mounts: tuple[Mount, ...] | None
    """The mount table (the very tuple) the pod's mount-dependent fields were computed from."""


def _filesystem_of(index: MountIndex, path: str) -> str | None:
    probe = path
    while True:
        mount = index.top_at(probe)
        if mount is not None:
            return mount.fs_type
        if probe in ("/", ""):
            return None
        probe = os.path.dirname(probe.rstrip("/")) or "/"


class PodDirWatcher:
    """Pod directories' walks remembered between the scans of one kubelet root, while inotify proves
    that none of the directories each walk listed has changed.

    A remembered walk is taken again only when all of these hold, else the directory is walked afresh:
    - the pods directory is on a local filesystem (`LOCAL_FILESYSTEMS`), is the same inode on the same
      device, and its inotify instance works;
    - no event came for any directory of that pod (each watch is added before its directory is listed);
      a queue overflow, an event of an unknown watch or a failed drain forgets every walk;
    - the walk had no read problem and every watch of it was added (a watch that cannot be added forgets
      nothing else: that pod is simply walked every scan), and the per-user inotify watch limit
      (fs.inotify.max_user_watches) was not hit: then every watch is released at once (the kubelet and the
      runtime need that limit too), every pod directory is walked every scan, and the watches are tried again
      only `WATCH_LIMIT_RETRY_SECONDS` later;
    - the pod directory's inode is the one listed now, and the ids of the mounts at or below it are the
      same (a mount over a listed directory raises no event, but it changes the mount table);
    - the last full walk is less than `full_walk_seconds` old.
    """

    def __init__(self, *, full_walk_seconds: float = FULL_WALK_SECONDS,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.full_walk_seconds = full_walk_seconds
        self.monotonic = monotonic
        self._inotify: Inotify | None = None
        self._owners: dict[int, str | None] = {}
        """watch descriptor -> the pod uid whose walk listed it (None: the pods directory itself)."""
        self._walks: dict[str, _Remembered] = {}
        self._root: tuple[str, int, int] | None = None
        self._last_full = -math.inf
        self._retry_at = -math.inf
        """When inotify could not be set up: not before this (monotonic) is it tried again."""
        self._lock = threading.Lock()
        self.reused = 0
        self.walked = 0
        self.full_walks = 0
        self.watching = False
        """Whether the last scan was watched (False: it walked every pod directory)."""
        self.fallbacks = dict.fromkeys(FALLBACK_REASONS, 0)
        """Times the watcher turned to walking everything, by reason (`FALLBACK_REASONS`)."""

    def stats(self) -> dict[str, int]:
        """For the metrics: `watching` (1 or 0) and `fallbacks_<reason>`."""
        with self._lock:
            return {"watching": int(self.watching), **{f"fallbacks_{k}": v for k, v in self.fallbacks.items()}}

    def close(self) -> None:
        with self._lock:
            self._reset()

    def _reset(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
        self._inotify = None
        self._owners.clear()
        self._walks.clear()
        self._root = None

    def scan(self, scan: _Scan, pods_path: str, st: os.stat_result, *,
             mounts: object = None) -> tuple[tuple[PodDir, ...], tuple[ReadProblem, ...]]:
        """`mounts`: the mount table the index was built from. When a pod's walk was last computed from
        this very tuple (the scan's mountinfo parse is reused while its bytes are the same), its volumes'
        mounts are not looked up again: they were computed from the same table."""
        with self._lock:
            inotify = self._begin(scan.index, pods_path, st)
            self.watching = inotify is not None
            if inotify is None:
                pods = [pod for entry in scan.entries(pods_path) if (pod := _pod(scan, entry)) is not None]
                self.walked += len(pods)
                return tuple(pods), tuple(scan.problems)
            return self._scan(scan, inotify, pods_path, mounts=mounts if isinstance(mounts, tuple) else None)

    def _begin(self, index: MountIndex, pods_path: str, st: os.stat_result) -> Inotify | None:
        """The inotify instance to use this scan, with every event so far applied; None: walk it all."""
        if self.monotonic() < self._retry_at:
            return None
        if _filesystem_of(index, pods_path) not in LOCAL_FILESYSTEMS:
            self._reset()
            return None
        root = (pods_path, st.st_dev, st.st_ino)
        if root != self._root:
            self._reset()
            self._root = root
        if self._inotify is None:
            try:
                self._inotify = Inotify()
            except OSError as e:
                # Out of inotify instances (a per-user limit other programs share), say: walk everything,
                # and try again after a full-walk period rather than never.
                self._retry_at = self.monotonic() + self.full_walk_seconds
                self.fallbacks["inotify_unavailable"] += 1
                log.warning("inotify unavailable: every pod directory is walked every scan for now",
                            reason="inotify_unavailable", error=str(e), retry_seconds=self.full_walk_seconds)
                return None
        now = self.monotonic()
        if now - self._last_full >= self.full_walk_seconds:
            self._walks.clear()
            self._last_full = now
            self.full_walks += 1
        try:
            events = self._inotify.read_events()
        except OSError as e:
            self.fallbacks["events_unreadable"] += 1
            log.warning("inotify events unreadable: every pod directory is walked again",
                        reason="events_unreadable", error=str(e))
            self._reset()
            return None
        for ev in events:
            owner = self._owners.get(ev.wd, _NO_OWNER)
            if ev.mask & IN_Q_OVERFLOW or owner == _NO_OWNER:
                self._walks.clear()
            elif owner is None:  # the pods directory: the event names the pod directory it concerns
                if ev.name:
                    self._walks.pop(ev.name, None)
                if ev.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED):
                    self._walks.clear()
            else:
                self._walks.pop(owner, None)
            if ev.mask & IN_IGNORED:
                self._owners.pop(ev.wd, None)
        return self._inotify

    def _scan(self, scan: _Scan, inotify: Inotify, pods_path: str, *,
              mounts: tuple[Mount, ...] | None) -> tuple[tuple[PodDir, ...], tuple[ReadProblem, ...]]:
        owner: list[str | None] = [None]
        unwatched = [False]
        limit: list[OSError] = []
        """The watch limit was hit: no watch is tried again this scan, and all are released after it."""

        def watch(path: str) -> None:
            if limit:
                unwatched[0] = True
                return
            try:
                wd = inotify.add_watch(path)
            except OSError as e:
                unwatched[0] = True
                if e.errno == errno.ENOSPC:
                    limit.append(e)
                return
            known = self._owners.get(wd, _NO_OWNER)
            if known not in (_NO_OWNER, owner[0]):
                # One directory reached from two places (a bind mount): neither walk can be trusted.
                unwatched[0] = True
                if known is not None:
                    self._walks.pop(known, None)
            self._owners[wd] = owner[0]

        scan.watch = watch
        entries = list(scan.entries(pods_path))
        root_unwatched = unwatched[0]  # the listing of pods/ itself is not watched: take nothing again
        pods: list[PodDir] = []
        listed: set[str] = set()
        for entry in entries:
            listed.add(entry.name)
            pod = None if root_unwatched else self._again(scan, entry, mounts=mounts)
            if pod is not None:
                self.reused += 1
                pods.append(pod)
                continue
            self._walks.pop(entry.name, None)
            # The UID as the pod directory's record holds it (interned): the watches and the walks are
            # kept by it between scans, and the listing's own string would be one more copy of each.
            owner_name = sys.intern(entry.name)
            owner[0], unwatched[0] = owner_name, False
            before = len(scan.problems)
            pod = _pod(scan, entry)
            owner[0] = None
            self.walked += 1
            if pod is None:
                continue
            pods.append(pod)
            if not root_unwatched and not unwatched[0] and len(scan.problems) == before:
                try:
                    inode = entry.inode()
                except OSError:
                    continue
                self._walks[owner_name] = _Remembered(inode, pod, mounts)
        for gone in set(self._walks) - listed:
            del self._walks[gone]
        scan.watch = None
        if limit:
            self._watch_limit(limit[0])
        return tuple(pods), tuple(scan.problems)

    def _watch_limit(self, e: OSError) -> None:
        """Release every watch now and walk everything until `WATCH_LIMIT_RETRY_SECONDS` have passed."""
        self._reset()
        self.watching = False
        self._retry_at = self.monotonic() + WATCH_LIMIT_RETRY_SECONDS
        self.fallbacks["watch_limit"] += 1
        log.warning("inotify watch limit reached (fs.inotify.max_user_watches): every watch released, every pod"
                    " directory walked every scan for now", reason="watch_limit", error=e.strerror or str(e),
                    max_user_watches=_max_user_watches(), retry_seconds=WATCH_LIMIT_RETRY_SECONDS)

    def _again(self, scan: _Scan, entry: os.DirEntry[str], *, mounts: tuple[Mount, ...] | None) -> PodDir | None:
        """The remembered walk of this entry with this scan's mounts, or None."""
        remembered = self._walks.get(entry.name)
        if remembered is None:
            return None
        try:
            inode = entry.inode()
        except OSError:
            return None
        pod = remembered.pod
        if inode != remembered.inode or entry.path != pod.path:
            return None
        if mounts is not None and remembered.mounts is mounts:
            return pod
        below = tuple(sorted(m.mount_id for m in scan.index.below(entry.path)))
        if below != pod.mounts_below:
            return None
        volumes = tuple(_volume(scan, uid=v.pod_uid, plugin=v.plugin, name=v.name, path=v.path, subpath=v.subpath)
                        for v in pod.volumes)
        if volumes != pod.volumes:
            pod = dataclasses.replace(pod, volumes=volumes)
        self._walks[entry.name] = _Remembered(inode, pod, mounts)
        return pod


def _max_user_watches() -> int | None:
    try:
        return int(Path("/proc/sys/fs/inotify/max_user_watches").read_text())
    except (OSError, ValueError):
        return None


_watchers: dict[str, PodDirWatcher] = {}
_watchers_lock = threading.Lock()


def pod_dir_watcher(kubelet_root: Path) -> PodDirWatcher:
    """One watcher per kubelet root for the life of the process (the agent's scans share it)."""
    key = os.fsdecode(kubelet_root)
    with _watchers_lock:
        watcher = _watchers.get(key)
        if watcher is None:
            watcher = _watchers[key] = PodDirWatcher()
        return watcher


def forget_watchers() -> None:
    """Close every watcher (tests)."""
    with _watchers_lock:
        for watcher in _watchers.values():
            watcher.close()
        _watchers.clear()
