"""The wall clock every default `now` reads, and the boot clock that measures what a clock step must not
shorten; tests inject their own."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class BootTime:
    """CLOCK_BOOTTIME (seconds since boot, counting suspend, never stepped) with the boot it counts in: two
    readings measure elapsed time only when their boot ids are the same."""

    boot_id: str
    seconds: float


def read_boot_time(proc_root: Path = Path("/proc")) -> BootTime | None:
    """None when the boot id cannot be read (no /proc, an odd file): the caller falls back to the wall clock.

    CLOCK_BOOTTIME is per time namespace (an offset given when one is made, `unshare --boottime`, an OCI
    runtime's timeOffsets) while the boot id is the kernel's: the reading is the initial namespace's, so two
    nodegc processes in different time namespaces measure one clock. Offsets that cannot be read: None."""
    try:
        raw = (proc_root / "sys/kernel/random/boot_id").read_bytes()[:100]
        seconds = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, AttributeError, ValueError):
        return None
    boot_id = raw.decode("ascii", "replace").strip()
    if not boot_id or not boot_id.isprintable() or len(boot_id) > 64:
        return None
    offset = _boottime_offset(proc_root)
    if offset is None:
        return None
    return BootTime(boot_id=boot_id, seconds=seconds - offset)


_CLOCK_BOOTTIME_ID = "7"


def _boottime_offset(proc_root: Path) -> float | None:
    """This process's time namespace's CLOCK_BOOTTIME offset: 0 without time namespaces (no file)."""
    try:
        text = (proc_root / "self/timens_offsets").read_bytes()[:4096].decode("ascii")
    except FileNotFoundError:
        return 0.0
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] in ("boottime", _CLOCK_BOOTTIME_ID):
            try:
                return int(fields[1]) + int(fields[2]) / 1e9
            except ValueError:
                return None
    return None
