"""Correlations that take from earlier ones (`planning.remembered`) against fresh ones, decision by decision,
with everything that moves between scans moving at once: every record read anew each scan (new objects,
equal when the node did not change), now and then one changed; pods listed anew (equal objects, their
creation times in another time zone), added claiming a record's address, made terminal, moved on or off the
host network, re-created under their name with a new UID; records keeping their key while a field
changes, or a second record of one key; the first pass seeing the namespaces' addresses
now and then, the second pass reading all or some of them, or not run at all (nothing to read), or run
without the first (the first was taken whole); the clock stepping to and fro across the minimum age;
the settle time and the minimum age moved."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, timedelta, timezone

import pytest

from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory
from nodegc.planning.context import CorrelationPolicy
from nodegc.planning.correlate import correlate
from nodegc.planning.remembered import Correlations
from tests.adversarial.found10.test_remembered_differential import _change as _change_records
from tests.adversarial.found11.test_network_verdicts_again import _around, _change, _partly, _record_ips
from tests.adversarial.found13_perf.test_records_read_anew import read_anew
from tests.unit.bigscan import BigScan, adversarial_scan, big_scan, with_addresses_read
from tests.unit.factories import NOW

_ZONE = timezone(timedelta(hours=2))


def _listed_anew(rnd: random.Random, desired: DesiredState) -> DesiredState:
    """Every pod a new object equal to the one before (its creation time, if any, in another zone)."""
    pods: list[Pod] = []
    for p in desired.pods:
        born = p.created_at.astimezone(_ZONE if rnd.random() < 0.5 else UTC) if p.created_at else None
        pods.append(replace(p, created_at=born))
    return replace(desired, pods=tuple(pods))


def _same_key(rnd: random.Random, inv: Inventory, ips: list[str]) -> Inventory:
    """A record that keeps its key (path, container id, netns name) while a field a verdict reads changes,
    or a second record of the same key."""
    roll = rnd.random()
    if roll < 0.35 and inv.cni_cache:
        entries = list(inv.cni_cache)
        i = rnd.randrange(len(entries))
        e = entries[i]
        other = rnd.choice(entries)
        changed = rnd.choice((replace(e, ips=(rnd.choice(ips),)), replace(e, netns=other.netns),
                              replace(e, pod_uid=other.pod_uid), replace(e, pod_uid=None)))
        if rnd.random() < 0.4:
            entries.insert(rnd.randrange(len(entries) + 1), changed)  # two entries of one path
        else:
            entries[i] = changed
        return replace(inv, cni_cache=tuple(entries))
    if roll < 0.7 and inv.netns:
        spaces = list(inv.netns)
        i = rnd.randrange(len(spaces))
        ns = spaces[i]
        changed_ns = rnd.choice((replace(ns, mounted=not ns.mounted), replace(ns, addresses=(rnd.choice(ips),),
                                                                             addresses_read=True)))
        if rnd.random() < 0.3:
            spaces.insert(rnd.randrange(len(spaces) + 1), changed_ns)  # two records of one key
        else:
            spaces[i] = changed_ns
        return replace(inv, netns=tuple(spaces))
    if inv.ip_reservations:
        held = list(inv.ip_reservations)
        i = rnd.randrange(len(held))
        held[i] = replace(held[i], container_id=rnd.choice((rnd.choice(held).container_id, None)))
        return replace(inv, ip_reservations=tuple(held))
    return inv


def _born(rnd: random.Random, desired: DesiredState) -> DesiredState:
    pods = list(desired.pods)
    j = rnd.randrange(len(pods))
    pods[j] = replace(pods[j], created_at=NOW - timedelta(seconds=rnd.choice((5.0, 59.0, 61.0, 600.0))))
    return replace(desired, pods=tuple(pods))


@pytest.mark.parametrize("seed", range(8))
def test_everything_moving_at_once(seed: int) -> None:
    rnd = random.Random(13_000 + seed)  # noqa: S311 (a test scenario, not a secret)
    make = adversarial_scan if seed % 2 else big_scan
    scan = make(seed, sandboxes=50, runtime=seed % 3 == 2)
    policy = CorrelationPolicy(min_age_seconds=60.0)
    base = _around(rnd, scan.inventory, NOW.timestamp() - policy.min_age_seconds)
    ips = _record_ips(with_addresses_read(BigScan(base, scan.desired, scan.unread_netns), seed))
    memo = Correlations()
    inv, desired = base, scan.desired
    counts = {"taken": 0, "seconds": 0}
    for step in range(70):
        when = NOW + timedelta(seconds=rnd.choice((-1.0, -0.25, 0.0, 0.0, 0.25, 0.5, 1.0, 30.0)))
        roll = rnd.random()
        if roll < 0.5:
            desired = _change(rnd, desired, ips, step)
        elif roll < 0.65:
            inv, desired = _change_records(rnd, inv, desired, base, now=when.timestamp(),
                                           min_age=policy.min_age_seconds)
        elif roll < 0.75:
            desired = _born(rnd, desired)
        elif roll < 0.85:
            inv = _same_key(rnd, inv, ips)
        if rnd.random() < 0.7:
            desired = _listed_anew(rnd, desired)
        if step % 11 == 10:  # the settle time and the minimum age moved (a new configuration)
            policy = replace(policy, add_settle_seconds=rnd.choice((0.0, 30.0, 90.0)),
                             min_age_seconds=rnd.choice((60.0, 60.0, 60.5)))
        inv = read_anew(inv)
        read = with_addresses_read(BigScan(inv, desired, scan.unread_netns), seed + step % 3)
        photo = replace(desired, fetched_at=when - timedelta(seconds=rnd.choice((0.0, 0.5, 2.0))))
        seen = rnd.choice((read, inv, inv, _partly(rnd, inv, read)))
        before = memo.reused + memo.taken_again
        found, first = memo.correlate(seen, photo, now=when, policy=policy)
        assert found == correlate(seen, photo, now=when, policy=policy), step
        way = rnd.random()
        if way < 0.15:
            continue  # nothing to read: no second pass
        second = read if way < 0.7 else _partly(rnd, seen, read)
        again, _ = memo.correlate(second, photo, now=when, policy=policy, previous=first if way < 0.9 else None)
        assert again == correlate(second, photo, now=when, policy=policy), step
        counts["taken"] += memo.reused + memo.taken_again - before
        counts["seconds"] += 1
    assert counts["taken"], "nothing was taken from an earlier correlation: the comparison has no teeth"
