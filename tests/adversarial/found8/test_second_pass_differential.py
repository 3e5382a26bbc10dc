"""Detect's second correlation takes the first's verdicts but where a namespace lookup changed. Attack: the
namespaces read in between hold what makes ANOTHER record's verdict change (an address of another sandbox's
cache entry, of a reservation, of a live or a re-created pod, several at once, a read that failed), on
random generated scans with namespaces named by two sandboxes or found under two keys. The reuse must give
the findings of a correlation from scratch, every time, round after round."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from nodegc.model.resources import Inventory, Kind, ReadProblem
from nodegc.planning.correlate import CorrelationPolicy, correlate, correlation
from tests.unit.bigscan import BigScan, adversarial_scan
from tests.unit.factories import NOW


def _read(scan: BigScan, inventory: Inventory, rnd: random.Random, share: float) -> Inventory:
    """Some of the mounted namespaces not read yet, read now, each holding addresses drawn from anywhere
    on the node: its own entries', another entry's, a reservation's, a pod's status, nobody's."""
    pool_cache = [ip for c in inventory.cni_cache for ip in c.ips]
    pool_res = [r.ip for r in inventory.ip_reservations]
    pool_pods = [ip for p in scan.desired.pods for ip in p.pod_ips]
    own: dict[str, tuple[str, ...]] = {}
    for c in inventory.cni_cache:
        if c.netns:
            own.setdefault(c.netns.replace("/var/run/", "/run/").rsplit("/", 1)[-1], c.ips)
    netns = []
    problems = list(inventory.problems)
    for ns in inventory.netns:
        if not ns.mounted or ns.addresses_read or rnd.random() > share:
            netns.append(ns)
            continue
        roll = rnd.random()
        if roll < 0.1:
            problems.append(ReadProblem(Kind.NETNS, ns.path, "cannot read addresses: gone"))
            netns.append(ns)
            continue
        choices: list[str] = []
        for _ in range(rnd.choice((0, 1, 1, 2, 3))):
            pool = rnd.choice((pool_cache, pool_res, pool_pods, list(own.get(ns.name, ())), ["192.168.99.1"]))
            if pool:
                choices.append(rnd.choice(pool))
        netns.append(replace(ns, addresses=tuple(dict.fromkeys(choices)), addresses_read=True))
    return replace(inventory, netns=tuple(netns), problems=tuple(problems))


@pytest.mark.parametrize("seed", range(40))
def test_second_pass_reuse_equals_a_fresh_correlation_on_random_reads(seed: int) -> None:
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    scan = adversarial_scan(seed, sandboxes=rnd.choice((20, 60, 120)), runtime=bool(seed % 2))
    policy = CorrelationPolicy(min_age_seconds=rnd.choice((0, 60)))
    previous = correlation(scan.inventory, scan.desired, now=NOW, policy=policy)
    inventory = scan.inventory
    for _ in range(3):
        inventory = _read(scan, inventory, rnd, share=rnd.choice((0.1, 0.5, 1.0)))
        again = correlation(inventory, scan.desired, now=NOW, policy=policy, previous=previous)
        assert again.findings == correlate(inventory, scan.desired, now=NOW, policy=policy)
        previous = again
