"""A static pod's directory and volumes are named by the kubelet's config hash, which its mirror pod carries
in an annotation (`kubernetes.io/config.mirror`, `kubernetes.io/config.hash`). Any pod may carry those
annotations: the API lets whoever creates a pod set them. The pod index took the first pod of the list
claiming a hash, and the agent's list is sorted by namespace: a finished pod in namespace `aaa` annotated
with the hash of a static pod's config (read off its mirror pod) came first, so the static pod, running, was
judged by that pod's phase: terminal, and its volumes residue; terminate's live GET then asked about that
finished pod, found it, with the hash, finished, and the volumes of the running static pod were unmounted.
Two pods claiming one identity are a doubt, and a doubt keeps: the claimant that still holds wins."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nodegc.model.findings import FindingClass
from nodegc.model.pods import DesiredState
from nodegc.model.resources import Inventory, Kind
from nodegc.planning.correlate import correlate
from nodegc.planning.owners import PodIndex
from tests.unit.factories import NOW, desired, pod, pod_dir

HASH = "9f3c0a1b2c3d4e5f60718293a4b5c6d7"
MIRROR = replace(pod("etcd-n1", "uid-mirror", ns="kube-system"), static_uid=HASH)
CLAIMER = replace(pod("job", "uid-claimer", ns="aaa", phase="Succeeded"), static_uid=HASH)
OTHERS = tuple(pod(f"web-{i}", f"uid-web-{i}", ns="shop") for i in range(20))


@pytest.mark.parametrize("order", ["claimer_first", "mirror_first"])
def test_a_finished_pod_claiming_a_static_pods_hash_does_not_make_it_finished(order: str) -> None:
    pods = (CLAIMER, MIRROR) if order == "claimer_first" else (MIRROR, CLAIMER)
    inv = Inventory(taken_at=NOW, pod_dirs=(pod_dir(HASH, mounted=True),))
    found = {f.kind: f for f in correlate(inv, desired(*pods), now=NOW)}
    volume = found[Kind.VOLUME_MOUNT]
    assert volume.cls is FindingClass.IN_USE, (volume.cls, volume.owner)
    assert (volume.owner.namespace, volume.owner.name) == ("kube-system", "etcd-n1")


def test_the_index_made_again_agrees() -> None:
    """The index made from the one before (a few pods added or removed) picks the same claimant."""
    before = (*OTHERS, MIRROR)
    after = (CLAIMER, *OTHERS, MIRROR)
    then = PodIndex.build(DesiredState(node="n1", pods=before, source="t", fetched_at=NOW))
    again = PodIndex.build(DesiredState(node="n1", pods=after, source="t", fetched_at=NOW), earlier=(then, before))
    whole = PodIndex.build(DesiredState(node="n1", pods=after, source="t", fetched_at=NOW))
    assert again.by_uid[HASH] is whole.by_uid[HASH] is MIRROR


def test_a_finished_static_pod_alone_is_still_finished() -> None:
    """No false keep: the one claimant of the hash, finished, leaves its volumes residue."""
    done = replace(MIRROR, phase="Succeeded")
    inv = Inventory(taken_at=NOW, pod_dirs=(pod_dir(HASH, mounted=True),))
    found = {f.kind: f for f in correlate(inv, desired(done), now=NOW)}
    assert found[Kind.VOLUME_MOUNT].cls is FindingClass.ORPHANED_VOLUME_MOUNT
