"""Races against the desired state's photograph: what was born after it cannot be residue according to it."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory
from nodegc.planning.correlate import CorrelationPolicy, correlate
from tests.unit.factories import NOW, cache, desired, netns, pod, pod_dir, reservation, veth

PHOTO = NOW - timedelta(seconds=100)
BORN = NOW.timestamp() - 90
"""Born 10 s after the photo, 90 s before the scan: older than the 60 s minimum age, younger than the photo."""


def _after_photo_inventory() -> Inventory:
    return Inventory(taken_at=NOW, pod_dirs=(pod_dir("u-new", mounted=True, mtime=BORN),),
                     ip_reservations=(reservation("10.0.0.5", "cnew", mtime=BORN),),
                     cni_cache=(cache("cnew", uid="u-new", ip="10.0.0.5", mtime=BORN),),
                     netns=(netns("cnew", mtime=BORN),), veths=(veth("cnew"),))


def test_everything_born_after_the_photo_is_protected() -> None:
    photo = replace(desired(pod("old", "u-old", ip="10.0.0.2")), fetched_at=PHOTO)
    findings = correlate(_after_photo_inventory(), photo, now=NOW, policy=CorrelationPolicy(min_age_seconds=60))
    assert findings and all(f.cls is FindingClass.PROTECTED for f in findings), [
        (f.kind.value, f.cls.value, f.evidence) for f in findings]
    assert any("cannot show its owner" in e for f in findings for e in f.evidence)


def test_born_before_the_photo_less_the_minimum_age_is_residue() -> None:
    photo = replace(desired(pod("old", "u-old", ip="10.0.0.2")), fetched_at=NOW - timedelta(seconds=20))
    findings = correlate(_after_photo_inventory(), photo, now=NOW, policy=CorrelationPolicy(min_age_seconds=60))
    assert all(f.cls.is_residue for f in findings), [(f.kind.value, f.cls.value) for f in findings]


def test_a_photo_from_the_future_counts_from_the_scan() -> None:
    photo = replace(desired(), fetched_at=NOW + timedelta(seconds=600))
    inv = Inventory(taken_at=NOW, pod_dirs=(pod_dir("u-new", mtime=NOW.timestamp() - 30),))
    [finding] = correlate(inv, photo, now=NOW, policy=CorrelationPolicy(min_age_seconds=60))
    assert finding.cls is FindingClass.PROTECTED
