"""The one O_NOFOLLOW step every descent of the removal takes (a pod dir's, a runtime state dir's)."""

from __future__ import annotations

import os
from pathlib import Path

from nodegc.reclaim.outcomes import Outcome
from nodegc.reclaim.removing import open_dir_below


def test_a_symlink_a_file_or_a_missing_name_is_never_opened(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(outside)
    (tmp_path / "file").write_text("x")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        opened = open_dir_below(fd, "real", path=str(tmp_path / "real"))
        assert isinstance(opened, int)
        assert os.fstat(opened).st_ino == (tmp_path / "real").stat().st_ino
        os.close(opened)
        for name in ("link", "file"):
            out = open_dir_below(fd, name, path=str(tmp_path / name))
            assert isinstance(out, Outcome) and not out.ok and "not followed" in out.detail
        gone = open_dir_below(fd, "missing", path=str(tmp_path / "missing"))
        assert isinstance(gone, Outcome) and "does not exist" in gone.detail
    finally:
        os.close(fd)
