"""Adversarial: the agent's pod directory walks taken again (PodDirWatcher) must equal a fresh walk.

A walk is remembered only while inotify proves that nothing it read can have changed since it read it. So
every read of a walk must come after the watch that covers it: a change between a read and the watch that
covers it raises no event, and the stale read would be served scan after scan (until the periodic full walk)
while a fresh walk sees the change at once.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.hostio import inotify
from nodegc.inventory.pod_dirs import PodDirWatcher, scan_pod_dirs
from nodegc.model.resources import Mount

OLD = 1_000_000.0


def _mount(path: Path) -> Mount:
    return Mount(mount_id=10, parent_id=1, device="0:99", root="/", mount_point=str(path), options="rw",
                 fs_type="ext4", source="ext4")


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Path, list[Mount], PodDirWatcher]]:
    base = Path(os.path.realpath(tmp_path))
    kubelet = base / "kubelet"
    (kubelet / "pods").mkdir(parents=True)
    watcher = PodDirWatcher(monotonic=lambda: 0.0)
    yield kubelet, [_mount(base)], watcher
    watcher.close()


def test_a_pod_directory_written_between_its_stat_and_its_watch_is_not_served_stale(
    tree: tuple[Path, list[Mount], PodDirWatcher], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet writes into a pod directory (etc-hosts when the first container starts, maybe minutes
    after the directory was made) while the agent's first walk of it runs: after the walk took the
    directory's stat (its mtime, the age every rule on it uses) and before it watched the directory. The
    walk is remembered with the mtime from before the write, and no event ever says otherwise: a young
    directory looks old for up to the full-walk period (and 'newer than the mirror pod' reads false)."""
    kubelet, mounts, watcher = tree
    pod = kubelet / "pods" / str(uuid.uuid4())
    (pod / "containers" / "app").mkdir(parents=True)
    (pod / "volumes" / "kubernetes.io~empty-dir" / "data").mkdir(parents=True)
    os.utime(pod, (OLD, OLD))

    real = inotify.Inotify.add_watch
    written: list[str] = []

    def add_watch_while_the_kubelet_writes(self: inotify.Inotify, path: str, mask: int = inotify.DIRECTORY_CHANGES
                                           ) -> int:
        if path == str(pod) and not written:
            (pod / "etc-hosts").write_text("127.0.0.1 localhost\n")  # the concurrent write
            written.append(path)
        return real(self, path, mask)

    monkeypatch.setattr(inotify.Inotify, "add_watch", add_watch_while_the_kubelet_writes)
    scan_pod_dirs(kubelet, mounts, watcher=watcher)
    assert written, "the first walk watched the pod directory"
    monkeypatch.setattr(inotify.Inotify, "add_watch", real)

    watched, _ = scan_pod_dirs(kubelet, mounts, watcher=watcher)
    fresh, _ = scan_pod_dirs(kubelet, mounts)
    assert fresh[0].mtime > OLD
    assert watched == fresh
