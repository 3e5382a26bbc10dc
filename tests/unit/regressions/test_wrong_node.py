"""A wrong node name that matches another node returns pods none of which is on this node: refused even
on a small node where the share rule (from 10 owners on) would not apply."""

from __future__ import annotations

from nodegc.model.resources import Inventory
from nodegc.planning.correlate import correlate
from nodegc.planning.guards import BlastRadius, blast_radius_refusal
from tests.unit.factories import NOW, desired, pod, pod_dir


def test_every_owner_orphaned_with_a_pod_list_that_matches_nothing_is_refused() -> None:
    here = tuple(pod_dir(f"uid-here-{i}", mounted=True) for i in range(8))
    elsewhere = desired(*(pod(f"other-{i}", f"uid-elsewhere-{i}", ip=f"10.9.0.{i + 2}") for i in range(5)))
    findings = correlate(Inventory(taken_at=NOW, pod_dirs=here), elsewhere, now=NOW)
    assert sum(f.cls.is_residue for f in findings) == 16  # 8 pod dirs + 8 volume mounts
    assert blast_radius_refusal(findings, elsewhere, BlastRadius()) is not None
