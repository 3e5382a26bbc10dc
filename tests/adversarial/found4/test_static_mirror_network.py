"""A static pod on the pod network (hostNetwork false) whose mirror pod is in the API: the kubelet's cache
entry names the config hash, the mirror's status claims the address under the mirror's own UID. One pod,
not two: its reservation is in use, never a conflict, and nothing of it is residue. What stays a conflict:
another pod claiming the address, or a second mirror of the same hash."""

from __future__ import annotations

from dataclasses import replace

from nodegc.model.findings import FindingClass
from nodegc.model.pods import Pod
from nodegc.model.resources import Inventory, Kind
from nodegc.planning.correlate import correlate
from tests.unit.factories import NOW, cache, desired, netns, pod, reservation, veth

HASH = "6c1f0f0a5b2e4c8a9d3e7f1b2a4c6e8d"  # the config hash: the UID the kubelet gives the static pod
CID = "c" * 64
IP = "10.0.0.7"


def _mirror(uid: str = "u-mirror", *, phase: str = "Running") -> Pod:
    return replace(pod("web-n1", uid, ns="kube-system", ip=IP, phase=phase), static_uid=HASH)


def _inventory() -> Inventory:
    entry = replace(cache(CID, uid=HASH, name="web-n1", ip=IP), pod_namespace="kube-system")
    return Inventory(taken_at=NOW, ip_reservations=(reservation(IP, CID),), cni_cache=(entry,),
                     netns=(netns(CID, addresses=(IP,)),), veths=(veth(CID),))


def _classes(*pods: Pod) -> dict[Kind, FindingClass]:
    found = correlate(_inventory(), desired(*pods), now=NOW)
    return {f.kind: f.cls for f in found}


def test_a_mirrored_static_pod_on_the_pod_network_is_one_owner() -> None:
    classes = _classes(_mirror())
    assert classes[Kind.IP_RESERVATION] is FindingClass.IN_USE, classes
    assert classes[Kind.CNI_CACHE] is FindingClass.IN_USE
    assert classes[Kind.NETNS] is FindingClass.IN_USE
    assert classes[Kind.VETH] is FindingClass.IN_USE


def test_another_pod_claiming_the_address_is_still_a_conflict() -> None:
    other = pod("intruder", "u-other", ip=IP)
    classes = _classes(_mirror(), other)
    assert classes[Kind.IP_RESERVATION] is FindingClass.CONFLICT
    assert not any(c.is_residue for c in classes.values()), classes


def test_two_mirrors_of_one_hash_claiming_the_address_are_a_conflict() -> None:
    classes = _classes(_mirror("u-mirror"), _mirror("u-mirror-2"))
    assert classes[Kind.IP_RESERVATION] is FindingClass.CONFLICT
    assert not any(c.is_residue for c in classes.values()), classes


def test_a_terminal_mirror_with_a_live_claimant_is_never_residue() -> None:
    """The mirror finished, a new pod took the address: which one the reservation serves is not ours."""
    classes = _classes(_mirror(phase="Succeeded"), pod("next", "u-next", ip=IP))
    assert not any(c.is_residue for c in classes.values()), classes
    assert classes[Kind.IP_RESERVATION] is FindingClass.CONFLICT
