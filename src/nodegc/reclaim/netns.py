"""Removing a network namespace file: detach the nsfs bind mount that pins the namespace, then unlink.

A mounted file is the namespace itself, identified by the namespace inode; an unmounted leftover is a
plain empty file, identified by its own inode. Symlinks are never followed, in the path or the unmount.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import stat

from nodegc.model.resources import NetnsEntry
from nodegc.reclaim.outcomes import Outcome

_MNT_DETACH = 2
_UMOUNT_NOFOLLOW = 8
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.umount2.restype = ctypes.c_int


def _umount_detach(path: str) -> None:
    """MNT_DETACH never blocks on a busy namespace: processes still inside keep it alive on their own."""
    if _libc.umount2(os.fsencode(path), _MNT_DETACH | _UMOUNT_NOFOLLOW) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)


def _is_mount_point(path: str, st: os.stat_result) -> bool:
    """A bind-mounted nsfs file sits on another device than its directory."""
    return st.st_dev != os.stat(os.path.dirname(path) or ".").st_dev


def remove_netns(ns: NetnsEntry) -> Outcome:
    path = os.path.normpath(ns.path)
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
            _umount_detach(path)
            st = os.lstat(path)
            if _is_mount_point(path, st):
                return Outcome.failed("still mounted after detaching one mount (stacked mounts); file kept")
        except FileNotFoundError:
            return Outcome.done("namespace unmounted; file already removed")
        except OSError as e:
            return Outcome.failed(f"cannot unmount {path}: {e.strerror or e}")
        return _unlink_leftover(path, st, ns, unmounted_now=True)
    return _unlink_leftover(path, st, ns, unmounted_now=False)


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
