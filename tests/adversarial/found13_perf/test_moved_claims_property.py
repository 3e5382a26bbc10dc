"""What moved between two listings of pods, worked out from the pods added and removed alone
(`planning.network._touched_ips`, `planning.owners.pod_changes`), against a look at every address: pods kept
as the very same objects, new objects equal to old ones, pods in another order, an object listed twice,
static mirrors, terminal, starting and host-network pods, addresses written in another form. Whatever set
of addresses whose claimants moved the shortcut gives must be the one a full comparison gives."""

from __future__ import annotations

import functools

from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.model.pods import DesiredState, Pod
from nodegc.planning.network import _moved_claims, _touched_ips
from nodegc.planning.owners import PodIndex
from tests.adversarial.pod_listings import pod_listings
from tests.unit.factories import NOW

_IPS = ("10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::1", "FD00::1", "fd00:0::1", "10.0.0.01", "")
_PHASES = ("Running", "Pending", None, "Succeeded", "Failed", "Unknown")

_pods = st.builds(
    Pod, uid=st.sampled_from(("a", "b", "c", "d", "e")), namespace=st.just("default"),
    name=st.sampled_from(("p", "q")), node_name=st.just("n1"), phase=st.sampled_from(_PHASES),
    pod_ips=st.lists(st.sampled_from(_IPS), max_size=2).map(tuple), host_network=st.booleans(),
    static_uid=st.sampled_from((None, None, "a", "hash")))


_listings = functools.partial(pod_listings, _pods, max_then=6, keep_weight=3, insert_anywhere=False,
                              swap=st.booleans())


def _index(pods: tuple[Pod, ...]) -> PodIndex:
    return PodIndex.build(DesiredState(node="n1", pods=pods, source="test", fetched_at=NOW))


@settings(max_examples=400, deadline=None)
@given(_listings())
def test_what_moved_from_the_pods_added_and_removed_is_what_moved(listings: tuple[tuple[Pod, ...], ...]) -> None:
    now, then = listings
    a, b = _index(now), _index(then)
    touched = _touched_ips(now, then)
    for field in ("claims", "terminal_claims"):
        full = _moved_claims(getattr(a, field), getattr(b, field), None)
        assert _moved_claims(getattr(a, field), getattr(b, field), touched) == full, (field, touched)
