"""inotify through libc (Python has no wrapper): watches on directories, and their events drained without
blocking. Used to know that a directory's entries cannot have changed since it was last listed."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import struct
from dataclasses import dataclass

IN_ATTRIB = 0x00000004
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

DIRECTORY_CHANGES = (IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF
                     | IN_MOVE_SELF)
"""Every change to a directory's entries (names, types, inodes) or to the directory itself."""

_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


@dataclass(frozen=True)
class Event:
    wd: int
    mask: int
    name: str


@functools.cache
def _libc() -> ctypes.CDLL:
    lib = ctypes.CDLL(None, use_errno=True)
    lib.inotify_init1.argtypes = [ctypes.c_int]
    lib.inotify_init1.restype = ctypes.c_int
    lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    lib.inotify_add_watch.restype = ctypes.c_int
    return lib


class Inotify:
    """One inotify instance, non-blocking. Not thread-safe: one owner adds watches and drains events."""

    def __init__(self) -> None:
        fd = _libc().inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self.fd = fd

    def add_watch(self, path: str, mask: int = DIRECTORY_CHANGES) -> int:
        """The watch descriptor of `path` (the same one again for a directory already watched). Never
        follows a symlink and only watches a directory."""
        wd = _libc().inotify_add_watch(self.fd, os.fsencode(path), mask | IN_ONLYDIR | IN_DONT_FOLLOW)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_add_watch: {os.strerror(err)}", path)
        return int(wd)

    def read_events(self, *, limit: int = 1 << 20) -> list[Event]:
        """Every event queued now (an empty list when none); at most about `limit` bytes of them, and an
        IN_Q_OVERFLOW event (wd -1) is added when more were waiting, so the caller can never mistake a
        partial drain for a complete one."""
        events: list[Event] = []
        taken = 0
        while True:
            if taken >= limit:
                events.append(Event(-1, IN_Q_OVERFLOW, ""))
                return events
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return events
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                raise
            taken += len(data)
            offset = 0
            while offset + _HEADER.size <= len(data):
                wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
                raw = data[offset + _HEADER.size: offset + _HEADER.size + length]
                offset += _HEADER.size + length
                events.append(Event(wd, mask, os.fsdecode(raw.split(b"\0", 1)[0])))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
