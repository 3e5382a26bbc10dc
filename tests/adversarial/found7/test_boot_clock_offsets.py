"""The boot clock is read as the initial time namespace's: this process's CLOCK_BOOTTIME offset
(/proc/self/timens_offsets) is taken off; offsets that cannot be read leave the wall clock to measure (the
kernel host test: tests/host/adversarial/found7/test_boottime_in_a_time_namespace.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nodegc.hostio.clock import read_boot_time

BOOT_ID = "15ed12a6-6a15-41ec-9077-ab0446704aaf"


def _proc(tmp_path: Path, offsets: bytes | None) -> Path:
    (tmp_path / "sys/kernel/random").mkdir(parents=True)
    (tmp_path / "sys/kernel/random/boot_id").write_text(BOOT_ID + "\n")
    if offsets is not None:
        (tmp_path / "self").mkdir()
        (tmp_path / "self/timens_offsets").write_bytes(offsets)
    return tmp_path


@pytest.mark.parametrize(("offsets", "taken_off"), [
    (None, 0.0),  # a kernel without time namespaces
    (b"monotonic           0         0\nboottime            0         0\n", 0.0),
    (b"monotonic           0         0\nboottime       100000 500000000\n", 100000.5),
    (b"monotonic 0 0\nboottime -5000 0\n", -5000.0),
    (b"1 0 0\n7 2000 0\n", 2000.0),  # clock ids instead of names
])
def test_the_time_namespace_offset_is_taken_off(tmp_path: Path, offsets: bytes | None, taken_off: float) -> None:
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    reading = read_boot_time(_proc(tmp_path, offsets))
    after = time.clock_gettime(time.CLOCK_BOOTTIME)
    assert reading is not None and reading.boot_id == BOOT_ID
    assert before - taken_off <= reading.seconds <= after - taken_off


@pytest.mark.parametrize("offsets", [b"", b"monotonic 0 0\n", b"boottime x 0\n", b"\xff\xfe", b"boottime 1\n"])
def test_offsets_that_cannot_be_read_leave_the_wall_clock(tmp_path: Path, offsets: bytes) -> None:
    assert read_boot_time(_proc(tmp_path, offsets)) is None
