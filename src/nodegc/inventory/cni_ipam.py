"""host-local IPAM reservations: `<cni data>/networks/<net>/<ip>`, one file per allocated address.

The file content names the container that holds the address; that id, not the pod's status, is the
evidence that ties an address to a sandbox. Files are opened with O_NOFOLLOW and read with a bound, so a
planted symlink or a huge file can neither lead the reader outside the data dir nor exhaust memory.
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from nodegc.inventory.reasons import os_reason, symlink_reason
from nodegc.model.resources import IPReservation, Kind, ReadProblem

MAX_RESERVATION_BYTES = 4096
_NOT_RESERVATIONS = ("lock",)
_LAST_RESERVED_PREFIX = "last_reserved_ip."


class FileReadError(Exception):
    """A file that cannot be taken as read: symlink, not regular, too big, or an OS error."""


@dataclass(frozen=True)
class SmallFile:
    content: bytes
    inode: int
    mtime: float


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
        return SmallFile(content=content, inode=st.st_ino, mtime=st.st_mtime)
    except OSError as e:
        raise FileReadError(os_reason(e)) from e
    finally:
        os.close(fd)


def parse_reservation(content: bytes) -> tuple[str | None, str | None, bool]:
    """(container id, ifname, legacy) from `<cid>\\r\\n<ifname>` (current) or `<cid>` (before CNI 0.7)."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"content is not valid UTF-8 (byte {e.start})") from e
    lines = [line.strip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise ValueError("empty reservation file")
    if len(lines) > 2:
        raise ValueError(f"unexpected {len(lines)} lines, expected container id and interface name")
    container_id = lines[0]
    if not container_id:
        raise ValueError("empty container id")
    for value in lines:
        # isprintable() is false for every space but " ": together, no blank or control character at all.
        if not value.isprintable() or " " in value:
            raise ValueError(f"unexpected characters in {value!r}")
    if len(lines) == 2:
        return container_id, lines[1], False
    return container_id, None, True


@functools.lru_cache(maxsize=65536)
def normalized_ip(text: str) -> str:
    """str(ip_address(text)), remembered: a node's few thousand addresses come back every scan."""
    return str(ipaddress.ip_address(text))


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


def _skipped(name: str) -> bool:
    return name in _NOT_RESERVATIONS or name.startswith(_LAST_RESERVED_PREFIX)


def _scan_network(net: os.DirEntry[str], problems: list[ReadProblem]) -> list[IPReservation]:
    found: list[IPReservation] = []
    try:
        with os.scandir(net.path) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as e:
        problems.append(ReadProblem(Kind.IP_RESERVATION, net.path, os_reason(e)))
        return found
    for entry in entries:
        if _skipped(entry.name):
            continue
        try:
            ip = normalized_ip(entry.name)
        except ValueError:
            problems.append(ReadProblem(Kind.IP_RESERVATION, entry.path, "file name is not an IP address"))
            continue
        if (why := irregular(entry)) is not None:
            problems.append(ReadProblem(Kind.IP_RESERVATION, entry.path, why))
            continue
        try:
            small = read_small_file(entry.path, limit=MAX_RESERVATION_BYTES)
            container_id, ifname, legacy = parse_reservation(small.content)
        except (FileReadError, ValueError) as e:
            problems.append(ReadProblem(Kind.IP_RESERVATION, entry.path, str(e)))
            continue
        found.append(
            IPReservation(
                network=net.name,
                ip=ip,
                path=entry.path,
                inode=small.inode,
                mtime=small.mtime,
                container_id=container_id,
                ifname=ifname,
                legacy_format=legacy,
            )
        )
    return found


def scan_ip_reservations(
    cni_data_dir: Path,
) -> tuple[tuple[IPReservation, ...], tuple[ReadProblem, ...]]:
    networks_path = os.path.join(os.fsdecode(cni_data_dir), "networks")
    nets, problem = list_top_dir(networks_path, kind=Kind.IP_RESERVATION)
    problems: list[ReadProblem] = [problem] if problem else []
    found: list[IPReservation] = []
    for net in nets:
        try:
            if net.is_symlink():
                problems.append(ReadProblem(Kind.IP_RESERVATION, net.path, symlink_reason(net.path)))
                continue
            if not net.is_dir(follow_symlinks=False):
                problems.append(ReadProblem(Kind.IP_RESERVATION, net.path, "not a network directory"))
                continue
        except OSError as e:
            problems.append(ReadProblem(Kind.IP_RESERVATION, net.path, os_reason(e)))
            continue
        try:
            net.name.encode("utf-8")
        except UnicodeEncodeError:
            problems.append(ReadProblem(Kind.IP_RESERVATION, net.path, "network name is not valid UTF-8"))
            continue
        found.extend(_scan_network(net, problems))
    return tuple(found), tuple(problems)
