"""Correlations taken again (`planning.remembered`, `Context.Earlier`, `planning.network._Again`) against fresh
ones, on inputs the earlier differential tests do not make: static pod manifests whose mirror pods come and
go, change their creation time and the config hash they carry (the UID of a pod directory or a cache entry),
manifests edited (their uid, on or off the host network), pod directories aging around the minimum age
with container names that fit a manifest or not; and records that share a key: two cache entries of one
path (another container id, UID or address), two netns records of one path, one pod UID twice in the
desired state (another phase or address), the very same pod object twice, the pods reordered. Whatever is
taken again must be what a correlation from scratch makes, decision by decision (found sound)."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest

from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory, StaticPodManifest
from nodegc.planning.context import CorrelationPolicy
from nodegc.planning.correlate import correlate
from nodegc.planning.remembered import Correlations
from tests.unit.bigscan import BigScan, adversarial_scan, with_addresses_read
from tests.unit.factories import NOW

_STEPS = (0.0, 0.0, 0.5, 30.0, 59.0, -1.0)
_LAGS = (0, 0, 5, 70)


def _check(memo: Correlations, scan: BigScan, inv: Inventory, desired: DesiredState, *, now: float,
           rnd: random.Random, seed: int) -> None:
    when = NOW + timedelta(seconds=now - NOW.timestamp())
    photo = replace(desired, fetched_at=when - timedelta(seconds=rnd.choice(_LAGS)))
    policy = CorrelationPolicy(min_age_seconds=60.0)
    found, first = memo.correlate(inv, photo, now=when, policy=policy)
    assert found == correlate(inv, photo, now=when, policy=policy), now
    read = with_addresses_read(BigScan(inv, photo, scan.unread_netns), seed)
    again, _ = memo.correlate(read, photo, now=when, policy=policy, previous=first)
    assert again == correlate(read, photo, now=when, policy=policy), now


def _static_change(rnd: random.Random, inv: Inventory, pods: list[Pod], *, manifests: list[StaticPodManifest],
                   uids: list[str], now: float, step: int) -> Inventory:
    when = NOW + timedelta(seconds=now - NOW.timestamp())
    roll = rnd.random()
    mirrors = [i for i, p in enumerate(pods) if p.static_uid]
    if roll < 0.2:  # a mirror pod of a manifest, carrying a config hash the node knows
        m = rnd.choice(manifests)
        pods.append(Pod(uid=f"mirror-{step}", namespace=m.namespace or "default", name=f"{m.name}-n1",
                        node_name="n1", phase=rnd.choice(("Running", "Pending", "Succeeded")),
                        created_at=when - timedelta(seconds=rnd.choice((0, 100, 5000))), static_uid=rnd.choice(uids)))
    elif roll < 0.35 and mirrors:
        del pods[rnd.choice(mirrors)]
    elif roll < 0.5 and mirrors:
        j = rnd.choice(mirrors)
        pods[j] = replace(pods[j], created_at=when - timedelta(seconds=rnd.choice((0, 100, 5000, 10800))),
                          static_uid=rnd.choice(uids))
    elif roll < 0.6:
        j = rnd.randrange(len(pods))
        pods[j] = (replace(pods[j], uid=pods[j].uid + "x") if rnd.random() < 0.5
                   else replace(pods[j], phase=rnd.choice(("Running", "Failed", None))))
    elif roll < 0.7:
        i = rnd.randrange(len(manifests))
        manifests[i] = replace(manifests[i], uid=rnd.choice((None, rnd.choice(uids))),
                               host_network=not manifests[i].host_network)
        return replace(inv, static_pods=tuple(manifests))
    elif roll < 0.8:
        dirs = list(inv.pod_dirs)
        j = rnd.randrange(len(dirs))
        dirs[j] = replace(dirs[j], mtime=now - rnd.choice((0, 59, 61, 3000)),
                          container_names=rnd.choice(((), ("app",), ("other",))))
        return replace(inv, pod_dirs=tuple(dirs))
    return inv


@pytest.mark.parametrize("seed", range(3))
def test_static_pods_and_their_mirrors_changing(seed: int) -> None:
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    scan = adversarial_scan(seed, sandboxes=40, runtime=seed % 2 == 0)
    inv, desired = scan.inventory, scan.desired
    uids = [d.uid for d in inv.pod_dirs] + [c.pod_uid for c in inv.cni_cache if c.pod_uid]
    names = [(c.pod_namespace, c.pod_name) for c in inv.cni_cache if c.pod_name]
    manifests = []
    for i in range(4):
        namespace, name = rnd.choice(names)
        manifests.append(StaticPodManifest(path=f"/etc/kubernetes/manifests/m{i}.yaml", namespace=namespace,
                                           name=(name or "x").rsplit("-", 1)[0],
                                           uid=rnd.choice((None, rnd.choice(uids))), containers=("app",),
                                           host_network=rnd.random() < 0.5))
    inv = replace(inv, static_pods=tuple(manifests))
    memo = Correlations()
    now = NOW.timestamp()
    for step in range(80):
        now += rnd.choice(_STEPS)
        pods = list(desired.pods)
        inv = _static_change(rnd, inv, pods, manifests=manifests, uids=uids, now=now, step=step)
        desired = replace(desired, pods=tuple(pods))
        _check(memo, scan, inv, desired, now=now, rnd=rnd, seed=seed)
    assert memo.taken_again and memo.reused  # both ways were taken: the comparison has teeth


@pytest.mark.parametrize("seed", range(3))
def test_records_and_pods_that_share_a_key(seed: int) -> None:
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    scan = adversarial_scan(seed, sandboxes=40, runtime=seed % 2 == 0)
    inv, desired = scan.inventory, scan.desired
    caches = list(inv.cni_cache)
    for e in caches[:10]:
        if rnd.random() < 0.5:  # another record of the same path
            caches.insert(rnd.randrange(len(caches) + 1), replace(
                e, container_id="f" + e.container_id[1:], pod_uid=rnd.choice((None, e.pod_uid, "zz")),
                ips=(rnd.choice(("10.244.0.9", e.ips[0] if e.ips else "10.1.1.1")),)))
    nss = list(inv.netns)
    for ns in nss[:10]:
        if rnd.random() < 0.4:  # another record of the same path
            nss.append(replace(ns, mounted=not ns.mounted, addresses=("10.244.0.3",), addresses_read=True))
    inv = replace(inv, cni_cache=tuple(caches), netns=tuple(nss))
    pods = list(desired.pods)
    for p in pods[:10]:
        if rnd.random() < 0.3:  # the same UID twice
            pods.append(replace(p, phase=rnd.choice(("Succeeded", "Pending", "Running")), pod_ips=("10.244.0.9",)))
    base = list(pods)
    desired = replace(desired, pods=tuple(pods))
    memo = Correlations()
    now = NOW.timestamp()
    for _ in range(80):
        now += rnd.choice(_STEPS)
        pods = list(desired.pods)
        roll = rnd.random()
        if roll < 0.3:
            j = rnd.randrange(len(pods))
            pods[j] = replace(pods[j], phase=rnd.choice(("Running", "Failed", None, "Pending")),
                              pod_ips=rnd.choice(((), ("10.244.0.9",), ("10.244.0.3",), pods[j].pod_ips)))
        elif roll < 0.4:
            pods.append(rnd.choice(pods))  # the very same object twice
        elif roll < 0.5 and len(pods) > 5:
            del pods[rnd.randrange(len(pods))]
        elif roll < 0.6:
            pods = list(base)
        elif roll < 0.7:
            rnd.shuffle(pods)
        desired = replace(desired, pods=tuple(pods))
        _check(memo, scan, inv, desired, now=now, rnd=rnd, seed=seed)
    assert memo.taken_again and memo.reused
