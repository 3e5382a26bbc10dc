"""Network verdicts taken from an earlier scan (`planning.network._Again`) against fresh correlations, with the
desired state changed at every scan in the ways the network verdicts read it: a new pod (a new object)
claiming an address a reservation, a cache entry, a namespace or a chain names; a pod's address moved onto
another record's; a pod made terminal still showing such an address; pods starting (no IP) coming and going,
so the "pods still starting" note changes; a pod moved on or off the host network. The records stay the same
(so the network verdicts may be taken again) but for the time, which steps around the minimum age. Whatever
is taken again must be what a correlation from scratch makes, decision by decision."""

from __future__ import annotations

import random
from dataclasses import fields, replace
from datetime import timedelta
from typing import Any

import pytest

from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory
from nodegc.planning import network
from nodegc.planning.context import CorrelationPolicy
from nodegc.planning.correlate import correlate
from nodegc.planning.remembered import Correlations
from tests.unit.bigscan import BigScan, adversarial_scan, big_scan, with_addresses_read
from tests.unit.factories import NOW

_STEPS = (0.0, 0.25, 1.0, 30.0, -1.0)


def _record_ips(inv: Inventory) -> list[str]:
    ips = [r.ip for r in inv.ip_reservations]
    ips += [ip for e in inv.cni_cache for ip in e.ips]
    ips += [a for ns in inv.netns for a in ns.addresses]
    return sorted(set(ips)) or ["10.244.0.2"]


def _change(rnd: random.Random, desired: DesiredState, ips: list[str], n: int) -> DesiredState:
    pods = list(desired.pods)
    roll = rnd.random()
    node = desired.node
    if roll < 0.3 or not pods:
        phase = rnd.choice(("Running", "Running", "Succeeded", "Failed"))
        pods.append(Pod(uid=f"claim-{n}", namespace="default", name=f"claim-{n}", node_name=node, phase=phase,
                        pod_ips=(rnd.choice(ips),), host_network=rnd.random() < 0.1))
    elif roll < 0.45:
        j = rnd.randrange(len(pods))
        pods[j] = replace(pods[j], pod_ips=(rnd.choice(ips),))
    elif roll < 0.55:
        j = rnd.randrange(len(pods))
        pods[j] = replace(pods[j], phase=rnd.choice(("Succeeded", "Failed")))
    elif roll < 0.7:
        pods.append(Pod(uid=f"start-{n}", namespace="default", name=f"start-{n % 4}", node_name=node,
                        phase=rnd.choice(("Pending", None, "Running")), pod_ips=()))
    elif roll < 0.8:
        starting = [i for i, p in enumerate(pods) if p.uid.startswith("start-")]
        if starting:
            del pods[rnd.choice(starting)]
    elif roll < 0.88:
        j = rnd.randrange(len(pods))
        pods[j] = replace(pods[j], host_network=not pods[j].host_network)
    elif roll < 0.95:
        del pods[rnd.randrange(len(pods))]
    # else: the very same pods, a new photograph
    return replace(desired, pods=tuple(pods))


@pytest.mark.parametrize("seed", range(6))
def test_network_verdicts_taken_again_are_fresh_ones(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    taken = {"n": 0}

    def counting(orig: Any) -> Any:
        def counted(self: object, *args: object) -> object:
            found = orig(self, *args)
            taken["n"] += found is not None
            return found
        return counted

    for name in ("reservation", "cache_entry", "netns", "veth", "rule"):
        monkeypatch.setattr(network._Again, name, counting(getattr(network._Again, name)))
    rnd = random.Random(7000 + seed)  # noqa: S311 (a test scenario, not a secret)
    make = adversarial_scan if seed % 2 else big_scan
    scan = make(seed, sandboxes=50, runtime=seed % 3 == 2)
    read = with_addresses_read(scan, seed)
    ips = _record_ips(read)
    memo = Correlations()
    policy = CorrelationPolicy(min_age_seconds=60.0)
    desired = scan.desired
    now = NOW.timestamp()
    for step in range(60):
        now += rnd.choice(_STEPS)
        when = NOW + timedelta(seconds=now - NOW.timestamp())
        desired = _change(rnd, desired, ips, step)
        photo = replace(desired, fetched_at=when - timedelta(seconds=rnd.choice((0.0, 2.0))))
        found, first = memo.correlate(scan.inventory, photo, now=when, policy=policy)
        assert found == correlate(scan.inventory, photo, now=when, policy=policy), step
        again, _ = memo.correlate(read, photo, now=when, policy=policy, previous=first)
        assert again == correlate(read, photo, now=when, policy=policy), step
    assert taken["n"], "no network verdict was taken from an earlier scan: the comparison has no teeth"


def _around(rnd: random.Random, inv: Inventory, threshold: float) -> Inventory:
    """Every record with an age aged to around `threshold` (a few seconds either side, or on it)."""
    changes: dict[str, Any] = {}
    for f in fields(Inventory):
        records = getattr(inv, f.name)
        if isinstance(records, tuple) and records and hasattr(records[0], "mtime"):
            changes[f.name] = tuple(replace(r, mtime=threshold + rnd.choice((-31.0, -1.0, -0.25, 0.0, 0.25, 1.0)))
                                    for r in records)
    return replace(inv, **changes)


def _partly(rnd: random.Random, inv: Inventory, read: Inventory) -> Inventory:
    """`inv` with some of the namespaces `read` read (and their read problems) read already."""
    some = {ns.path for ns in read.netns if rnd.random() < 0.5}
    problems = tuple(p for p in read.problems if p not in inv.problems and p.path in some)
    return replace(inv, netns=tuple(r if r.path in some else ns for ns, r in zip(inv.netns, read.netns, strict=True)),
                   problems=inv.problems + problems)


@pytest.mark.parametrize("seed", range(6))
def test_second_pass_verdicts_taken_again_are_fresh_ones(seed: int) -> None:
    """detect's second pass takes from the scan before's second pass the verdicts its own first pass
    cannot give (on the namespaces whose addresses it read, and on what names them). Here the first pass
    sees the addresses already now and then (nothing changes between its passes: the second takes all
    from the first), now and then some of them, now and then none; the desired state changes; the
    records' ages straddle the minimum age as the clock goes to and fro. A verdict taken again must be the
    fresh one whichever pass made it."""
    rnd = random.Random(9000 + seed)  # noqa: S311 (a test scenario, not a secret)
    make = adversarial_scan if seed % 2 else big_scan
    scan = make(seed, sandboxes=50, runtime=seed % 3 == 2)
    policy = CorrelationPolicy(min_age_seconds=60.0)
    inv = _around(rnd, scan.inventory, NOW.timestamp() - policy.min_age_seconds)
    read = with_addresses_read(BigScan(inv, scan.desired, scan.unread_netns), seed)
    ips = _record_ips(read)
    memo = Correlations()
    desired = scan.desired
    second = 0
    for step in range(80):
        # the clock goes to and fro across the records' ages (stepped back, forward, held)
        when = NOW + timedelta(seconds=rnd.choice((-1.0, -0.25, 0.0, 0.0, 0.25, 0.5, 1.0)))
        desired = _change(rnd, desired, ips, step)
        photo = replace(desired, fetched_at=when - timedelta(seconds=rnd.choice((0.0, 0.5, 2.0))))
        seen = rnd.choice((read, inv, inv, _partly(rnd, inv, read)))
        found, first = memo.correlate(seen, photo, now=when, policy=policy)
        assert found == correlate(seen, photo, now=when, policy=policy), step
        before = memo.reused
        again, _ = memo.correlate(read, photo, now=when, policy=policy, previous=first)
        second += memo.reused - before
        assert again == correlate(read, photo, now=when, policy=policy), step
    assert second, "no second pass took a verdict from an earlier one: the comparison has no teeth"
