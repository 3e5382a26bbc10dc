"""Adversarial, with real mounts (a private mount namespace) and the agent's real mount table reuse: the
pod directory walks PodDirWatcher takes again equal a fresh walk, whatever mounts come and go over and
below the listed directories (tmpfs over a plugin directory or over `containers`, a bind mount of one pod's
directory into another's, a volume mounted and unmounted, lazy unmounts), scan after scan."""

from __future__ import annotations

import os
import random
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.hostio.mountinfo import forget_parses, read_mounts
from nodegc.inventory.pod_dirs import PodDirWatcher, scan_pod_dirs

PLUGIN = "kubernetes.io~empty-dir"


def _run(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, timeout=30)


class Tree:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.kubelet = base / "kubelet"
        _run("mount", "-t", "tmpfs", "tmpfs", str(base))  # a local filesystem of the test's own
        (self.kubelet / "pods").mkdir(parents=True)
        self.watcher = PodDirWatcher(monotonic=lambda: 0.0)
        self.mounted: list[Path] = []

    def pod(self) -> Path:
        path = self.kubelet / "pods" / str(uuid.uuid4())
        for v in ("a", "b"):
            (path / "volumes" / PLUGIN / v).mkdir(parents=True)
        (path / "containers" / "app").mkdir(parents=True)
        return path

    def pods(self) -> list[Path]:
        return sorted((self.kubelet / "pods").iterdir())

    def mount(self, target: Path, *, source: Path | None = None) -> None:
        if source is None:
            _run("mount", "-t", "tmpfs", "tmpfs", str(target))
        else:
            _run("mount", "--bind", str(source), str(target))
        self.mounted.append(target)

    def umount(self, *, lazy: bool = False) -> None:
        target = self.mounted.pop()
        _run("umount", *(["-l"] if lazy else []), str(target))

    def check(self) -> None:
        mounts, _ = read_mounts(reuse=True)
        watched = scan_pod_dirs(self.kubelet, mounts, watcher=self.watcher)
        fresh = scan_pod_dirs(self.kubelet, read_mounts()[0])
        assert watched == fresh

    def close(self) -> None:
        self.watcher.close()
        _run("umount", "-l", str(self.base))


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    forget_parses()
    base = Path(os.path.realpath(tmp_path)) / "root"
    base.mkdir()
    t = Tree(base)
    yield t
    t.close()
    forget_parses()


def _step(t: Tree, rnd: random.Random) -> None:
    pods = t.pods()
    pod = rnd.choice(pods) if pods else t.pod()
    what = rnd.randrange(9)
    if what == 0:
        t.pod()
    elif what == 1 and (pod / "volumes" / PLUGIN).is_dir():
        t.mount(pod / "volumes" / PLUGIN)  # over a listed directory: its listing is now the tmpfs root's
        if rnd.random() < 0.5:
            (pod / "volumes" / PLUGIN / "inside").mkdir(exist_ok=True)
    elif what == 2 and (pod / "containers").is_dir():
        t.mount(pod / "containers")
        if rnd.random() < 0.5:
            (pod / "containers" / "sidecar").mkdir(exist_ok=True)
    elif what == 3 and (pod / "volumes" / PLUGIN / "a").is_dir():
        t.mount(pod / "volumes" / PLUGIN / "a")  # a volume, as the kubelet mounts one
    elif what == 4 and len(pods) > 1 and (pod / "containers").is_dir():
        other = rnd.choice([p for p in pods if p != pod])
        if (other / "containers").is_dir():
            t.mount(pod / "containers", source=other / "containers")  # one directory reached from two pods
    elif what == 5 and t.mounted:
        t.umount(lazy=rnd.random() < 0.3)
    elif what == 6 and (pod / "containers").is_dir():
        (pod / "containers" / f"c{rnd.randrange(5)}").mkdir(exist_ok=True)
    elif what == 7:
        os.utime(pod, (rnd.randrange(1, 10**9),) * 2)
    elif what == 8 and (pod / "volumes" / PLUGIN).is_dir():
        for child in (pod / "volumes" / PLUGIN).iterdir():
            if child.is_dir() and not os.path.ismount(child) and not any(child.iterdir()):
                child.rmdir()
                break


@pytest.mark.parametrize("seed", range(int(os.environ.get("NODEGC_SEEDS", "6"))))
def test_mounts_over_and_below_listed_directories_never_make_a_scan_differ(tree: Tree, seed: int) -> None:
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    for _ in range(3):
        tree.pod()
    tree.check()
    for _ in range(40):
        _step(tree, rnd)
        tree.check()
        tree.check()
    assert tree.watcher.reused > 0  # the walks were in fact taken again
