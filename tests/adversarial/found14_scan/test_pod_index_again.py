"""The index of the pods made from the scan before's (`planning.owners.PodIndex._again`) when few pods came
or went, against the index built from scratch, over hypothesis-drawn listings: pods kept as the very same
objects, new objects equal to old ones, pods dropped, changed, listed twice, added (with an old one's UID,
name or address, as a static mirror of another's UID), two listings swapped. Every map must hold the very
same pods in the same order, and the addresses of `claims` in the same order (the conflicts of pod status
are reported in it)."""

from __future__ import annotations

import functools

from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.model.pods import DesiredState, Pod
from nodegc.planning.owners import PodIndex, pod_changes
from tests.adversarial.pod_listings import pod_listings
from tests.unit.factories import NOW

_IPS = ("10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::1", "FD00::1", "10.0.0.01", "")
_PHASES = ("Running", "Pending", None, "Succeeded", "Failed", "Unknown")

_pods = st.builds(
    Pod, uid=st.sampled_from(("a", "b", "c", "d", "e", "hash")), namespace=st.sampled_from(("default", "x")),
    name=st.sampled_from(("p", "q", "r")), node_name=st.just("n1"), phase=st.sampled_from(_PHASES),
    pod_ips=st.lists(st.sampled_from(_IPS), max_size=2).map(tuple), host_network=st.booleans(),
    static_uid=st.sampled_from((None, None, "a", "hash")))


_listings = functools.partial(pod_listings, _pods, max_then=30, keep_weight=12, insert_anywhere=True,
                              swap=st.integers(0, 9).map(lambda n: n == 0))


def _index(pods: tuple[Pod, ...], earlier: tuple[PodIndex, tuple[Pod, ...]] | None = None) -> PodIndex:
    return PodIndex.build(DesiredState(node="n1", pods=pods, source="test", fetched_at=NOW), earlier=earlier)


def _shape(index: PodIndex) -> dict[str, object]:
    """Every map as its keys in order with the identities of their pods (a pod's value alone says too
    little: the reuse of verdicts looks pods up by identity)."""
    def ids(m: dict[str, list[Pod]] | dict[tuple[str, str], list[Pod]]) -> list[tuple[object, list[int]]]:
        return [(k, [id(p) for p in v]) for k, v in m.items() if v]
    return {"by_uid": sorted((k, id(p)) for k, p in index.by_uid.items()), "by_name": sorted(ids(index.by_name)),
            "claims": ids(index.claims), "terminal_claims": ids(index.terminal_claims),
            "unsettled": [id(p) for p in index.unsettled]}


@settings(max_examples=600, deadline=None)
@given(_listings())
def test_the_index_made_from_the_one_before_is_the_one_built(listings: tuple[tuple[Pod, ...], ...]) -> None:
    now, then = listings
    before = _index(then)
    changes = pod_changes(now, then)
    if changes is not None:  # however many came or went (`build` asks it for few only)
        assert _shape(PodIndex._again(now, before, changes)) == _shape(_index(now))
    assert _shape(_index(now, (before, then))) == _shape(_index(now))
    assert _shape(before) == _shape(_index(then)), "the index before was changed"
