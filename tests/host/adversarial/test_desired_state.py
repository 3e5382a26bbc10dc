"""Desired-state attacks that need a real file system: a pods file dated beyond any calendar (tmpfs keeps
64-bit times; ext4 clamps them)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.desired.snapshot import SnapshotSource
from nodegc.desired.source import SourceError


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "tmpfs"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], check=True, timeout=30)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False, timeout=30)


def test_a_pods_file_dated_beyond_any_calendar_is_refused(tmpfs: Path) -> None:
    """A modification time past year 9999 made datetime raise ValueError out of the snapshot read."""
    f = tmpfs / "pods.json"
    f.write_text(json.dumps({"kind": "List", "items": [
        {"metadata": {"name": "a", "namespace": "d", "uid": "u0"}, "spec": {"nodeName": "n1"},
         "status": {"phase": "Running"}}]}))
    os.utime(f, (1e15, 1e15))
    assert f.stat().st_mtime == 1e15
    with pytest.raises(SourceError, match="out of range"):
        SnapshotSource(f, "n1").fetch()
