"""Correlations taken again (`planning.remembered`) against correlations from scratch, when cache entries are
read at a shared path and the desired state changes between scans. A correlation made anew takes an earlier
one's owners and verdicts where the very same pods are looked up; what it takes must be each entry's own
(found by its place, never by its path): with two entries of one path naming different owners, an answer
kept by path would be the other entry's. Scan after scan, the pods the entries of a shared path name go
away, come back, are re-created under their name, go terminal or pending, are listed anew or in another
order, pods claiming their addresses are added, and the entries are read again as new equal objects (a
snapshot parsed again: an index of the earlier objects finds none of them by identity): detect's two
passes answer what a correlation from scratch answers, and nothing a live or pending pod uses is residue."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest

from nodegc.model.findings import FindingClass
from nodegc.model.pods import DesiredState, OwnerState, Pod
from nodegc.model.resources import CNICacheEntry, Inventory, Kind
from nodegc.planning.context import CorrelationPolicy
from nodegc.planning.correlate import correlate
from nodegc.planning.remembered import Correlations
from tests.unit.bigscan import BigScan, big_scan, with_addresses_read
from tests.unit.factories import NOW, OLD


def _shared(rnd: random.Random, inv: Inventory, desired: DesiredState) -> tuple[Inventory, list[CNICacheEntry]]:
    """The scan's inventory with a few pairs of entries read at one path (one of a listed pod's first when
    there is one), aged past the minimum age; and the entries moved to another's path."""
    listed = {p.uid for p in desired.pods}
    entries = [replace(e, mtime=OLD) for e in inv.cni_cache]
    owned = [i for i, e in enumerate(entries) if e.pod_uid in listed]
    rest = [i for i in range(len(entries)) if i not in owned]
    rnd.shuffle(owned)
    rnd.shuffle(rest)
    moved: list[CNICacheEntry] = []
    for _ in range(4):
        keep = owned.pop() if owned else rest.pop()
        other = rest.pop() if rest and rnd.random() < 0.7 else owned.pop()
        entries[other] = replace(entries[other], path=entries[keep].path)
        moved.append(entries[other])
    return replace(inv, cni_cache=tuple(entries)), moved


def _change(rnd: random.Random, desired: DesiredState, named: list[str]) -> DesiredState:
    """One change of the desired state, most of them to a pod an entry of a shared path names."""
    pods = list(desired.pods)
    at = [i for i, p in enumerate(pods) if p.uid in named]
    j = rnd.choice(at) if at and rnd.random() < 0.8 else rnd.randrange(len(pods))
    roll = rnd.random()
    if roll < 0.2:
        pods[j] = replace(pods[j], phase=rnd.choice(("Running", "Pending", "Succeeded", "Failed", None)))
    elif roll < 0.3:  # re-created under its name with a new UID (a StatefulSet's pod), its address kept
        pods[j] = replace(pods[j], uid=f"{pods[j].uid}-again", phase=rnd.choice(("Running", "Pending")))
    elif roll < 0.45:  # gone
        del pods[j]
    elif roll < 0.6:  # a pod of a UID a shared path's entry names comes (back) as live
        uid = rnd.choice(named)
        if all(p.uid != uid for p in pods):
            pods.append(replace(pods[j], uid=uid, name=f"back-{uid[:8]}", phase="Running"))
    elif roll < 0.7:  # a pod added, claiming another's address
        pods.append(replace(pods[j], uid=f"added-{rnd.randrange(10**6)}", name=f"added-{j}"))
    elif roll < 0.8:  # every pod listed as a new object (a list, a snapshot parsed again)
        pods = [replace(p) for p in pods]
    elif roll < 0.9:
        rnd.shuffle(pods)
    # else: the same pods, a new photograph
    return replace(desired, pods=tuple(pods))


def _bound(pods: tuple[Pod, ...], inv: Inventory) -> set[str]:
    """The cache entries' paths and the namespaces of the entries a live or pending listed pod names."""
    holding = {p.uid for p in pods if p.state in (OwnerState.LIVE, OwnerState.PENDING)}
    return {x for e in inv.cni_cache if e.pod_uid in holding for x in (e.path, e.netns or "")} - {""}


@pytest.mark.parametrize("seed", range(4))
def test_a_remembered_correlation_is_a_fresh_one_with_entries_sharing_a_path(seed: int) -> None:
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    scan = big_scan(seed, sandboxes=60)
    aged = replace(scan.inventory, netns=tuple(replace(n, mtime=OLD) for n in scan.inventory.netns))
    inv, moved = _shared(rnd, aged, scan.desired)
    paths = {e.path for e in moved}
    named = sorted({e.pod_uid for e in inv.cni_cache if e.path in paths and e.pod_uid})
    read = with_addresses_read(BigScan(inv, scan.desired, scan.unread_netns), seed)
    memo = Correlations()
    policy = CorrelationPolicy(min_age_seconds=60.0)
    desired = scan.desired
    taken = 0
    for step in range(40):
        when = NOW + timedelta(seconds=step * 30)
        desired = _change(rnd, desired, named) if step else desired
        if rnd.random() < 0.2:  # the entries read as new equal objects (a snapshot parsed again)
            inv = replace(inv, cni_cache=tuple(replace(e) for e in inv.cni_cache))
            read = replace(read, cni_cache=inv.cni_cache)
        photo = replace(desired, fetched_at=when)
        before = memo.reused
        found, first = memo.correlate(inv, photo, now=when, policy=policy)
        assert found == correlate(inv, photo, now=when, policy=policy), step
        again, _ = memo.correlate(read, photo, now=when, policy=policy, previous=first)
        assert again == correlate(read, photo, now=when, policy=policy), step
        taken += memo.reused - before
        bound = _bound(photo.pods, inv)
        for f in (*found, *again):
            if f.kind in (Kind.CNI_CACHE, Kind.NETNS) and f.cls.is_residue:
                assert f.id not in bound, (step, f)
            if f.kind is Kind.CNI_CACHE and f.id in paths:  # entries of different sandboxes: never told apart
                assert f.cls is FindingClass.CONFLICT, (step, f)
    assert taken  # verdicts were taken again: the comparison has teeth
