"""The few libc calls Python has no wrapper for: setns, mount, umount2, statx, openat2, mallopt. One loader.

Each wrapper raises OSError with the errno and a message naming what was attempted; callers decide
which errnos mean "already done".
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import struct
from collections.abc import Sequence
from typing import Any

CLONE_NEWNET = 0x40000000
MNT_DETACH = 2
UMOUNT_NOFOLLOW = 8
MS_REC = 1 << 14
MS_PRIVATE = 1 << 18
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000
STATX_INO = 0x100
STATX_MNT_ID_UNIQUE = 0x4000
"""Linux 6.8: stx_mnt_id is the mount's 64-bit id, never given to another mount until reboot."""
_STATX_SIZE = 256
_STATX_MASK = struct.Struct("=I")  # stx_mask, at offset 0
_STATX_INO = struct.Struct("=Q")  # stx_ino, at offset 32
_STATX_MNT_ID = struct.Struct("=Q")  # stx_mnt_id, at offset 0x90
SYS_OPENAT2 = 437
"""The same number on every architecture (Linux 5.6)."""
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10
_OPEN_HOW = struct.Struct("=QQQ")  # struct open_how: flags, mode, resolve


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
    try:
        lib.statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
        lib.statx.restype = ctypes.c_int
    except AttributeError:  # a C library without the wrapper (glibc before 2.28): no unique mount ids
        pass
    try:
        lib.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.mallopt.restype = ctypes.c_int
        lib.malloc_trim.argtypes = [ctypes.c_size_t]
        lib.malloc_trim.restype = ctypes.c_int
    except AttributeError:  # glibc's: another C library's allocator is left as it is
        pass
    return lib


M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
LONG_RUNNING_MALLOC = {"MALLOC_ARENA_MAX": (M_ARENA_MAX, 1), "MALLOC_MMAP_THRESHOLD_": (M_MMAP_THRESHOLD, 128 * 1024),
                       "MALLOC_TRIM_THRESHOLD_": (M_TRIM_THRESHOLD, 128 * 1024)}
"""glibc's allocator settings for a long-running process (the agent and the controller; the one-shot commands
take them too, for the large buffers a scan frees): one arena (its threads allocate
under the interpreter's lock anyway, and each arena of a thread keeps what it once held), and blocks of
128 KiB or more (an iptables dump, a file's bytes) mapped and given back when freed, never kept in the
heap as glibc's adaptive threshold would after the first such free. About 2 MiB of the agent's RSS."""
_TUNABLE = {"MALLOC_ARENA_MAX": "glibc.malloc.arena_max", "MALLOC_MMAP_THRESHOLD_": "glibc.malloc.mmap_threshold",
            "MALLOC_TRIM_THRESHOLD_": "glibc.malloc.trim_threshold"}
"""The GLIBC_TUNABLES name of each setting: an operator may set either form."""


def tune_malloc(settings: dict[str, tuple[int, int]] | None = None) -> list[str]:
    """mallopt() each of `settings` (default `LONG_RUNNING_MALLOC`) that neither its environment variable
    nor GLIBC_TUNABLES already sets (the operator's choice wins); the names of those set; none on a C
    library without mallopt."""
    lib = libc()
    mallopt = getattr(lib, "mallopt", None)
    if mallopt is None:
        return []
    tunables = {part.split("=", 1)[0].strip() for part in os.environ.get("GLIBC_TUNABLES", "").split(":")}
    done = []
    for name, (param, value) in (LONG_RUNNING_MALLOC if settings is None else settings).items():
        if name in os.environ or _TUNABLE.get(name) in tunables:
            continue
        if mallopt(param, value) == 1:
            done.append(name)
    return done


def trim_malloc() -> None:
    """Give the free pages inside glibc's heap back to the kernel (malloc_trim(0)): what a cycle freed between
    blocks still in use stays resident otherwise (about 0.5 MiB of the agent's between cycles)."""
    trim = getattr(libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


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


def unique_mount(path: str | bytes | None = None, *, fd: int | None = None) -> tuple[int, int] | None:
    """(inode, unique mount id) of `path` (a symlink in its last component is not followed) or of the open
    descriptor `fd`; None where the kernel has no unique mount ids (before Linux 6.8) or libc no statx.

    The mount id is the one of the mount the path resolves to now (the topmost one on a mount point), and
    a unique id is never reused while the machine runs: the same id later is the very same mount."""
    statx = _statx()
    if statx is None:
        return None
    buf = ctypes.create_string_buffer(_STATX_SIZE)
    if fd is not None:
        return _stamp(statx(fd, b"", AT_EMPTY_PATH, _STATX_WANTED, buf), buf, f"fd {fd}")
    assert path is not None
    return _stamp(statx(AT_FDCWD, os.fsencode(path), AT_SYMLINK_NOFOLLOW, _STATX_WANTED, buf), buf,
                  os.fsdecode(path))


def unique_mounts(paths: Sequence[str]) -> list[tuple[int, int] | OSError | None]:
    """`unique_mount` of each path, or the error it raised (a scan asks hundreds at once: one buffer)."""
    statx = _statx()
    if statx is None:
        return [None] * len(paths)
    buf = ctypes.create_string_buffer(_STATX_SIZE)
    out: list[tuple[int, int] | OSError | None] = []
    for path in paths:
        try:
            out.append(_stamp(statx(AT_FDCWD, path.encode("utf-8", "surrogateescape"), AT_SYMLINK_NOFOLLOW,
                                    _STATX_WANTED, buf), buf, path))
        except OSError as e:
            out.append(e)
    return out


_STATX_WANTED = STATX_INO | STATX_MNT_ID_UNIQUE


@functools.cache
def _statx() -> Any:
    """libc's statx, called without argument conversion (its arguments are ints, bytes and a buffer: what
    ctypes passes as they are), which is most of the cost of a call; None without the wrapper."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "statx", None)
    if fn is not None:
        fn.restype = ctypes.c_int
    return fn


def _stamp(rc: int, buf: ctypes.Array[ctypes.c_char], filename: str) -> tuple[int, int] | None:
    if rc != 0:
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            return None
        raise OSError(err, os.strerror(err), filename)
    (mask,) = _STATX_MASK.unpack_from(buf, 0)
    if not mask & STATX_MNT_ID_UNIQUE or not mask & STATX_INO:
        return None
    return _STATX_INO.unpack_from(buf, 32)[0], _STATX_MNT_ID.unpack_from(buf, 0x90)[0]


def stat_in_root(root: str | os.PathLike[str], path: str) -> os.stat_result:
    """`path` as the processes whose root `root` is see it (`/proc/<pid>/root`: in their mount namespace).
    An absolute symlink on the way resolves below `root`, never in the caller's own root, which a plain
    stat of `<root>/<path>` would do (RESOLVE_IN_ROOT of openat2). ENOSYS before Linux 5.6."""
    dirfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        how = ctypes.create_string_buffer(
            _OPEN_HOW.pack(os.O_PATH | os.O_CLOEXEC, 0, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), _OPEN_HOW.size)
        fd = libc().syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dirfd), ctypes.c_char_p(os.fsencode(path)),
                            how, ctypes.c_size_t(_OPEN_HOW.size))
        if fd < 0:
            raise _error(path)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)
    finally:
        os.close(dirfd)
