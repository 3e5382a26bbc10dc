"""Adversarial, with a real time namespace: CLOCK_BOOTTIME is per time namespace (an offset set when the
namespace is made: `unshare --time --boottime`, an OCI runtime's `timeOffsets`), while the boot id is the
kernel's. A running orphan first seen by a nodegc in one time namespace and measured by a nodegc in another
(the agent restarted in another container, the CLI run from elsewhere on the same ledger) counted the
offset as absence: 100,000 s ahead made a sandbox seen a minute ago due at once. The boot clock is read as
the initial time namespace's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodegc.engine.orphans import RunningOrphans
from nodegc.hostio.clock import BootTime, read_boot_time
from nodegc.ledger.store import Ledger
from tests.unit.test_running_orphans import GRACE, T0, A, finding, sandbox, view

OFFSET = 100_000

_READ = ("import json; from nodegc.hostio.clock import read_boot_time; b = read_boot_time();"
         " print(json.dumps(None if b is None else [b.boot_id, b.seconds]))")


def _read_in_a_time_namespace(offset: int) -> BootTime | None:
    unshare = shutil.which("unshare")
    assert unshare is not None
    done = subprocess.run([unshare, "--time", "--boottime", str(offset), "--fork", sys.executable, "-c", _READ],
                          capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0 and "time" in done.stderr and "Invalid argument" in done.stderr:
        pytest.fail(f"no time namespaces here: {done.stderr}")
    assert done.returncode == 0, done.stderr
    raw = json.loads(done.stdout)
    return None if raw is None else BootTime(boot_id=raw[0], seconds=raw[1])


def test_the_boot_clock_reads_the_same_in_a_time_namespace_with_an_offset() -> None:
    here = read_boot_time()
    there = _read_in_a_time_namespace(OFFSET)
    after = read_boot_time()
    assert here is not None and there is not None and after is not None
    assert there.boot_id == here.boot_id
    assert here.seconds <= there.seconds <= after.seconds + 0.01


def test_a_first_sight_in_another_time_namespace_does_not_end_the_grace(tmp_path: Path) -> None:
    with Ledger(tmp_path / "ledger.db") as ledger:
        first = RunningOrphans(grace_seconds=GRACE, store=ledger, boot_clock=read_boot_time)
        assert first.observe([finding(A)], T0, view=view(sandbox(A))) == []
        there = _read_in_a_time_namespace(OFFSET)
        restarted = RunningOrphans(grace_seconds=GRACE, store=ledger, boot_clock=lambda: there)
        assert restarted.observe([finding(A)], T0 + 60, view=view(sandbox(A))) == []
        assert ledger.running_orphans()[A].first_seen == T0
