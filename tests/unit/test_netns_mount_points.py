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
    for netns_dir in (link, real, Path(f"{real}/"), tmp_path / "run" / ".." / "real" / "netns"):
        assert _mount_points(mounts, netns_dir) == _reference(mounts, netns_dir)
