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
    """None when the boot id cannot be read (no /proc, an odd file): the caller falls back to the wall clock."""
    try:
        raw = (proc_root / "sys/kernel/random/boot_id").read_bytes()[:100]
        seconds = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, AttributeError, ValueError):
        return None
    boot_id = raw.decode("ascii", "replace").strip()
    if not boot_id or not boot_id.isprintable() or len(boot_id) > 64:
        return None
    return BootTime(boot_id=boot_id, seconds=seconds)
