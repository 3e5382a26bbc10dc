"""runc's state dir of a container is kept while the init process its state.json names runs. A state.json
that exists but cannot be read (larger than the 4 MiB bound: runc keeps the whole container config there,
environment included; or not a regular file) was taken for no state.json at all, and the state dir of a
container whose init still runs was removed. Only a missing state.json says nothing runs; one that cannot
be read is a doubt, and a doubt keeps."""

from __future__ import annotations

import json
import os
from pathlib import Path

from nodegc.inventory.cri.leftovers import start_ticks
from nodegc.reclaim.runtime_leftovers import _MAX_STATE, _remove_runc_state

CID = "c" * 64
PROC = Path("/proc")


def _live_state() -> dict[str, object]:
    return {"id": CID, "init_process_pid": os.getpid(), "init_process_start": start_ticks(PROC, os.getpid())}


def test_a_state_json_beyond_the_bound_naming_a_live_init_is_kept(tmp_path: Path) -> None:
    state = tmp_path / "runc" / "k8s.io" / CID
    state.mkdir(parents=True)
    big = {**_live_state(), "config": {"env": ["X=" + "x" * _MAX_STATE]}}
    (state / "state.json").write_text(json.dumps(big))
    out = _remove_runc_state(CID, tmp_path / "runc", proc_root=PROC, timeout=5.0)
    assert not isinstance(out, str) and not out.ok, out
    assert (state / "state.json").is_file()


def test_a_state_json_that_is_a_symlink_is_not_followed_and_keeps_the_state(tmp_path: Path) -> None:
    state = tmp_path / "runc" / "k8s.io" / CID
    state.mkdir(parents=True)
    real = tmp_path / "real.json"
    real.write_text(json.dumps(_live_state()))
    (state / "state.json").symlink_to(real)
    out = _remove_runc_state(CID, tmp_path / "runc", proc_root=PROC, timeout=5.0)
    assert not isinstance(out, str) and not out.ok, out
    assert state.is_dir() and real.is_file()


def test_a_missing_state_json_still_lets_the_state_dir_go(tmp_path: Path) -> None:
    state = tmp_path / "runc" / "k8s.io" / CID
    state.mkdir(parents=True)
    assert _remove_runc_state(CID, tmp_path / "runc", proc_root=PROC, timeout=5.0) == f"removed runc's state {state}"
