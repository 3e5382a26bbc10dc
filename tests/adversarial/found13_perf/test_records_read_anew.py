"""Correlations that take from an earlier one (`planning.remembered`) against fresh ones, when every scan
reads its records anew, as the scanner does: each record is a new object, equal by value to the one
before when nothing on the node changed. The reuse may take what depends on the records alone (the cache
index) when they are equal; whatever it then answers, detect's second pass included, is what a correlation
from scratch makes."""

from __future__ import annotations

import random
from dataclasses import fields, replace
from datetime import timedelta
from typing import Any

import pytest

from nodegc.model.resources import Inventory
from nodegc.planning.context import CorrelationPolicy
from nodegc.planning.correlate import correlate
from nodegc.planning.remembered import Correlations
from tests.adversarial.found10.test_remembered_differential import _STEPS, _aged, _change
from tests.unit.bigscan import BigScan, adversarial_scan, big_scan, with_addresses_read
from tests.unit.factories import NOW, OLD


def read_anew(inv: Inventory) -> Inventory:
    """The same node read again: every record a new object equal to the one before."""
    changes: dict[str, Any] = {}
    for f in fields(Inventory):
        records = getattr(inv, f.name)
        if isinstance(records, tuple) and records and hasattr(records[0], "__dataclass_fields__"):
            changes[f.name] = tuple(replace(r) for r in records)
    return replace(inv, **changes)


@pytest.mark.parametrize("seed", range(6))
def test_records_read_anew_every_scan(seed: int) -> None:
    rnd = random.Random(1300 + seed)  # noqa: S311 (a test scenario, not a secret)
    make = adversarial_scan if seed % 2 else big_scan
    scan = make(seed, sandboxes=60, runtime=seed % 3 == 2)
    base = _aged(scan.inventory, OLD)
    memo = Correlations()
    policy = CorrelationPolicy(min_age_seconds=60.0)
    inv, desired = base, scan.desired
    now = NOW.timestamp()
    for step in range(40):
        now += rnd.choice(_STEPS)
        when = NOW + timedelta(seconds=now - NOW.timestamp())
        inv, desired = _change(rnd, inv, desired, base, now=now, min_age=policy.min_age_seconds)
        inv = read_anew(inv)
        photo = replace(desired, fetched_at=when)
        found, first = memo.correlate(inv, photo, now=when, policy=policy)
        assert found == correlate(inv, photo, now=when, policy=policy), step
        read = with_addresses_read(BigScan(inv, photo, scan.unread_netns), seed + step)
        again, _ = memo.correlate(read, photo, now=when, policy=policy, previous=first)
        assert again == correlate(read, photo, now=when, policy=policy), step
