"""Removing a network namespace file: detach the nsfs bind mount that pins the namespace, then unlink.

A mounted file is the namespace itself, identified by the namespace inode; an unmounted leftover is a
plain empty file, identified by its own inode. Symlinks are never followed, in the path or the unmount.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nodegc.hostio.libc import MNT_DETACH, umount2
from nodegc.inventory.netns import not_followed, runtime_netns_dir
from nodegc.model.resources import NetnsEntry
from nodegc.reclaim.outcomes import Outcome


def _detach_verified(path: str, ns_inode: int) -> str | None:
    """Detach the namespace mounted at `path` only if it is the one verified: the check and the detach go
    through one descriptor, so a namespace mounted there in between is never the one detached. MNT_DETACH
    never blocks: processes still inside keep the namespace alive on their own. A str is why it did not."""
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        found = os.fstat(fd).st_ino
        if found != ns_inode:
            return f"another namespace is mounted there (inode {found}, expected {ns_inode})"
        umount2(f"/proc/self/fd/{fd}", MNT_DETACH, name=path)
    finally:
        os.close(fd)
    return None


def _is_mount_point(path: str, st: os.stat_result) -> bool:
    """A bind-mounted nsfs file sits on another device than its directory."""
    return st.st_dev != os.stat(os.path.dirname(path) or ".").st_dev


def remove_netns(ns: NetnsEntry, *, netns_dir: Path | None = None, runtime_state_dir: Path | None = None) -> Outcome:
    """`netns_dir`: the file must be directly in it (None: anywhere, for tests). A file of the runtime's
    state dir (`ns.runtime_dir`) must instead be directly in `<runtime_state_dir>/io.containerd.grpc.v1.cri/
    netns`, reached without a symlink below the state dir; without a configured state dir it is refused."""
    path = os.path.normpath(ns.path)
    if ns.runtime_dir:
        if runtime_state_dir is None:
            return Outcome.failed(f"{path} is under the runtime's state dir, and no state dir is configured")
        directory = runtime_netns_dir(runtime_state_dir)
        if not _directly_in(path, directory):
            return Outcome.failed(f"{path} is not a file of the runtime's netns directory {directory}")
        refusal = not_followed(runtime_state_dir)
        if refusal == "absent":
            return Outcome.gone(f"{directory} is gone, and the netns file with it")
        if refusal is not None:
            return Outcome.failed(f"refused: {refusal}")
    elif netns_dir is not None and not _directly_in(path, netns_dir):
        return Outcome.failed(f"{path} is not a file of the netns directory {netns_dir}")
    try:
        st = os.lstat(path)
        mounted = _is_mount_point(path, st)
    except FileNotFoundError:
        return Outcome.gone("netns file already removed")
    except OSError as e:
        return Outcome.failed(f"cannot stat {path}: {e.strerror or e}")
    if stat.S_ISLNK(st.st_mode):
        return Outcome.failed("netns path is a symlink; not followed")
    if mounted:
        if not ns.mounted or ns.ns_inode is None:
            return Outcome.changed("a namespace is mounted on a file scanned as an unmounted leftover")
        if st.st_ino != ns.ns_inode:
            return Outcome.changed(
                f"another namespace is mounted there (inode {st.st_ino}, expected {ns.ns_inode})"
            )
        try:
            refusal = _detach_verified(path, ns.ns_inode)
            if refusal:
                return Outcome.changed(refusal)
            st = os.lstat(path)
            if _is_mount_point(path, st):
                return Outcome.failed("still mounted after detaching one mount (stacked mounts); file kept")
        except FileNotFoundError:
            return Outcome.done("namespace unmounted; file already removed")
        except OSError as e:
            return Outcome.failed(f"cannot unmount {path}: {e.strerror or e}")
        return _unlink_leftover(path, st, ns, unmounted_now=True)
    return _unlink_leftover(path, st, ns, unmounted_now=False)


def _directly_in(path: str, directory: Path) -> bool:
    parent = os.path.dirname(path)
    wanted = os.path.normpath(os.fsdecode(directory))
    return parent == wanted or os.path.realpath(parent) == os.path.realpath(wanted)


def _unlink_leftover(path: str, st: os.stat_result, ns: NetnsEntry, *, unmounted_now: bool) -> Outcome:
    if not stat.S_ISREG(st.st_mode):
        return Outcome.changed(f"not a regular file (mode {st.st_mode:o}); kept")
    if ns.file_inode is None or st.st_ino != ns.file_inode:
        return Outcome.changed(f"file replaced (inode {st.st_ino}, expected {ns.file_inode}); kept")
    if st.st_size != 0:
        return Outcome.changed(f"file holds {st.st_size} bytes, a netns file holds none; kept")
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        return Outcome.failed(f"cannot remove {path}: {e.strerror or e}")
    return Outcome.done("namespace unmounted and file removed" if unmounted_now else "leftover file removed")
