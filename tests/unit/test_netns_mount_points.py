"""The netns reader's choice of mount points below its dir equals the plain loop over every mount."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodegc.inventory.netns import NSFS, _mount_points
from nodegc.model.resources import Mount

_PARTS = ["run", "netns", "var", "real", "x", "cni-1", ".", "..", "", "netnsx", "net"]


def _reference(mounts: list[Mount], netns_dir: Path) -> tuple[frozenset[str], frozenset[str]]:
    configured = os.path.normpath(os.fsdecode(netns_dir))
    resolved = os.path.realpath(configured)
    nsfs: set[str] = set()
    other: set[str] = set()
    for m in mounts:
        point = os.path.normpath(m.mount_point)
        if resolved != configured and os.path.dirname(point) == resolved:
            point = os.path.join(configured, os.path.basename(point))
        if os.path.dirname(point) != configured:
            continue
        (nsfs if m.fs_type == NSFS else other).add(point)
    return frozenset(nsfs), frozenset(other)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.lists(st.sampled_from(_PARTS), max_size=6), st.booleans()), max_size=12))
def test_mount_points_below_the_netns_dir_are_the_plain_loops(tmp_path: Path,
                                                               points: list[tuple[list[str], bool]]) -> None:
    real = tmp_path / "real" / "netns"
    real.mkdir(parents=True, exist_ok=True)
    link = tmp_path / "run-netns"
    if not link.exists():
        link.symlink_to(real)
    mounts = [Mount(mount_id=i, parent_id=1, device="0:4", root="/", mount_point="/".join([str(tmp_path), *parts]),
                    options="rw", fs_type=NSFS if ns else "tmpfs", source="nsfs")
              for i, (parts, ns) in enumerate(points)]
    mounts += [Mount(mount_id=100, parent_id=1, device="0:4", root="/", mount_point=f"{real}/cni-2", options="rw",
                     fs_type=NSFS, source="nsfs")]
    table = tuple(mounts)  # a scan's table: the answer for the same object is remembered
    for netns_dir in (link, real, Path(f"{real}/"), tmp_path / "run" / ".." / "real" / "netns"):
        assert _mount_points(mounts, netns_dir) == _reference(mounts, netns_dir)
        assert _mount_points(table, netns_dir) == _mount_points(table, netns_dir) == _reference(mounts, netns_dir)


def test_a_remembered_answer_is_for_that_table_and_that_resolution_only(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    link = tmp_path / "netns"
    link.symlink_to(one)

    def table(*points: Path) -> tuple[Mount, ...]:
        return tuple(Mount(mount_id=i, parent_id=1, device="0:4", root="/", mount_point=str(p), options="rw",
                           fs_type=NSFS, source="nsfs") for i, p in enumerate(points))

    first = table(one / "a", two / "b")
    assert _mount_points(first, link) == (frozenset({f"{link}/a"}), frozenset())
    # another table (the mount table changed) is answered afresh
    second = table(one / "a", two / "b", one / "c")
    assert _mount_points(second, link) == (frozenset({f"{link}/a", f"{link}/c"}), frozenset())
    link.unlink()
    link.symlink_to(two)  # the same table, the directory resolved elsewhere now
    assert _mount_points(second, link) == (frozenset({f"{link}/b"}), frozenset())
