"""The runtime leftovers scan reads a task bundle's config.json nested thousands deep as unreadable (found11),
but the bundle's reclaim step parsed the same file again, and runc's state.json, with a decoder that let
RecursionError out: the step failed with a traceback on every attempt (the bundle the scan planned could
never go), where an unreadable config.json names no cgroup and an unreadable state.json keeps runc's state."""

from __future__ import annotations

import os
from pathlib import Path

from nodegc.model.runtime import RuntimeLeftover
from nodegc.reclaim.runtime_leftovers import _runc_init_alive, _runc_leftovers

_NESTED = b"[" * 200_000
CID = "c" * 64


def test_a_nested_state_json_keeps_runcs_state_without_a_traceback() -> None:
    assert _runc_init_alive(_NESTED, CID, Path("/proc")) == "its state.json cannot be read"


def test_a_nested_config_json_names_no_cgroup_and_the_step_goes_on(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    (tasks / CID).mkdir(parents=True)
    (tasks / CID / "config.json").write_bytes(_NESTED)
    left = RuntimeLeftover("task_dir", CID, str(tasks / CID), inode=(tasks / CID).stat().st_ino)
    fd = os.open(tasks, os.O_RDONLY | os.O_DIRECTORY)
    try:
        out = _runc_leftovers(fd, left, mounts=[], runc_root=None, cgroup_root=tmp_path / "cg",
                              proc_root=Path("/proc"), timeout=5.0)
    finally:
        os.close(fd)
    assert out == ""
