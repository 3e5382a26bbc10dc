"""The smallest case of a second pass judging a namespace's cache entry with the first pass's verdict.

Two dead sandboxes' cache entries name one namespace whose addresses the first pass did not read: with
nothing inside known, both are stale. Detect reads the namespace: it holds a live pod's address, so a DEL
there would run inside a live pod: both are conflicts, kept. (The namespace's verdict is the first entry's
sandbox's: its own entry is kept with it whatever happens, the other's is not.) The next scan reads the
very same records anew (new objects, equal) while another pod comes: its first pass takes the cache index
from the scan before, built from that scan's objects; its second pass must still judge the entries again,
not take the first pass's stale verdicts."""

from __future__ import annotations

from dataclasses import replace

from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory
from nodegc.planning.context import CorrelationPolicy
from nodegc.planning.correlate import correlate
from nodegc.planning.remembered import Correlations
from tests.adversarial.found13_perf.test_records_read_anew import read_anew
from tests.unit.factories import NOW, cache, desired, netns, pod


def _scan() -> tuple[Inventory, Inventory]:
    dead = cache("aa" * 32, uid="u-gone", name="gone", ip="10.0.0.2")
    other = cache("ee" * 32, uid="u-gone-too", name="gone-too", ip="10.0.0.3", netns=dead.netns)
    live = cache("bb" * 32, uid="u-live", name="live", ip="10.0.0.9")
    unread = replace(netns("aa" * 32), addresses_read=False)
    first = Inventory(taken_at=NOW, cni_cache=(dead, other, live),
                      netns=(unread, netns("bb" * 32, addresses=("10.0.0.9",))))
    read = replace(first, netns=(replace(unread, addresses=("10.0.0.9",), addresses_read=True), first.netns[1]))
    return first, read


def test_a_second_pass_judges_again_the_entries_of_the_namespaces_it_read() -> None:
    policy = CorrelationPolicy(min_age_seconds=60.0)
    memo = Correlations()
    for n in range(3):
        # another pod each scan (a host-network one: it claims nothing), so the scan correlates anew
        photo = desired(pod("live", "u-live", ip="10.0.0.9"), replace(pod(f"other-{n}", f"u-{n}"), host_network=True))
        inv, read = _scan()
        inv = read_anew(inv)
        read = replace(read, cni_cache=inv.cni_cache)
        found, first = memo.correlate(inv, photo, now=NOW, policy=policy)
        assert found == correlate(inv, photo, now=NOW, policy=policy)
        again, _ = memo.correlate(read, photo, now=NOW, policy=policy, previous=first)
        fresh = correlate(read, photo, now=NOW, policy=policy)
        entry = next(f for f in fresh if f.id == inv.cni_cache[1].path)
        assert entry.cls is FindingClass.CONFLICT, entry  # the scenario: a DEL inside a live pod's namespace
        got = next(f for f in again if f.id == entry.id)
        assert not got.cls.is_residue, got  # a DEL inside a live pod's namespace
        assert again == fresh
