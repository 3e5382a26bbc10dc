"""A first pass that takes an earlier scan's network verdicts in bulk (`planning.network._network_again`)
asks again only the places `_Again.redo` names (and the namespaces and veths that follow what changed).
Its soundness is that every other place is one whose `_Again` check takes the earlier verdict: here each
such place is asked anyway and must be taken, over hypothesis-drawn changes of the pods (`pod_changes`).
And the findings must be those of a correlation from scratch, both passes of detect, decision by decision."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.model.findings import Finding
from nodegc.model.pods import Pod
from nodegc.model.resources import Inventory, StaticPodManifest
from nodegc.planning import network
from nodegc.planning.context import CorrelationPolicy
from nodegc.planning.correlate import correlate
from nodegc.planning.remembered import Correlations
from tests.adversarial.found13_perf.test_records_read_anew import read_anew
from tests.adversarial.found14_scan.pod_changes import apply, changes, record_names
from tests.unit.bigscan import BigScan, adversarial_scan, big_scan, with_addresses_read
from tests.unit.factories import NOW

_POLICY = CorrelationPolicy(min_age_seconds=60.0)


@functools.cache
def _scan(number: int) -> tuple[BigScan, Inventory, dict[str, list[str]]]:
    """Scans 0 to 3: `big_scan` and `adversarial_scan`; 4 and 5: the same made odder (`_odd`)."""
    make = adversarial_scan if number % 2 else big_scan
    scan = make(number, sandboxes=70, runtime=number == 2)
    if number >= 4:
        scan = _odd(scan, number)
    read = with_addresses_read(scan, number)
    return scan, read, record_names(read)


def _odd(scan: BigScan, seed: int) -> BigScan:
    """Chains whose rules name another address than their cache entry lists (or none), cache entries
    naming no namespace, a reservation naming an empty container id, and static pod manifests: one whose
    UID a cache entry of an absent pod names, one named as a cache entry's pod, one mirrored."""
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    inv = scan.inventory
    ips = sorted({r.ip for r in inv.ip_reservations})
    chains = []
    for c in inv.chains:
        roll = rnd.random()
        if roll < 0.6:
            chains.append(replace(c, jumps=tuple(j.replace("-s ", f"-s {rnd.choice(ips)} -x ") for j in c.jumps)))
        else:
            chains.append(replace(c, jumps=()) if roll < 0.7 else c)
    entries = [replace(e, netns=None) if rnd.random() < 0.1 else e for e in inv.cni_cache]
    held = list(inv.ip_reservations)
    if held:
        held[0] = replace(held[0], container_id="")
    absent = next(e for e in entries if e.pod_uid and e.pod_uid not in {p.uid for p in scan.desired.pods})
    named = next(e for e in entries if e.pod_name)
    manifests = (StaticPodManifest(path="/etc/kubernetes/manifests/a.yaml", namespace="default", name="absent",
                                   uid=absent.pod_uid),
                 StaticPodManifest(path="/etc/kubernetes/manifests/b.yaml", namespace="default",
                                   name=(named.pod_name or "x").removesuffix("-n1")),
                 StaticPodManifest(path="/etc/kubernetes/manifests/c.yaml", namespace="kube-system", name="static"))
    pods = (*scan.desired.pods, Pod(uid="mirror-1", namespace="kube-system", name="static-n1", node_name="n1",
                                    phase="Running", static_uid="hash-1", host_network=True))
    inventory = replace(inv, chains=tuple(chains), cni_cache=tuple(entries), ip_reservations=tuple(held),
                        static_pods=manifests)
    return BigScan(inventory, replace(scan.desired, pods=pods), scan.unread_netns)


class _Counts:
    def __init__(self) -> None:
        self.skipped = 0
        self.bulk = 0


def _checking(counts: _Counts) -> Callable[..., tuple[list[Finding], set[int]]]:
    asked = network._again_at

    def again_at(again: network._Again, earlier: Sequence[Finding], places: set[int],
                 one: Callable[[int], object]) -> tuple[list[Finding], set[int]]:
        findings = again.ctx.findings
        for i in range(len(earlier)):
            if i in places:
                continue
            before = again.taken
            one(i)
            got = findings.pop()
            assert again.taken == before + 1 and got is earlier[i], (
                f"place {i} was not asked again, but its check does not take {earlier[i]}: it makes {got}")
            again.taken = before
            counts.skipped += 1
        counts.bulk += 1
        return asked(again, earlier, places, one)

    return again_at


@settings(max_examples=120, deadline=None)
@given(number=st.integers(0, 5), ops=changes, anew=st.lists(st.booleans(), min_size=10, max_size=10),
       late=st.sampled_from((0.0, 0.0, 0.5, 30.0)))
def test_every_place_not_asked_again_is_one_its_check_takes(number: int, ops: list[tuple[str, int, int, str | None]],
                                                            anew: list[bool], late: float) -> None:
    scan, read, names = _scan(number)
    counts = _Counts()
    memo = Correlations()
    desired, inv = scan.desired, scan.inventory
    when = NOW
    with mock.patch.object(network, "_again_at", _checking(counts)):
        memo.correlate(inv, desired, now=when, policy=_POLICY)
        for step, op in enumerate(ops):
            desired = apply(desired, op, names, step)
            inv = read_anew(inv) if anew[step] else inv
            when += timedelta(seconds=late)
            photo = replace(desired, fetched_at=when)
            found, first = memo.correlate(inv, photo, now=when, policy=_POLICY)
            assert found == correlate(inv, photo, now=when, policy=_POLICY), (step, op)
            second, _ = memo.correlate(read, photo, now=when, policy=_POLICY, previous=first)
            assert second == correlate(read, photo, now=when, policy=_POLICY), (step, op)
    _TOTAL.skipped += counts.skipped
    _TOTAL.bulk += counts.bulk


_TOTAL = _Counts()


def test_the_changes_above_went_through_the_bulk_path() -> None:
    """Run after the property above (pytest keeps a module's order): its checks had places to check."""
    assert _TOTAL.bulk > 50 and _TOTAL.skipped > 10_000, (_TOTAL.bulk, _TOTAL.skipped)


def test_a_pod_starting_is_taken_in_bulk() -> None:
    """The benchmark's change (a pod bound, Pending, no address): every verdict but those reading the
    pods still starting is taken without being asked."""
    scan, _, names = _scan(0)
    counts = _Counts()
    memo = Correlations()
    with mock.patch.object(network, "_again_at", _checking(counts)):
        memo.correlate(scan.inventory, scan.desired, now=NOW, policy=_POLICY)
        desired = apply(scan.desired, ("starting", 1, 1, "Pending"), names, 0)
        found, _ = memo.correlate(scan.inventory, desired, now=NOW, policy=_POLICY)
    assert found == correlate(scan.inventory, desired, now=NOW, policy=_POLICY)
    assert counts.bulk == 5 and counts.skipped > 150, (counts.bulk, counts.skipped)
