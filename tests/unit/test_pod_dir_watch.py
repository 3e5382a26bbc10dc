"""Pod directory walks taken again between scans only while inotify proves them unchanged.

The rule every test checks: a scan with the watcher returns exactly what a fresh walk returns, whatever
changed in between; the counters only show that unchanged directories were in fact not walked again.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from nodegc.hostio import inotify
from nodegc.hostio.inotify import IN_Q_OVERFLOW, Event
from nodegc.inventory.pod_dirs import WATCH_LIMIT_RETRY_SECONDS, PodDirWatcher, scan_pod_dirs
from nodegc.model.resources import Mount


def _mount(mount_id: int, path: Path | str, *, fs_type: str = "tmpfs") -> Mount:
    return Mount(mount_id=mount_id, parent_id=1, device="0:99", root="/", mount_point=str(path), options="rw",
                 fs_type=fs_type, source=fs_type)


class Node:
    def __init__(self, tmp_path: Path, *, fs_type: str = "ext4") -> None:
        self.base = Path(os.path.realpath(tmp_path))
        self.kubelet = self.base / "kubelet"
        (self.kubelet / "pods").mkdir(parents=True)
        self.mounts = [_mount(10, self.base, fs_type=fs_type)]
        self.now = 0.0
        self.watcher = PodDirWatcher(monotonic=lambda: self.now)

    def pod(self, uid: str | None = None, *, volumes: tuple[str, ...] = ("data",),
            containers: tuple[str, ...] = ("app",)) -> Path:
        path = self.kubelet / "pods" / (uid or str(uuid.uuid4()))
        for v in volumes:
            (path / "volumes" / "kubernetes.io~empty-dir" / v).mkdir(parents=True)
        for c in containers:
            (path / "containers" / c).mkdir(parents=True)
        return path

    def check(self) -> tuple[int, int]:
        """(walked, reused) of this scan; its result must equal a fresh walk's."""
        walked, reused = self.watcher.walked, self.watcher.reused
        watched = scan_pod_dirs(self.kubelet, self.mounts, watcher=self.watcher)
        fresh = scan_pod_dirs(self.kubelet, self.mounts)
        assert watched == fresh
        return self.watcher.walked - walked, self.watcher.reused - reused


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    yield n
    n.watcher.close()


def test_unchanged_directories_are_not_walked_again(node: Node) -> None:
    for _ in range(3):
        node.pod()
    assert node.check() == (3, 0)
    assert node.check() == (0, 3)
    assert node.check() == (0, 3)


@pytest.mark.parametrize("change", [
    "new_volume", "volume_gone", "new_container", "container_renamed", "volume_becomes_symlink",
    "file_in_pod_dir", "touch_pod_dir", "chmod_volumes", "new_subpath", "replaced_same_name",
])
def test_every_change_walks_that_pod_again(node: Node, change: str) -> None:
    a, _b = node.pod(), node.pod()
    node.check()
    assert node.check() == (0, 2)
    plugin = a / "volumes" / "kubernetes.io~empty-dir"
    if change == "new_volume":
        (plugin / "cache").mkdir()
    elif change == "volume_gone":
        (plugin / "data").rmdir()
    elif change == "new_container":
        (a / "containers" / "sidecar").mkdir()
    elif change == "container_renamed":
        (a / "containers" / "app").rename(a / "containers" / "app2")
    elif change == "volume_becomes_symlink":
        (plugin / "data").rmdir()
        (plugin / "data").symlink_to("/etc")
    elif change == "file_in_pod_dir":
        (a / "etc-hosts").write_text("x")
    elif change == "touch_pod_dir":
        os.utime(a, (1, 1))
    elif change == "chmod_volumes":
        os.chmod(a / "volumes", 0o700)
    elif change == "new_subpath":
        (a / "volume-subpaths" / "data" / "app" / "0").mkdir(parents=True)
    elif change == "replaced_same_name":
        shutil.rmtree(a)
        node.pod(a.name, volumes=("other",))
    walked, reused = node.check()
    assert (walked, reused) == (1, 1)
    # A walk with a read problem (the symlink) is never kept: that pod is walked every scan.
    assert node.check() == ((1, 1) if change == "volume_becomes_symlink" else (0, 2))


def test_pods_come_and_go(node: Node) -> None:
    a, _b = node.pod(), node.pod()
    node.check()
    shutil.rmtree(a)
    assert node.check() == (0, 1)
    node.pod()
    assert node.check() == (1, 1)
    (node.kubelet / "pods" / "not-a-uid").mkdir()
    node.check()  # a problem, reported as a fresh walk reports it


def test_a_mount_change_below_a_pod_walks_it_again_and_mounts_are_always_this_scans(node: Node) -> None:
    a, _b = node.pod(), node.pod()
    node.check()
    node.mounts = [*node.mounts, _mount(77, a / "volumes" / "kubernetes.io~empty-dir" / "data")]
    assert node.check() == (1, 1)
    node.mounts = [*node.mounts[:1], _mount(78, a / "volumes" / "kubernetes.io~empty-dir" / "data")]
    assert node.check() == (1, 1)
    pods = {p.path: p for p in scan_pod_dirs(node.kubelet, node.mounts, watcher=node.watcher)[0]}
    assert pods[str(a)].volumes[0].mount_id == 78


def test_not_on_a_local_filesystem_everything_is_walked(tmp_path: Path) -> None:
    node = Node(tmp_path, fs_type="nfs4")
    node.pod()
    for _ in range(3):
        assert node.check() == (1, 0)
    node.mounts = []  # no mount table at all: the filesystem is unknown
    assert node.check() == (1, 0)
    node.watcher.close()


def test_the_periodic_full_walk(node: Node) -> None:
    node.pod()
    node.check()
    node.now += node.watcher.full_walk_seconds - 1
    assert node.check() == (0, 1)
    node.now += 1
    assert node.check() == (1, 0)
    assert node.watcher.full_walks == 2


def test_an_overflow_or_an_unreadable_queue_forgets_everything(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    node.pod(), node.pod()
    node.check()
    real = inotify.Inotify.read_events
    monkeypatch.setattr(inotify.Inotify, "read_events", lambda self, **_: [Event(-1, IN_Q_OVERFLOW, "")])
    assert node.check() == (2, 0)
    monkeypatch.setattr(inotify.Inotify, "read_events", lambda self, **_: [Event(12345, 0x100, "x")])
    assert node.check() == (2, 0)  # a watch it did not make

    def broken(self: inotify.Inotify, **_: object) -> list[Event]:
        raise OSError(errno.EIO, "read failed")

    monkeypatch.setattr(inotify.Inotify, "read_events", broken)
    assert node.check() == (2, 0)
    monkeypatch.setattr(inotify.Inotify, "read_events", real)
    assert node.check() == (2, 0)  # a new instance: its watches are new, so walk once
    assert node.check() == (0, 2)


def test_a_drain_cut_short_counts_as_an_overflow(tmp_path: Path) -> None:
    watch = inotify.Inotify()
    try:
        watch.add_watch(str(tmp_path))
        for i in range(50):
            (tmp_path / f"f{i}").mkdir()
        events = watch.read_events(limit=1)
        assert events[-1].mask & IN_Q_OVERFLOW and events[-1].wd == -1
    finally:
        watch.close()


def test_a_watch_that_cannot_be_added_keeps_that_pod_walked(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    a, _b = node.pod(), node.pod()
    real = inotify.Inotify.add_watch

    def full(self: inotify.Inotify, path: str, mask: int = inotify.DIRECTORY_CHANGES) -> int:
        if path.startswith(str(a)) and path.endswith("containers"):
            raise OSError(errno.EACCES, "permission denied", path)
        return real(self, path, mask)

    monkeypatch.setattr(inotify.Inotify, "add_watch", full)
    node.check()
    assert node.check() == (1, 1)
    assert node.check() == (1, 1)


def test_the_pods_directory_replaced_forgets_everything(node: Node) -> None:
    node.pod()
    node.check()
    pods = node.kubelet / "pods"
    pods.rename(node.kubelet / "old")
    pods.mkdir()
    shutil.copytree(node.kubelet / "old", pods, dirs_exist_ok=True)
    assert node.check() == (1, 0)


def test_random_changes_never_make_a_scan_differ_from_a_fresh_walk(node: Node) -> None:
    rng = random.Random(12)  # noqa: S311 - a reproducible sequence of changes
    pods = [node.pod() for _ in range(6)]
    node.check()
    for _ in range(150):
        pod = rng.choice(pods)
        action = rng.randrange(8)
        if not pod.exists():
            pods.remove(pod)
            pods.append(node.pod())
            continue
        if action == 0:
            shutil.rmtree(pod)
        elif action == 1:
            (pod / "volumes" / "kubernetes.io~empty-dir" / f"v{rng.randrange(3)}").mkdir(parents=True, exist_ok=True)
        elif action == 2:
            shutil.rmtree(pod / "volumes", ignore_errors=True)
        elif action == 3:
            (pod / "containers" / f"c{rng.randrange(3)}").mkdir(parents=True, exist_ok=True)
        elif action == 4:
            os.utime(pod, (rng.randrange(1 << 30),) * 2)
        elif action == 5:
            node.mounts = [node.mounts[0], _mount(100 + rng.randrange(5), pod / "volumes")]
        elif action == 6:
            node.now += rng.choice((1.0, 400.0))
        node.check()


def _stacked(mount_id: int, parent_id: int, path: Path, source: str) -> Mount:
    return Mount(mount_id=mount_id, parent_id=parent_id, device="0:98", root="/", mount_point=str(path),
                 options="rw", fs_type="tmpfs", source=source)


def test_the_same_mount_ids_stacked_the_other_way_round_are_looked_up_again(node: Node) -> None:
    """The mounts below a pod keep their ids while the visible one changes: the walk is taken again,
    its volumes' mounts are not, unless the table is the very tuple they were computed from."""
    a = node.pod()
    data = a / "volumes" / "kubernetes.io~empty-dir" / "data"
    base = node.mounts[0]
    one = (base, _stacked(77, 10, data, "first"), _stacked(78, 77, data, "second"))
    other = (base, _stacked(77, 78, data, "first"), _stacked(78, 10, data, "second"))
    sources = []
    for table in (one, one, other, other, tuple(one), one):
        node.mounts = table  # type: ignore[assignment]
        node.check()
        pods = scan_pod_dirs(node.kubelet, table, watcher=node.watcher)[0]
        sources.append(pods[0].volumes[0].source)
    assert sources == ["second", "second", "first", "first", "second", "second"]
    assert node.watcher.walked == 1  # one walk; the rest taken again


def test_no_inotify_walks_everything_and_tries_again_later(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    node.pod()
    real = inotify.Inotify.__init__

    def exhausted(self: inotify.Inotify) -> None:
        raise OSError(errno.EMFILE, "too many inotify instances")

    monkeypatch.setattr(inotify.Inotify, "__init__", exhausted)
    assert node.check() == (1, 0)
    monkeypatch.setattr(inotify.Inotify, "__init__", real)
    assert node.check() == (1, 0)  # not tried again at once
    node.now += node.watcher.full_walk_seconds
    assert node.check() == (1, 0)  # set up again: this walk is watched
    assert node.check() == (0, 1)


def test_the_watch_limit_releases_every_watch_and_walks_everything(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """fs.inotify.max_user_watches is shared with the kubelet and the runtime: once it is hit, every watch goes
    (the next scans walk every pod directory, said in the log and the metrics), and it is tried again later."""
    _a, b = node.pod(), node.pod()
    node.check()
    assert node.check() == (0, 2) and node.watcher.watching
    real = inotify.Inotify.add_watch
    full = [True]

    def limited(self: inotify.Inotify, path: str, mask: int = inotify.DIRECTORY_CHANGES) -> int:
        if full[0] and path.startswith(str(b)):
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real(self, path, mask)

    monkeypatch.setattr(inotify.Inotify, "add_watch", limited)
    (b / "containers" / "sidecar").mkdir()  # b is walked again: its watches hit the limit
    with capture_logs() as logs:
        assert node.check() == (1, 1)
    assert [e["reason"] for e in logs if e["log_level"] == "warning"] == ["watch_limit"], logs
    assert node.watcher._inotify is None, "every watch released"
    assert node.watcher.stats() == {"watching": 0, "fallbacks_watch_limit": 1, "fallbacks_inotify_unavailable": 0,
                                    "fallbacks_events_unreadable": 0}
    full[0] = False
    assert node.check() == (2, 0)  # every pod directory walked, nothing watched
    node.now += WATCH_LIMIT_RETRY_SECONDS - 1
    assert node.check() == (2, 0)
    node.now += 1
    assert node.check() == (2, 0) and node.watcher.watching  # watched again: this walk
    assert node.check() == (0, 2)
