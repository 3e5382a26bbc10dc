"""A file system that never answers (an NFS volume whose server is gone, a stuck FUSE daemon), for the attacks
that a lookup must not hang on: a FUSE mount nobody serves. Every lookup in it waits for an answer that never
comes, until the returned device descriptor is closed (then a waiting lookup fails)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path


def mount_unserved_fuse(where: Path) -> int:
    """Mount it at `where` (an empty directory, in the test's own mount namespace); the FUSE device's
    descriptor is returned, for the caller to close when done."""
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    assert libc.mount(b"nodegc-test", os.fsencode(where), b"fuse", 0, opts) == 0, os.strerror(ctypes.get_errno())
    return fd


def unmount_lazily(where: Path) -> None:
    """Detach it (MNT_DETACH): no lookup of the mount point itself, which would wait too."""
    ctypes.CDLL(None, use_errno=True).umount2(os.fsencode(where), 2)
