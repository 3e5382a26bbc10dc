"""A process whose command line could not be read in time (its memory map locked: see
tests/host/adversarial/found14_safe/test_cmdline_of_a_locked_process.py) may be a shim of any id: it was left
out of the scan as no shim at all, and a sandbox dir or task bundle whose shim it is went as "no shim of
this id runs". While any process cannot be told, no runtime leftover is judged (kept, with the reason)."""

from __future__ import annotations

from nodegc.model.findings import FindingClass
from nodegc.model.runtime import UNTOLD_PROCESS, RuntimeLeftover
from tests.unit.test_runtime_leftovers import A, B, run, sandbox_dir, shim, task_dir


def _untold(pid: int) -> RuntimeLeftover:
    return RuntimeLeftover("shim", "", f"/proc/{pid}", pid=pid,
                           problem=f"{UNTOLD_PROCESS}: its command line could not be read within 2s")


def test_no_leftover_is_judged_while_a_process_cannot_be_told() -> None:
    sd, td, orphan = sandbox_dir(A), task_dir(B), shim(B, 4545)
    before = run(sd, td, orphan, stop_shims=True)
    assert before[sd.path].cls is FindingClass.ORPHANED_RUNTIME_DIR  # without the untold process
    assert before[orphan.path].cls is FindingClass.ORPHANED_SHIM
    out = run(sd, td, orphan, _untold(777), stop_shims=True)
    for left in (sd, td, orphan):
        assert not out[left.path].cls.is_residue, (left.path, out[left.path])
        assert any("could not be read in time" in r for r in out[left.path].evidence), out[left.path].evidence
    assert out["/proc/777"].cls is FindingClass.RUNTIME_LEFTOVER and not out["/proc/777"].cls.is_residue
