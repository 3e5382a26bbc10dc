"""Remove an orphaned `pods/<uid>` directory without ever leaving it.

A pod directory is where mounts of other filesystems (and bind mounts of host directories) live, and where a
container could plant symlinks. So the removal walks with directory descriptors only: every directory is
opened relative to its parent with O_NOFOLLOW, every unlink and rmdir names an entry relative to a
descriptor, and a directory whose device or mount id differs from the pod directory's is never entered (nor
removed): it is reported and the pod directory stays for a later round. Symlinks are unlinked as links.
Nothing but directories is ever opened (opening a FIFO would block).
"""

from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from nodegc.hostio.kubelet import PLAUSIBLE_UID
from nodegc.hostio.mountinfo import fd_mount_id, mounts_below, read_mounts
from nodegc.model.resources import PodDir
from nodegc.reclaim.outcomes import Outcome

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_REPORTED = 5

MAX_ENTRIES = 100_000
MAX_DEPTH = 64


class _BudgetExceeded(Exception):
    pass


def _show(path: bytes) -> str:
    """Printable even when the name is not UTF-8."""
    return path.decode("utf-8", "backslashreplace")


@dataclass
class _Walk:
    dev: int
    mount_id: int
    proc_root: Path
    deadline: float
    max_entries: int
    max_depth: int
    entries: int = 0
    removed: int = 0
    kept: list[str] = field(default_factory=list)
    """Entries left in place on purpose (another filesystem, a mount point) or that could not be removed."""

    def keep(self, path: bytes, why: str) -> None:
        self.kept.append(f"{_show(path)}: {why}")

    def count(self, path: bytes) -> None:
        self.entries += 1
        if self.entries > self.max_entries:
            raise _BudgetExceeded(f"more than {self.max_entries} entries (stopped at {_show(path)})")
        if time.monotonic() > self.deadline:
            raise _BudgetExceeded(f"time limit reached (stopped at {_show(path)})")

    def clear(self, dir_fd: int, path: bytes, depth: int) -> bool:
        """Remove everything inside `dir_fd`; True when it is empty afterwards."""
        if depth > self.max_depth:
            raise _BudgetExceeded(f"deeper than {self.max_depth} levels at {_show(path)}")
        names: list[tuple[bytes, bool]] = []
        with os.scandir(dir_fd) as it:
            for entry in it:
                name = os.fsencode(entry.name)
                self.count(path + b"/" + name)
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False  # vanished or unreadable: unlink reports what it really is
                names.append((name, is_dir))
        empty = True
        for name, is_dir in names:
            child = path + b"/" + name
            if is_dir:
                empty = self.remove_dir(dir_fd, name, child, depth) and empty
            else:
                empty = self.unlink(dir_fd, name, child) and empty
        return empty

    def unlink(self, dir_fd: int, name: bytes, path: bytes) -> bool:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return True
        except IsADirectoryError:
            self.keep(path, "became a directory after it was listed; left for the next round")
            return False
        except OSError as e:
            why = "a mount point" if e.errno == errno.EBUSY else f"cannot unlink: {e.strerror}"
            self.keep(path, why)
            return False
        self.removed += 1
        return True

    def remove_dir(self, dir_fd: int, name: bytes, path: bytes, depth: int) -> bool:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return True
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                # Replaced by a symlink or a file after the listing: remove the link, not its target.
                return self.unlink(dir_fd, name, path)
            self.keep(path, f"cannot open: {e.strerror}")
            return False
        try:
            st = os.fstat(fd)
            if st.st_dev != self.dev:
                self.keep(path, f"on another filesystem (device {st.st_dev:#x}), not entered")
                return False
            mount_id = fd_mount_id(fd, proc_root=self.proc_root)
            if mount_id != self.mount_id:
                self.keep(path, f"a mount point (mount {mount_id}), not entered")
                return False
            if not self.clear(fd, path, depth + 1):
                return False
        finally:
            os.close(fd)
        try:
            os.rmdir(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return True
        except OSError as e:
            self.keep(path, f"cannot remove directory: {e.strerror}")
            return False
        self.removed += 1
        return True


def _expected_paths(kubelet_root: Path, uid: str) -> tuple[str, str]:
    """The pod path as the reader writes it (resolved root) and as configured (normalized root)."""
    real = os.path.join(os.path.realpath(os.fsdecode(kubelet_root)), "pods", uid)
    literal = os.path.join(os.path.normpath(os.path.abspath(os.fsdecode(kubelet_root))), "pods", uid)
    return real, literal


def remove_pod_dir(
    pod_dir: PodDir,
    *,
    kubelet_root: Path,
    proc_root: Path = Path("/proc"),
    timeout: float = 60.0,
    max_entries: int = MAX_ENTRIES,
    max_depth: int = MAX_DEPTH,
) -> Outcome:
    """Remove `<kubelet_root>/pods/<uid>` once no mount remains below it, if it is still the verified inode.

    Bounded by `max_entries`, `max_depth` and `timeout`; a partial removal is safe to resume next round.
    """
    uid = pod_dir.uid
    if not PLAUSIBLE_UID.fullmatch(uid):
        return Outcome.failed(f"refused: {uid!r} is not a plausible pod UID")
    real, literal = _expected_paths(kubelet_root, uid)
    if pod_dir.path not in (real, literal):
        return Outcome.failed(
            f"refused: {pod_dir.path!r} is not {real!r} (must be <kubelet root>/pods/<uid>)"
        )
    pods = os.path.dirname(real)
    try:
        pods_fd = os.open(pods, _DIR_FLAGS)
    except FileNotFoundError:
        return Outcome.gone(f"{pods} does not exist")
    except OSError as e:
        return Outcome.failed(f"cannot open {pods}: {e.strerror}")
    try:
        return _remove_below(
            pods_fd,
            pod_dir,
            path=real,
            proc_root=proc_root,
            deadline=time.monotonic() + timeout,
            max_entries=max_entries,
            max_depth=max_depth,
        )
    finally:
        os.close(pods_fd)


def remove_dir_in(
    parent: Path,
    name: str,
    *,
    inode: int,
    proc_root: Path = Path("/proc"),
    timeout: float = 60.0,
    max_entries: int = MAX_ENTRIES,
    max_depth: int = MAX_DEPTH,
) -> Outcome:
    """The same walk for another directory directly inside `parent` (a pod log directory): never a
    symlink followed, never a mount crossed, only while it is still the verified inode."""
    if not name or "/" in name or name in (".", ".."):
        return Outcome.failed(f"refused: {name!r} is not a plain directory name")
    real = os.path.realpath(os.fsdecode(parent))
    try:
        parent_fd = os.open(real, _DIR_FLAGS)
    except FileNotFoundError:
        return Outcome.gone(f"{real} does not exist")
    except OSError as e:
        return Outcome.failed(f"cannot open {real}: {e.strerror}")
    stand_in = PodDir(uid=name, path=os.path.join(real, name), inode=inode, mtime=0.0)
    try:
        return _remove_below(parent_fd, stand_in, path=stand_in.path, proc_root=proc_root,
                             deadline=time.monotonic() + timeout, max_entries=max_entries, max_depth=max_depth)
    finally:
        os.close(parent_fd)


def remove_dir_at(parent_fd: int, name: str, *, inode: int, path: str, proc_root: Path = Path("/proc"),
                  timeout: float = 60.0) -> Outcome:
    """The same walk for `name` inside an already opened (and checked) parent directory."""
    if not name or "/" in name or name in (".", ".."):
        return Outcome.failed(f"refused: {name!r} is not a plain directory name")
    stand_in = PodDir(uid=name, path=path, inode=inode, mtime=0.0)
    return _remove_below(parent_fd, stand_in, path=path, proc_root=proc_root, deadline=time.monotonic() + timeout,
                         max_entries=MAX_ENTRIES, max_depth=MAX_DEPTH)


def open_dir_below(parent_fd: int, name: str | bytes, *, path: str) -> int | Outcome:
    """Open the directory `name` inside `parent_fd` with O_NOFOLLOW: its descriptor, or why not (a symlink or a
    non-directory is never followed: changed; a missing one: gone). `path` only names it in the outcome. Each
    step of a descent calls this once per component, so no symlink on the way is followed either."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        return Outcome.gone(f"{path} does not exist")
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            return Outcome.changed(f"{path} is a symlink or not a directory; not followed")
        return Outcome.failed(f"cannot open {path}: {e.strerror}")


def _remove_below(pods_fd: int, pod_dir: PodDir, *, path: str, proc_root: Path, deadline: float,
                  max_entries: int, max_depth: int) -> Outcome:
    name = os.fsencode(pod_dir.uid)
    fd = open_dir_below(pods_fd, name, path=path)
    if isinstance(fd, Outcome):
        return fd
    try:
        st = os.fstat(fd)
        if st.st_ino != pod_dir.inode:
            return Outcome.changed(f"{path} is inode {st.st_ino}, not the verified {pod_dir.inode}")
        mounts, problems = read_mounts(proc_root)
        if problems or not mounts:
            why = problems[0].reason if problems else "empty mount table"
            return Outcome.failed(f"cannot prove that nothing is mounted below {path}: {why}")
        held = mounts_below(mounts, path)
        if held:
            points = sorted({m.mount_point for m in held})
            return Outcome.failed(f"{len(held)} mount(s) remain below {path}, not removed: {points[:3]}")
        mount_id = fd_mount_id(fd, proc_root=proc_root)
        if mount_id is None:
            return Outcome.failed(f"cannot read the mount id of {path} from {proc_root}/self/fdinfo")
        walk = _Walk(dev=st.st_dev, mount_id=mount_id, proc_root=proc_root, deadline=deadline,
                     max_entries=max_entries, max_depth=max_depth)
        try:
            empty = walk.clear(fd, os.fsencode(path), depth=0)
        except _BudgetExceeded as e:
            return Outcome.failed(
                f"{path}: {e}; removed {walk.removed} entries, the rest waits for the next round"
            )
        except OSError as e:
            return Outcome.failed(
                f"{path}: cannot list a directory: {e.strerror}; removed {walk.removed} entries"
            )
    finally:
        os.close(fd)
    if not empty:
        shown = "; ".join(walk.kept[:_REPORTED])
        more = f" (+{len(walk.kept) - _REPORTED} more)" if len(walk.kept) > _REPORTED else ""
        return Outcome.failed(f"{path} kept: {len(walk.kept)} entries left in place: {shown}{more}")
    return _rmdir_verified(pods_fd, name, pod_dir, path=path, removed=walk.removed)


def _rmdir_verified(pods_fd: int, name: bytes, pod_dir: PodDir, *, path: str, removed: int) -> Outcome:
    try:
        st = os.lstat(name, dir_fd=pods_fd)
    except FileNotFoundError:
        return Outcome.done(f"removed {path} ({removed} entries; the directory itself went away)")
    except OSError as e:
        return Outcome.failed(f"cannot stat {path}: {e.strerror}")
    if not stat.S_ISDIR(st.st_mode) or st.st_ino != pod_dir.inode:
        return Outcome.changed(f"{path} was replaced while it was emptied; the new one is left alone")
    try:
        os.rmdir(name, dir_fd=pods_fd)
    except FileNotFoundError:
        pass
    except OSError as e:
        return Outcome.failed(f"emptied {path} ({removed} entries) but cannot remove it: {e.strerror}")
    return Outcome.done(f"removed {path} ({removed} entries)")
