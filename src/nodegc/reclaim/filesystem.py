"""Filesystem reclaim executors: leftover volume mounts and orphaned pod directories.

Each is idempotent (already gone is success), time-bounded, and compares the resource with the identity the
scan verified (mount id, inode) before touching it; none raises for an expected failure.
"""

from __future__ import annotations

from nodegc.hostio.libc import MNT_DETACH
from nodegc.hostio.mountinfo import fd_mount_id
from nodegc.reclaim.removing import MAX_DEPTH, MAX_ENTRIES, remove_pod_dir
from nodegc.reclaim.unmounting import UNMOUNT_CHILD, UNMOUNT_CHILD_CODE, unmount_volume

__all__ = [
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "MNT_DETACH",
    "UNMOUNT_CHILD",
    "UNMOUNT_CHILD_CODE",
    "fd_mount_id",
    "remove_pod_dir",
    "unmount_volume",
]
