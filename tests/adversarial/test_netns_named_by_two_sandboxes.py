"""A live pod whose READY sandbox and an older, dead sandbox the runtime still lists name the same netns
path: the netns is the READY sandbox's, whatever order the runtime lists them in."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory, Kind
from nodegc.planning.correlate import CorrelationPolicy, correlate
from tests.unit.factories import NOW, desired, netns, pod
from tests.unit.test_runtime_ownership import OLD_DT, sandbox, view


@pytest.mark.parametrize("gave_up", [frozenset(), frozenset({"old"})])
@pytest.mark.parametrize("dead_last", [True, False])
def test_netns_named_by_a_ready_and_a_dead_sandbox_is_the_ready_ones(gave_up: frozenset[str], dead_last: bool) -> None:
    ns = netns("x", addresses=("10.0.0.9",))
    live = sandbox("new", "u1", ips=("10.0.0.5",), netns_path="/run/netns/cni-x")
    dead = sandbox("old", "u1", ready=False, created=OLD_DT - timedelta(hours=1), netns_path="/run/netns/cni-x")
    inv = Inventory(taken_at=NOW, netns=(ns,), runtime=view(*((live, dead) if dead_last else (dead, live))))
    found = correlate(inv, desired(pod("p", "u1", ip="10.0.0.5")), now=NOW,
                      policy=CorrelationPolicy(runtime_gave_up=gave_up))
    f = {(x.kind, x.id): x for x in found}[(Kind.NETNS, ns.path)]
    assert f.cls is FindingClass.IN_USE, f
    assert f.owner.container_id == "new"
