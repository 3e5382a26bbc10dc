"""The unmount child: unmounts one mount point, only if it still is the mount the parent verified.

Run as a program (`python -I -S unmount_child.py <path> <mount id> <umount2 flags> <proc root>`) by
`nodegc.reclaim.unmounting`, in a process of its own so that an umount(2) stuck in the kernel can be
abandoned. It prints one line: `ok`, `changed <mount id>` or `errno <n>`.

It imports nothing but the standard library (it runs isolated, without site-packages), so it loads its
own libc handle instead of `nodegc.hostio.libc`. No `from __future__` import either: tests run this
source with `-c` behind a prefix of their own.
"""

import ctypes
import os
import sys

MNT_DETACH = 2
UMOUNT_NOFOLLOW = 8
_ARGS = 4


def _mount_id_of(fd: int, proc: str) -> list[int]:
    with open(f"{proc}/self/fdinfo/{fd}") as f:
        return [int(line.split()[1]) for line in f if line.startswith("mnt_id:")]


def unmount(path: bytes, want: int, flags: int, proc: str) -> str:
    """Open the mount point without following a symlink, compare the mount id of what was opened, then
    unmount it: a lazy detach through that very descriptor, a plain unmount by path right after closing it
    (the descriptor itself would keep the mount busy)."""
    lib = ctypes.CDLL(None, use_errno=True)
    lib.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.umount2.restype = ctypes.c_int
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        return f"errno {e.errno}"
    try:
        got = _mount_id_of(fd, proc)
        if got != [want]:
            return f"changed {got[0] if got else 'unknown'}"
        if flags & MNT_DETACH:
            rc = lib.umount2(f"{proc}/self/fd/{fd}".encode(), flags)
        else:
            os.close(fd)
            fd = -1
            rc = lib.umount2(path, flags | UMOUNT_NOFOLLOW)
        return "ok" if rc == 0 else f"errno {ctypes.get_errno()}"
    finally:
        if fd >= 0:
            os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) != _ARGS:
        print("usage: unmount_child.py <path> <mount id> <umount2 flags> <proc root>", file=sys.stderr)
        return 2
    print(unmount(os.fsencode(argv[0]), int(argv[1]), int(argv[2]), argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
