"""hostio.libc.unique_mount: the (inode, unique mount id) a remembered netnsid is keyed on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodegc.hostio.libc import unique_mount, unique_mounts


def test_path_and_descriptor_name_the_same_mount_and_inode(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x")
    by_path = unique_mount(str(f))
    fd = os.open(f, os.O_RDONLY)
    try:
        by_fd = unique_mount(fd=fd)
    finally:
        os.close(fd)
    assert by_path == by_fd
    if by_path is not None:  # a kernel before 6.8 has no unique mount ids: nothing is keyed on them
        assert by_path[0] == os.lstat(f).st_ino
        assert by_path[1] > 0


def test_a_symlink_is_not_followed_and_a_missing_path_raises(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"x")
    link = tmp_path / "link"
    link.symlink_to(target)
    stamp = unique_mount(str(link))
    if stamp is not None:
        assert stamp[0] == os.lstat(link).st_ino != os.stat(target).st_ino
    with pytest.raises(OSError):
        unique_mount(str(tmp_path / "absent"))


def test_many_at_once_answer_as_one_at_a_time(tmp_path: Path) -> None:
    """`unique_mounts` (the scan's batch) gives what `unique_mount` gives, path by path, errors included."""
    (tmp_path / "f").write_bytes(b"x")
    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "f")
    names = ["f", "d", "link", "absent", "f", "caf\u00e9-\udcff"]
    paths = [str(tmp_path / n) for n in names]
    batch = unique_mounts(paths)
    assert len(batch) == len(paths)
    for path, got in zip(paths, batch, strict=True):
        try:
            one: object = unique_mount(path)
        except OSError as e:
            assert isinstance(got, OSError)
            assert (got.errno, got.filename) == (e.errno, e.filename)
        else:
            assert got == one
    assert isinstance(batch[3], OSError) and batch[3].filename == paths[3]
