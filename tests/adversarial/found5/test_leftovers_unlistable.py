"""A runtime state folder that exists but cannot be listed (here: not a directory; on a node also EACCES or
EIO) must not read as "no leftovers": its items would close as confirmed absent while the dirs are still
there. It is a read problem of the leftovers' kind, which keeps their items open."""

from __future__ import annotations

from pathlib import Path

from nodegc.inventory.cri.leftovers import CRI_DIR, read_leftovers
from nodegc.model.resources import Kind


def test_an_unlistable_sandboxes_folder_is_a_read_problem(tmp_path: Path) -> None:
    (tmp_path / CRI_DIR).mkdir()
    (tmp_path / CRI_DIR / "sandboxes").write_text("not a folder")
    leftovers, problems = read_leftovers(tmp_path, mounts=(), proc_root=tmp_path / "no-proc")
    assert leftovers == ()
    assert [p.kind for p in problems] == [Kind.RUNTIME_LEFTOVER], problems
    assert "sandboxes" in problems[0].path


def test_a_missing_folder_is_no_problem(tmp_path: Path) -> None:
    assert read_leftovers(tmp_path, mounts=(), proc_root=tmp_path / "no-proc") == ((), ())
