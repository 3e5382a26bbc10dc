"""Property: the safety property (tests/unit/test_safety_property.py) holds when cache entries are read at
shared paths. Each generated sandbox's cache entry is put at its own path or at one path shared
with other sandboxes' entries, in any order: nothing a live or pending pod uses is residue, whatever owner
the other entries of its path name."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.model.pods import OwnerState, Pod
from nodegc.model.resources import Kind
from nodegc.planning.correlate import correlate
from nodegc.planning.owners import cni_chain_name
from tests.unit.factories import NET, NOW, desired
from tests.unit.test_safety_property import Sandbox, build, scenarios


@st.composite
def shared(draw: st.DrawFn) -> tuple[list[Sandbox], list[Pod], dict[str, bool], dict[str, str], bool]:
    boxes, pods, dirs = draw(scenarios())
    paths = {s.cid: draw(st.sampled_from([f"/r/{s.cid}", "/r/shared"])) for s in boxes}
    return boxes, pods, dirs, paths, draw(st.booleans())


@settings(max_examples=1500, deadline=None)
@given(shared())
def test_nothing_of_a_live_or_pending_pod_is_residue_whatever_shares_its_path(
        scenario: tuple[list[Sandbox], list[Pod], dict[str, bool], dict[str, str], bool]) -> None:
    boxes, pods, dirs, paths, reverse = scenario
    inventory = build(boxes, dirs)
    entries = tuple(replace(e, path=paths[e.container_id]) for e in inventory.cni_cache)
    inventory = replace(inventory, cni_cache=entries[::-1] if reverse else entries)
    findings = correlate(inventory, desired(*pods), now=NOW)
    claimed_ips = {ip for p in pods if p.state is not OwnerState.TERMINAL for ip in p.pod_ips}
    by_uid = {p.uid: p for p in pods}
    bound: set[str] = set()
    for s in boxes:
        owner = by_uid.get(s.uid)
        current = owner is not None and owner.state is not OwnerState.TERMINAL and (
            owner.state is not OwnerState.LIVE or not owner.pod_ips or s.ip in owner.pod_ips)
        if current or s.ip in claimed_ips:
            bound |= {f"{NET}/{s.ip}", f"veth-{s.cid}", cni_chain_name(NET, s.cid)}
            if s.cache:
                bound.add(paths[s.cid])
            if s.netns_mounted:
                bound.add(f"/run/netns/cni-{s.cid}")
            bound |= {f.id for f in findings if f.kind is Kind.HOSTPORT_RULE and f.owner.container_id == s.cid}
    for f in findings:
        if f.cls.is_residue:
            assert f.id not in bound, f
            assert f.owner_state not in (OwnerState.LIVE, OwnerState.PENDING), f
            assert f.ip not in claimed_ips, f
