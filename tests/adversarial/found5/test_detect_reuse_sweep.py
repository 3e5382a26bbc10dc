"""Adversarial sweep: detect's second correlation, which takes from the first what the namespaces' addresses
cannot change (pod and cache indexes, cache owners, the kubelet domain's findings, reservations, chains and
hostport rules), decides exactly what a correlation from scratch decides, on many small generated scans:
with namespaces under containerd's state dir as well as /run/netns, with and without the runtime's word, and
with sandboxes the runtime gave up on (a policy the second pass must not take from another correlation)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from nodegc.planning.correlate import CorrelationPolicy, correlate, correlation
from tests.unit.bigscan import BigScan, big_scan, with_addresses_read
from tests.unit.factories import NOW

STATE_NETNS = "/run/containerd/io.containerd.grpc.v1.cri/netns/"


def _with_state_dir_netns(scan: BigScan) -> BigScan:
    """Every other namespace file under containerd's state dir instead of /run/netns."""
    netns = tuple(replace(n, runtime_dir=True, path=n.path.replace("/run/netns/", STATE_NETNS)) if i % 2 else n
                  for i, n in enumerate(scan.inventory.netns))
    inventory = replace(scan.inventory, netns=netns)
    return replace(scan, inventory=inventory,
                   unread_netns=tuple(n.path for n in netns if n.mounted and not n.addresses_read))


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("runtime", [False, True])
def test_the_second_pass_equals_a_fresh_correlation(seed: int, runtime: bool) -> None:
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    scan = big_scan(1000 + seed, sandboxes=rnd.randrange(5, 60), runtime=runtime)
    if seed % 3 == 0:
        scan = _with_state_dir_netns(scan)
    gave_up = frozenset(c.container_id for c in scan.inventory.cni_cache[::3])
    for policy in (CorrelationPolicy(min_age_seconds=60),
                   CorrelationPolicy(min_age_seconds=60, runtime_gave_up=gave_up)):
        first = correlation(scan.inventory, scan.desired, now=NOW, policy=policy)
        read = with_addresses_read(scan, seed)
        again = correlation(read, scan.desired, now=NOW, policy=policy, previous=first)
        assert again.context.pods is first.context.pods  # the reuse did happen
        assert again.findings == correlate(read, scan.desired, now=NOW, policy=policy)
