"""The few libc calls Python has no wrapper for: setns, mount, umount2. One loader, errno kept.

Each wrapper raises OSError with the errno and a message naming what was attempted; callers decide
which errnos mean "already done".
"""

from __future__ import annotations

import ctypes
import functools
import os

CLONE_NEWNET = 0x40000000
MNT_DETACH = 2
UMOUNT_NOFOLLOW = 8
MS_REC = 1 << 14
MS_PRIVATE = 1 << 18


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library already linked into the interpreter, with errno captured after each call."""
    lib = ctypes.CDLL(None, use_errno=True)
    lib.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.setns.restype = ctypes.c_int
    lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    lib.mount.restype = ctypes.c_int
    lib.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.umount2.restype = ctypes.c_int
    return lib


def _error(filename: str | bytes | os.PathLike[str]) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, os.strerror(err), os.fsdecode(filename))


def setns(fd: int, nstype: int, *, what: str = "setns") -> None:
    """Move the calling thread into the namespace `fd` names; the error message starts with `what`."""
    if libc().setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str | bytes | os.PathLike[str], fstype: str | None, flags: int,
          data: str | None) -> None:
    rc = libc().mount(
        source.encode() if source is not None else None,
        os.fsencode(target),
        fstype.encode() if fstype is not None else None,
        flags,
        data.encode() if data is not None else None,
    )
    if rc != 0:
        raise _error(target)


def umount2(target: str | bytes | os.PathLike[str], flags: int = 0, *,
            name: str | bytes | os.PathLike[str] | None = None) -> None:
    """`name` is the path the error reports when `target` is a /proc/self/fd/N alias."""
    if libc().umount2(os.fsencode(target), flags) != 0:
        raise _error(name if name is not None else target)
