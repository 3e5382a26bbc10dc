"""The runtime's view changing (sandboxes born around the horizon, READY <-> NotReady, gone, leftovers
aging) while the pods do not, or do, with every record and every pod read anew at each scan (new objects,
equal when nothing changed): whatever the reuse answers, detect's second pass included, is fresh."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest

from nodegc.planning.context import CorrelationPolicy
from nodegc.planning.correlate import correlate
from nodegc.planning.remembered import Correlations
from tests.adversarial.found10.test_remembered_differential import (
    _READ_LAGS,
    _STEPS,
    _aged,
    _change,
    _change_view,
    _sandbox_aged,
    _with_leftovers,
)
from tests.adversarial.found13_perf.test_records_read_anew import read_anew
from tests.adversarial.found13_perf.test_reuse_mixed import _listed_anew
from tests.unit.bigscan import BigScan, big_scan, with_addresses_read
from tests.unit.factories import NOW, OLD


@pytest.mark.parametrize("seed", range(4))
def test_runtime_view_moving_with_records_read_anew(seed: int) -> None:
    rnd = random.Random(13_100 + seed)  # noqa: S311 (a test scenario, not a secret)
    scan = big_scan(seed, sandboxes=50, runtime=True)
    assert scan.inventory.runtime is not None
    base_view = _with_leftovers(_sandbox_aged(scan.inventory.runtime), rnd)
    base = replace(_aged(scan.inventory, OLD), runtime=base_view)
    memo = Correlations()
    policy = CorrelationPolicy(min_age_seconds=60.0)
    inv, desired = base, scan.desired
    now = NOW.timestamp()
    for step in range(60):
        now += rnd.choice(_STEPS)
        if rnd.random() < 0.4:
            inv, desired = _change(rnd, inv, desired, base, now=now, min_age=policy.min_age_seconds)
        read_lag = rnd.choice(_READ_LAGS)
        read = None if read_lag is None else now - read_lag
        view = inv.runtime
        assert view is not None
        view = _change_view(rnd, view, base_view, desired,
                            horizon=(now if read is None else read) - policy.min_age_seconds)
        view = replace(view, read_at=None if read is None else NOW + timedelta(seconds=read - NOW.timestamp()),
                       sandboxes=tuple(replace(sb) for sb in view.sandboxes),
                       leftovers=tuple(replace(left) for left in view.leftovers))
        inv = read_anew(replace(inv, runtime=view))
        desired = _listed_anew(rnd, desired)
        when = NOW + timedelta(seconds=now - NOW.timestamp())
        photo = replace(desired, fetched_at=when - timedelta(seconds=rnd.choice((0.0, 2.0))))
        found, first = memo.correlate(inv, photo, now=when, policy=policy)
        assert found == correlate(inv, photo, now=when, policy=policy), step
        second = with_addresses_read(BigScan(inv, photo, scan.unread_netns), seed + step % 2)
        again, _ = memo.correlate(second, photo, now=when, policy=policy, previous=first)
        assert again == correlate(second, photo, now=when, policy=policy), step
