"""Bounded, symlink-proof reads of small files and top directories, and how a failed read is worded.

Files are opened with O_NOFOLLOW and read with a bound, so a planted symlink or a huge file can neither
lead a reader outside its root nor exhaust memory; the wording functions give a ReadProblem its reason.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from nodegc.model.resources import Kind, ReadProblem


def os_reason(e: OSError) -> str:
    return f"{e.strerror or type(e).__name__} (errno {e.errno})" if e.errno else str(e)


def symlink_reason(path: str) -> str:
    try:
        target = os.readlink(path)
    except OSError as e:
        return f"symlink (target unreadable: {os_reason(e)}), not followed"
    return f"symlink to {target}, not followed"


class FileReadError(Exception):
    """A file that cannot be taken as read: symlink, not regular, too big, or an OS error."""


@dataclass(frozen=True)
class SmallFile:
    content: bytes
    inode: int
    mtime: float
    stamp: tuple[int, int, int, int] = (0, 0, 0, 0)
    """(inode, size, mtime_ns, ctime_ns) of the file as opened, for `FileMemo`."""


def irregular(entry: os.DirEntry[str]) -> str | None:
    """Why an entry is not a plain file, from the directory listing alone: a symlink is never followed and
    a device node named like a reservation is never opened. None for a regular file."""
    try:
        if entry.is_symlink():
            return symlink_reason(entry.path)
        return None if entry.is_file(follow_symlinks=False) else "not a regular file"
    except OSError as e:
        return os_reason(e)


def read_small_file(path: str, *, limit: int) -> SmallFile:
    """Read a regular file of at most `limit` bytes without following a symlink in its last component.

    O_NONBLOCK keeps a FIFO planted in the directory from blocking the scan; fstat on the open descriptor
    makes the type and size checks refer to the very file that is read.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise FileReadError(symlink_reason(path)) from e
        raise FileReadError(os_reason(e)) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileReadError("not a regular file")
        if st.st_size > limit:
            raise FileReadError(f"file is {st.st_size} bytes, larger than the {limit} byte limit; not read")
        chunks: list[bytes] = []
        remaining = limit + 1
        while remaining > 0:
            chunk = os.read(fd, remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        content = b"".join(chunks)
        if len(content) > limit:
            raise FileReadError(f"file grew beyond the {limit} byte limit while read; not read")
        return SmallFile(content=content, inode=st.st_ino, mtime=st.st_mtime, stamp=stamp_of(st))
    except OSError as e:
        raise FileReadError(os_reason(e)) from e
    finally:
        os.close(fd)


def list_top_dir(path: str, *, kind: Kind) -> tuple[list[os.DirEntry[str]], ReadProblem | None]:
    """Entries of a directory directly under a configured root; missing is empty, a symlink is refused."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            return [], ReadProblem(kind, path, symlink_reason(path))
        if not stat.S_ISDIR(mode):
            return [], ReadProblem(kind, path, "not a directory")
        with os.scandir(path) as it:
            return sorted(it, key=lambda e: e.name), None
    except FileNotFoundError:
        return [], None
    except OSError as e:
        return [], ReadProblem(kind, path, os_reason(e))


def stamp_of(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


T = TypeVar("T")

SETTLED_NS = 2_000_000_000
"""How long a file must have been left alone before its parse is remembered. The kernel stamps ctime from a
coarse clock (a tick, a few milliseconds): a change within the same tick as the read would keep the stamp,
so only a file whose last change is well before the read can be told apart from any later change."""


class FileMemo(Generic[T]):
    """What was parsed out of each file, remembered by its stamp (inode, size, mtime, ctime): a later scan
    that finds the same stamp in its directory listing (an lstat, no open, no read) takes the parse again.

    Every write, rename onto, truncate or chmod of the file changes its ctime, which userspace cannot set
    back; a file is remembered only once its ctime is SETTLED_NS older than the read, so a change that
    races the read still shows in a later stamp. Paths not seen in a scan are forgotten at its end.

    Kept small (a node has thousands of such files): the stamp packed into 32 bytes (`packed_stamp`), and
    each path held once, as the key it was first put under (a scan's listing spells it anew).
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[str, bytes | tuple[int, int, int, int], T]] = {}
        self._seen: dict[str, tuple[str, bytes | tuple[int, int, int, int], T]] = {}
        self._lock = threading.Lock()

    def get(self, path: str, st: os.stat_result) -> T | None:
        with self._lock:
            found = self._known.get(path)
        if found is None or found[1] != packed_stamp(stamp_of(st)):
            return None
        with self._lock:
            self._seen[found[0]] = found
        return found[2]

    def put(self, path: str, small: SmallFile, value: T) -> None:
        if small.stamp[3] < time.time_ns() - SETTLED_NS:
            with self._lock:
                self._seen[path] = (path, packed_stamp(small.stamp), value)

    def end_scan(self) -> None:
        with self._lock:
            self._known, self._seen = self._seen, {}

    def clear(self) -> None:
        with self._lock:
            self._known, self._seen = {}, {}


_STAMP = struct.Struct("=QQqq")


def packed_stamp(stamp: tuple[int, int, int, int]) -> bytes | tuple[int, int, int, int]:
    """The stamp as 32 bytes (inode, size, mtime ns, ctime ns: one for one, so equal bytes are equal
    stamps), or the stamp itself when a field does not fit 64 bits (never equal to any bytes)."""
    try:
        return _STAMP.pack(*stamp)
    except struct.error:
        return stamp


@dataclass
class Shared:
    """One object for each distinct string (and pair of strings) a parse meets: what a scan keeps from one
    cycle to the next holds thousands of copies of a few texts otherwise (every cache entry of a network
    carries its whole configuration, every rule of a chain names it). Strings are immutable, so an equal
    object is the same value."""

    strings: dict[str, str] = field(default_factory=dict)
    pairs: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)

    def text(self, value: str) -> str:
        return self.strings.setdefault(value, value)

    def pair(self, value: tuple[str, str]) -> tuple[str, str]:
        return self.pairs.setdefault(value, value)
