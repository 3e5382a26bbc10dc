"""Correlations taken again (`planning.remembered`) against correlations from scratch, decision by decision.

A node scanned again and again, as the agent does, with random small changes between scans (one record's
age moved near the minimum age, a record gone or back, a file re-created under the same name with another
inode, a namespace replaced under the same path, a pod's phase or address changed, a pod gone), random time
steps (none, sub-second, the scan interval, a wall clock stepped back, a photograph from the future) and
detect's two passes: whatever the memo answers is what a correlation from scratch makes.
"""

from __future__ import annotations

import random
from dataclasses import fields, replace
from datetime import timedelta
from typing import Any

import pytest

from nodegc.model.pods import DesiredState
from nodegc.model.resources import Inventory
from nodegc.planning.context import CorrelationPolicy
from nodegc.planning.correlate import correlate
from nodegc.planning.remembered import Correlations
from tests.unit.bigscan import BigScan, big_scan, with_addresses_read
from tests.unit.factories import NOW, OLD

_STEPS = (0.0, 0.0, 0.0, 0.0, 0.25, 1.0, 30.0, 30.0, 30.0, -1.0, -30.0, 59.5)
_LAGS = (0.0, 0.5, 2.0, 2.0, 45.0, -3.0)


def _records(inv: Inventory) -> list[str]:
    return [f.name for f in fields(Inventory)
            if isinstance(getattr(inv, f.name), tuple) and getattr(inv, f.name)
            and hasattr(getattr(inv, f.name)[0], "mtime")]


def _aged(inv: Inventory, mtime: float) -> Inventory:
    changes: dict[str, Any] = {name: tuple(replace(r, mtime=mtime) for r in getattr(inv, name))
                               for name in _records(inv)}
    return replace(inv, **changes)


def _change(rnd: random.Random, inv: Inventory, desired: DesiredState, base: Inventory, *, now: float,
            min_age: float) -> tuple[Inventory, DesiredState]:
    """One small random change of a quiet node (or none)."""
    roll = rnd.random()
    if roll < 0.35:
        return inv, desired
    names = _records(inv)
    name = rnd.choice(names)
    records = list(getattr(inv, name))
    i = rnd.randrange(len(records))
    r = records[i]
    if roll < 0.55:  # an age moved to around the threshold
        records[i] = replace(r, mtime=now - min_age + rnd.choice((-31.0, -1.0, -0.25, 0.0, 0.25, 1.0, 29.0)))
    elif roll < 0.62:  # gone
        del records[i]
    elif roll < 0.68:  # back as the base scan had it
        return replace(inv, **{name: getattr(base, name)}), desired
    elif roll < 0.76 and hasattr(r, "inode"):  # re-created under the same name: another inode
        records[i] = replace(r, inode=r.inode + 1_000_000)
    elif roll < 0.82 and name == "netns":  # another namespace bind-mounted at the same path
        records[i] = replace(r, ns_inode=(r.ns_inode or 0) + 7, file_inode=(r.file_inode or 0) + 7)
    else:
        pods = list(desired.pods)
        j = rnd.randrange(len(pods))
        choice = rnd.random()
        if choice < 0.4:
            pods[j] = replace(pods[j], phase=rnd.choice(("Running", "Pending", "Succeeded", "Failed", None)))
        elif choice < 0.7:
            pods[j] = replace(pods[j], pod_ips=("10.244.9.9",))
        else:
            del pods[j]
        return inv, replace(desired, pods=tuple(pods))
    return replace(inv, **{name: tuple(records)}), desired  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(4))
def test_a_remembered_correlation_is_a_fresh_one_decision_by_decision(seed: int) -> None:
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    scan = big_scan(seed, sandboxes=60, runtime=seed % 2 == 1)
    base = _aged(scan.inventory, OLD)
    memo = Correlations()
    policy = CorrelationPolicy(min_age_seconds=60.0)
    inv, desired = base, scan.desired
    now = NOW.timestamp()
    taken = made = 0
    lag = 0.0
    for step in range(60):
        now += rnd.choice(_STEPS)
        when = NOW + timedelta(seconds=now - NOW.timestamp())
        inv, desired = _change(rnd, inv, desired, base, now=now, min_age=policy.min_age_seconds)
        lag = lag if rnd.random() < 0.5 else rnd.choice(_LAGS)  # a photograph kept (a proof, a snapshot)
        photo = replace(desired, fetched_at=when - timedelta(seconds=lag))
        if step % 17 == 16:
            policy = replace(policy, min_age_seconds=policy.min_age_seconds + rnd.choice((0.0, 0.5)))
        before = memo.taken_again
        found, first = memo.correlate(inv, photo, now=when, policy=policy)
        assert found == correlate(inv, photo, now=when, policy=policy), step
        read = with_addresses_read(BigScan(inv, photo, scan.unread_netns), seed)
        again, _ = memo.correlate(read, photo, now=when, policy=policy, previous=first)
        assert again == correlate(read, photo, now=when, policy=policy), step
        taken += memo.taken_again - before
        made += 2 - (memo.taken_again - before)
    assert taken and made  # both paths were taken: the comparison has teeth
