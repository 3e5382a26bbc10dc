"""A FUSE file system served just enough to open its one file, never to read it: a page of that file mapped
into a process stalls whoever reads that page (a fault waits for the READ answer that never comes). Spoken
over /dev/fuse by hand (protocol 7.22), in a thread of the test process."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import struct
import threading
from pathlib import Path

_IN = struct.Struct("=IIQQIIIHH")
_OUT = struct.Struct("=IiQ")
_ATTR = struct.Struct("=QQQQQQIIIIIIIIII")
FILE = "stall"
SIZE = 1 << 16

_LOOKUP, _FORGET, _GETATTR, _OPEN, _READ, _RELEASE, _FLUSH, _INIT = 1, 2, 3, 14, 15, 18, 25, 26


def _attr(ino: int) -> bytes:
    mode, size, nlink = (0o40755, 0, 2) if ino == 1 else (0o100644, SIZE, 1)
    return _ATTR.pack(ino, size, (size + 511) // 512, 0, 0, 0, 0, 0, 0, mode, nlink, 0, 0, 0, 4096, 0)


class StallingFuse:
    """Mounted at `point` (in the caller's mount namespace) until `close()`; `reads` counts the READs left
    unanswered."""

    def __init__(self, point: Path) -> None:
        self.point = point
        self.fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        self.libc = ctypes.CDLL(None, use_errno=True)
        opts = f"fd={self.fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
        if self.libc.mount(b"nodegc-stall", os.fsencode(point), b"fuse", 0, opts) != 0:
            err = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(err, f"mount fuse: {os.strerror(err)}")
        self.reads = 0
        self.seen: list[int] = []
        self.opens = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="stalling-fuse", daemon=True)
        self._thread.start()

    def _reply(self, unique: int, error: int = 0, body: bytes = b"") -> None:
        with contextlib.suppress(OSError):
            os.write(self.fd, _OUT.pack(_OUT.size + len(body), -error, unique) + body)

    def _serve(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if not ready:
                continue
            try:
                raw = os.read(self.fd, 1 << 20)
            except OSError:
                return
            _len, opcode, unique, node, *_ = _IN.unpack_from(raw)
            self.seen.append(opcode)
            payload = raw[_IN.size:]
            if opcode == _INIT:
                self._reply(unique, body=struct.pack("=IIIIHHI", 7, 22, 0, 0, 16, 12, 1 << 16))
            elif opcode == _LOOKUP:
                if payload.rstrip(b"\0") == FILE.encode():
                    self._reply(unique, body=struct.pack("=QQQQII", 2, 0, 60, 60, 0, 0) + _attr(2))
                else:
                    self._reply(unique, errno.ENOENT)
            elif opcode == _GETATTR:
                self._reply(unique, body=struct.pack("=QII", 60, 0, 0) + _attr(node))
            elif opcode == _OPEN:
                self.opens += 1  # the first through the page cache, the others FOPEN_DIRECT_IO
                self._reply(unique, body=struct.pack("=QII", self.opens, 0 if self.opens == 1 else 1, 0))
            elif opcode == _READ:
                self.reads += 1  # never answered
            elif opcode in (_RELEASE, _FLUSH):
                self._reply(unique)
            elif opcode != _FORGET:
                self._reply(unique, errno.ENOSYS)

    def close(self) -> None:
        """The connection ends (every request still waiting fails), then the mount goes."""
        self._stop.set()
        self._thread.join(5)
        os.close(self.fd)
        self.libc.umount2(os.fsencode(self.point), 2)  # MNT_DETACH


STAND_IN = r"""
import mmap, os, sys, threading, time
path = sys.argv[1]
cached = os.open(path, os.O_RDONLY)  # through the page cache: its READ is never answered, its page stays locked
direct = os.open(path, os.O_RDONLY)  # FOPEN_DIRECT_IO: mapping it first drops the file's cached pages
threading.Thread(target=os.pread, args=(cached, 4096, 0), daemon=True).start()
time.sleep(0.5)
print("up", flush=True)
# mmap holds the process's mmap lock for writing while fuse waits for that locked page, for ever: every
# reader of this process's memory (/proc/<pid>/cmdline, environ) waits behind it.
mmap.mmap(direct, 4096, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
"""
"""A process whose memory map is locked for ever: reading its /proc/<pid>/cmdline waits (the kernel reads no
file-backed page for it since 4.18, but it takes the process's mmap lock first)."""
