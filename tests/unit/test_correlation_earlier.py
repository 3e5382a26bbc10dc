"""Verdicts taken from an earlier scan's correlation (`planning.context.Earlier`) against correlations from
scratch, decision by decision.

A node scanned again and again, as the agent does, where the desired state changes at almost every scan
(a pod added with a new UID: pending without an IP, running with another pod's IP, under the name a
name-only cache entry gives, under the UID of a pod directory or cache entry of the node; a pod gone, its
phase or address changed, re-created under its name with a new UID, a static pod's mirror added; one pod
or every pod listed as a new object equal to the one before; the pods listed in another order), the
records change now and then (an age moved near the minimum age, a record gone, a static pod manifest
added or made unreadable, every record of a kind read again as new equal objects), the time steps
randomly (none, sub-second, the scan interval, stepped back, a photograph from the future), the first pass
sees the namespaces' addresses now and then, and detect's two passes run, the second seeing the same
addresses as the scan before or others: whatever the reuse answers is what a correlation from scratch
makes.
"""

from __future__ import annotations

import random
from dataclasses import fields, replace
from datetime import timedelta
from typing import Any

import pytest

from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory, StaticPodManifest
from nodegc.planning.context import CorrelationPolicy
from nodegc.planning.correlate import correlate
from nodegc.planning.remembered import Correlations
from tests.unit.bigscan import BigScan, adversarial_scan, big_scan, with_addresses_read
from tests.unit.factories import NOW, OLD

_STEPS = (0.0, 0.0, 0.25, 1.0, 30.0, 30.0, 30.0, -1.0, -30.0, 59.5)
_LAGS = (0.0, 0.5, 2.0, 2.0, 45.0, -3.0)


def _records(inv: Inventory) -> list[str]:
    return [f.name for f in fields(Inventory)
            if isinstance(getattr(inv, f.name), tuple) and getattr(inv, f.name)
            and hasattr(getattr(inv, f.name)[0], "mtime")]


def _aged(inv: Inventory, mtime: float) -> Inventory:
    changes: dict[str, Any] = {name: tuple(replace(r, mtime=mtime) for r in getattr(inv, name))
                               for name in _records(inv)}
    return replace(inv, **changes)


def _new_pod(rnd: random.Random, inv: Inventory, pods: list[Pod], n: int) -> Pod:
    like = rnd.choice(pods)
    roll = rnd.random()
    uid, name = f"new-{n}", f"new-{n}"
    phase: str | None = rnd.choice(("Running", "Running", "Pending", "Succeeded", "Failed", None))
    ips: tuple[str, ...] = ()
    if roll < 0.3:
        ips = like.pod_ips  # another pod's address
    elif roll < 0.45:
        # an address a namespace holds that no cache entry lists (`with_addresses_read`), or any sandbox's
        ips = (rnd.choice(("192.168.99.1", f"10.244.0.{rnd.randrange(2, 70)}")),)
    elif roll < 0.6 and inv.pod_dirs:  # a pod directory's UID
        uid = rnd.choice(inv.pod_dirs).uid
    elif roll < 0.75 and inv.cni_cache:  # a cache entry's pod, by UID or by name
        entry = rnd.choice(inv.cni_cache)
        uid = entry.pod_uid or uid
        name = entry.pod_name or name
        ips = entry.ips if rnd.random() < 0.5 else ips
        return Pod(uid=uid, namespace=entry.pod_namespace or "default", name=name, node_name=like.node_name,
                   phase=phase, pod_ips=ips, host_network=rnd.random() < 0.1, created_at=like.created_at)
    elif roll < 0.85:  # a static pod's mirror
        return replace(like, uid=uid, name=f"static-{n % 3}-{like.node_name}", phase="Running",
                       static_uid=rnd.choice(inv.pod_dirs).uid if inv.pod_dirs else None)
    return Pod(uid=uid, namespace=like.namespace, name=name, node_name=like.node_name, phase=phase, pod_ips=ips,
               host_network=rnd.random() < 0.1, created_at=like.created_at)


def _change_pods(rnd: random.Random, inv: Inventory, desired: DesiredState, n: int) -> DesiredState:
    pods = list(desired.pods)
    roll = rnd.random()
    if roll < 0.5 or not pods:
        pods.append(_new_pod(rnd, inv, pods or [Pod("x", "default", "x", desired.node, "Running")], n))
    elif roll < 0.6:
        del pods[rnd.randrange(len(pods))]
    elif roll < 0.7:
        j = rnd.randrange(len(pods))
        pods[j] = replace(pods[j], phase=rnd.choice(("Running", "Pending", "Succeeded", "Failed", None)))
    elif roll < 0.8:
        j = rnd.randrange(len(pods))
        pods[j] = replace(pods[j], pod_ips=rnd.choice(((), ("10.244.9.9",), pods[rnd.randrange(len(pods))].pod_ips)))
    elif roll < 0.83:
        j = rnd.randrange(len(pods))
        pods[j] = replace(pods[j])  # the same pod, another object
    elif roll < 0.86:
        pods = [replace(p) for p in pods]  # a source that makes every pod anew (a list, a snapshot parsed again)
    elif roll < 0.89:
        j = rnd.randrange(len(pods))  # re-created under its name with a new UID (a StatefulSet's pod)
        pods[j] = replace(pods[j], uid=f"again-{n}", phase=rnd.choice(("Running", "Pending", None)))
    elif roll < 0.91:
        rnd.shuffle(pods)  # the same pods listed in another order
    elif roll < 0.93 and len(pods) > 1:
        i, j = rnd.sample(range(len(pods)), 2)
        pods[i], pods[j] = pods[j], pods[i]
    # else: the same pods, a new photograph
    return replace(desired, pods=tuple(pods))


def _change_records(rnd: random.Random, inv: Inventory, base: Inventory, *, now: float, min_age: float) -> Inventory:
    roll = rnd.random()
    if roll < 0.6:
        return inv
    if roll < 0.7:
        manifests = list(inv.static_pods)
        k = rnd.randrange(3)
        manifests.append(rnd.choice((
            StaticPodManifest(f"/etc/kubernetes/manifests/s{k}.yaml", "default", f"static-{k}",
                              containers=("app",), host_network=rnd.random() < 0.5),
            StaticPodManifest(f"/etc/kubernetes/manifests/s{k}.yaml", None, None),
            StaticPodManifest(f"/etc/kubernetes/manifests/u{k}.yaml", "default", f"u{k}",
                              uid=rnd.choice(inv.pod_dirs).uid if inv.pod_dirs else None))))
        return replace(inv, static_pods=tuple(manifests))
    if roll < 0.75:
        return replace(inv, static_pods=())
    name = rnd.choice(_records(inv))
    if roll < 0.8:  # every record of a kind read again as a new object equal to the one before
        again: dict[str, Any] = {name: tuple(replace(r) for r in getattr(inv, name))}
        return replace(inv, **again)
    records = list(getattr(inv, name))
    i = rnd.randrange(len(records))
    if roll < 0.88:
        records[i] = replace(records[i], mtime=now - min_age + rnd.choice((-31.0, -1.0, -0.25, 0.0, 0.25, 1.0, 29.0)))
    elif roll < 0.95:
        del records[i]
    else:
        return replace(inv, **{name: getattr(base, name)})
    changes: dict[str, Any] = {name: tuple(records)}
    return replace(inv, **changes)


@pytest.mark.parametrize("seed", range(6))
def test_verdicts_taken_from_an_earlier_scan_are_fresh_ones_decision_by_decision(seed: int) -> None:
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    make = adversarial_scan if seed % 3 == 2 else big_scan
    scan = make(seed, sandboxes=60, runtime=seed % 2 == 1)
    base = _aged(scan.inventory, OLD)
    memo = Correlations()
    policy = CorrelationPolicy(min_age_seconds=60.0)
    inv, desired = base, scan.desired
    now = NOW.timestamp()
    lag = 0.0
    read_first = False
    reading, second = seed, 0
    for step in range(70):
        now += rnd.choice(_STEPS)
        when = NOW + timedelta(seconds=now - NOW.timestamp())
        inv = _change_records(rnd, inv, base, now=now, min_age=policy.min_age_seconds)
        desired = _change_pods(rnd, inv, desired, step)
        lag = lag if rnd.random() < 0.5 else rnd.choice(_LAGS)
        photo = replace(desired, fetched_at=when - timedelta(seconds=lag))
        if step % 23 == 22:
            policy = replace(policy, min_age_seconds=policy.min_age_seconds + rnd.choice((0.0, 0.5)))
        # now and then a first pass that sees the namespaces' addresses (one that read them already)
        read_first = read_first if rnd.random() < 0.85 else not read_first
        seen = with_addresses_read(BigScan(inv, photo, scan.unread_netns), seed) if read_first else inv
        found, first = memo.correlate(seen, photo, now=when, policy=policy)
        assert found == correlate(seen, photo, now=when, policy=policy), step
        # the namespaces read hold what they held at the scan before (an earlier second pass's records),
        # or something else
        reading = reading if rnd.random() < 0.7 else seed + step
        read = with_addresses_read(BigScan(inv, photo, scan.unread_netns), reading)
        before = memo.reused
        again, _ = memo.correlate(read, photo, now=when, policy=policy, previous=first)
        second += memo.reused - before
        assert again == correlate(read, photo, now=when, policy=policy), step
    assert memo.reused, "no verdict was taken from an earlier scan: the comparison has no teeth"
    assert second, "no second pass took a verdict from an earlier one: the comparison has no teeth"
