"""Mounts as the kernel reports them in /proc/<pid>/mountinfo.

The mount table is the only trustworthy answer to "is this volume still mounted": a directory that looks
empty may still be a mount point, and deleting through it would reach into the mounted filesystem.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import re
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nodegc.model.resources import Kind, Mount, ReadProblem

_OCTAL_ESCAPE = re.compile(rb"\\([0-7]{3})")
_DEVICE = re.compile(r"^\d+:\d+$")
_SEPARATOR = "-"
_FIELDS_BEFORE_OPTIONAL = 6


def decode_mountinfo_field(s: str) -> str:
    """Undo the kernel's `\\ooo` escaping (space, tab, newline and backslash in paths).

    Works on the raw bytes so that escapes of non-UTF-8 bytes and surrogate-escaped names survive the round
    trip; the result is a str in the os.fsdecode convention, like every other path in nodegc.
    """
    if "\\" not in s:
        return s
    raw = os.fsencode(s)

    def _byte(m: re.Match[bytes]) -> bytes:
        value = int(m.group(1), 8)
        return bytes([value]) if value <= 0xFF else m.group(0)

    return os.fsdecode(_OCTAL_ESCAPE.sub(_byte, raw))


def _parse_line(line: str, shared: dict[str, str] | None = None, parents: dict[int, int] | None = None) -> Mount:
    # Split on single spaces only: an empty source is printed as an empty field and must keep its place.
    fields = line.split(" ")
    if len(fields) < _FIELDS_BEFORE_OPTIONAL + 3:
        raise ValueError(f"too few fields ({len(fields)})")
    try:
        sep = fields.index(_SEPARATOR, _FIELDS_BEFORE_OPTIONAL)
    except ValueError:
        raise ValueError("missing ' - ' separator") from None
    tail = fields[sep + 1 :]
    if len(tail) < 2:
        raise ValueError("missing filesystem type or source after separator")
    try:
        mount_id = int(fields[0])
        parent_id = int(fields[1])
    except ValueError:
        raise ValueError(f"bad mount id or parent id {fields[0]!r} {fields[1]!r}") from None
    device = fields[2]
    if not _DEVICE.match(device):
        raise ValueError(f"bad device {device!r}")
    mount_point = sys.intern(decode_mountinfo_field(fields[4]))  # a volume's directory is the same path
    if not mount_point:
        raise ValueError("empty mount point")
    root, options = decode_mountinfo_field(fields[3]), fields[5]
    fs_type, source = decode_mountinfo_field(tail[0]), decode_mountinfo_field(tail[1])
    if shared is not None:
        # A node's thousands of mounts spell a few types, sources and option sets: one string each.
        device, root = shared.setdefault(device, device), shared.setdefault(root, root)
        options, fs_type = shared.setdefault(options, options), shared.setdefault(fs_type, fs_type)
        source = shared.setdefault(source, source)
    if parents is not None:
        # A pod's volumes and the node's namespaces are mounted under a few parents: one int object each.
        parent_id = parents.setdefault(parent_id, parent_id)
    return Mount(
        mount_id=mount_id,
        parent_id=parent_id,
        device=device,
        root=root,
        mount_point=mount_point,
        options=options,
        fs_type=fs_type,
        source=source,
    )


def parse_mountinfo(text: str) -> tuple[tuple[Mount, ...], tuple[str, ...]]:
    """One bad line must not hide the rest of the table, so it is skipped and its reason returned."""
    mounts: list[Mount] = []
    reasons: list[str] = []
    shared: dict[str, str] = {}
    parents: dict[int, int] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            mounts.append(_parse_line(line, shared, parents))
        except ValueError as e:
            reasons.append(f"line {number}: {e}")
    return tuple(mounts), tuple(reasons)


_Parsed = tuple[tuple[Mount, ...], tuple[str, ...]]
_last_parse: dict[str, tuple[bytes, _Parsed]] = {}
_last_lock = threading.Lock()


def read_mounts(
    proc_root: Path = Path("/proc"), pid: str = "self", *, reuse: bool = False
) -> tuple[tuple[Mount, ...], tuple[ReadProblem, ...]]:
    """The mount table, read now. With `reuse` (the scan, cycle after cycle) the parse of the previous read
    is taken again when this read's bytes have the same digest: the table is always read, only its parse
    (about 15 ms at 1,000 pods) is skipped, so the result is exactly what parsing these bytes gives.
    Executors never reuse: they call this without `reuse`."""
    path = proc_root / pid / "mountinfo"
    try:
        raw = path.read_bytes()
    except OSError as e:
        return (), (ReadProblem(Kind.VOLUME_MOUNT, str(path), f"cannot read: {e.strerror or e}"),)
    key = str(path)
    digest = hashlib.blake2b(raw, digest_size=32).digest() if reuse else b""
    parsed: _Parsed | None = None
    if reuse:
        with _last_lock:
            last = _last_parse.get(key)
        if last is not None and last[0] == digest:
            parsed = last[1]
    if parsed is None:
        parsed = parse_mountinfo(raw.decode("utf-8", "surrogateescape"))
        if reuse:
            with _last_lock:
                _last_parse.clear()  # one table is remembered: the scan reads one proc root
                _last_parse[key] = (digest, parsed)
    mounts, reasons = parsed
    return mounts, tuple(ReadProblem(Kind.VOLUME_MOUNT, str(path), r) for r in reasons)


def forget_parses() -> None:
    """Drop the remembered parse (tests)."""
    with _last_lock:
        _last_parse.clear()


def top_of(stack: Sequence[Mount]) -> Mount:
    """Of mounts stacked on one point, the visible one is no other's parent (propagation can tuck a later
    mount underneath, so mountinfo order alone can be wrong); mountinfo order breaks ties."""
    if len(stack) == 1:
        return stack[0]
    parents = {m.parent_id for m in stack}
    uncovered = [m for m in stack if m.mount_id not in parents]
    return uncovered[-1] if uncovered else stack[-1]


@dataclass(frozen=True)
class MountIndex:
    """Mounts sorted by mount point, so "what is mounted at or below X" is two bisections.

    The sort is stable: mounts stacked on one mount point keep mountinfo order; `top_at` picks the visible one.
    """

    mounts: tuple[Mount, ...]
    keys: tuple[str, ...]

    @classmethod
    def build(cls, mounts: Sequence[Mount]) -> MountIndex:
        ordered = tuple(sorted(mounts, key=lambda m: m.mount_point))
        return cls(mounts=ordered, keys=tuple(m.mount_point for m in ordered))

    def at(self, path: str) -> list[Mount]:
        key = _normalize(path) or "/"
        lo = bisect.bisect_left(self.keys, key)
        hi = bisect.bisect_right(self.keys, key, lo)
        return list(self.mounts[lo:hi])

    def top_at(self, path: str) -> Mount | None:
        found = self.at(path)
        return top_of(found) if found else None

    def below(self, path: str) -> list[Mount]:
        prefix = _normalize(path)
        found = self.at(prefix or "/") if prefix else []
        # Every string that starts with prefix + "/" sorts in [prefix + "/", prefix + "0"): "0" follows "/".
        lo = bisect.bisect_left(self.keys, prefix + "/")
        hi = bisect.bisect_left(self.keys, prefix + "0", lo)
        found.extend(self.mounts[lo:hi])
        return found


def _normalize(path: str) -> str:
    """Without the trailing slash; the root becomes the empty prefix."""
    return path.rstrip("/")


def mounts_below(mounts: Sequence[Mount] | MountIndex, path: str) -> list[Mount]:
    """Mounts whose mount point is `path` or lies under `path/`; pass a MountIndex when asking often."""
    index = mounts if isinstance(mounts, MountIndex) else MountIndex.build(mounts)
    return index.below(path)


def fd_mount_id(fd: int, *, proc_root: Path = Path("/proc")) -> int | None:
    """The mount id of an open descriptor (fdinfo `mnt_id`), comparable with mountinfo ids."""
    try:
        with open(proc_root / "self" / "fdinfo" / str(fd), "rb") as f:
            for line in f:
                if line.startswith(b"mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
