"""Proof that a list is current: a lagging API server, cache or proxy answers with an old photograph that
looks fresh, so a list that may drive destructive steps is checked against a witness read live.

The witness is the node's own Lease (kube-node-lease/<node>), which its kubelet renews every 10 s: read
with a live GET right before the list, it carries a resourceVersion and the time it was renewed.
- the list's resourceVersion must not be older than the Lease's (a consistent list taken after the GET
  cannot be), and no object in it may be newer than the list itself;
- the Lease must have been renewed within `max_age_seconds` (40 s, the kubelet's default lease duration)
  by this node's clock: an old renewal is an old answer, or a kubelet that is not running;
- the Lease must be held by this node (holderIdentity, which its kubelet sets to the node name): another
  holder's renewals are not this kubelet's;
- a renewal dated more than `MAX_LEASE_AHEAD_SECONDS` after this clock is a broken clock (the node's clock
  stepped back, or the Lease is not this kubelet's): it proves no age, and is refused;
- the list is then current as of the Lease's renewal, never later than the list itself.
Used by the one-shot list (`desired.kube.KubeSource`) and by the agent's pod watch, for every list it makes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import lightkube
from lightkube.core.decoders import decode_object
from lightkube.resources.coordination_v1 import Lease

from nodegc.api.errors import KubeError, get_or_none
from nodegc.api.objects import object_resource_version, resource_version_number
from nodegc.api.streaming import RawReads

NODE_LEASE_NAMESPACE = "kube-node-lease"
MAX_LEASE_AGE_SECONDS = 40.0
"""The kubelet's default node lease duration; it renews every quarter of it (10 s)."""
MAX_LEASE_AHEAD_SECONDS = 10.0
"""How far after the reader's clock a renewal may be dated: the kubelet may renew between that clock read
and the GET (one renewal interval). Beyond it the renewal was dated by a clock ahead of this one (the node's
clock stepped back, or not this kubelet's): its age cannot be told."""


class NotCurrent(KubeError):
    """The API answered, but the answer cannot be proven current (or is provably not)."""


@dataclass(frozen=True)
class Witness:
    """A resourceVersion known current at a time: a list at or after `rv` is current as of `at`."""

    rv: int
    at: datetime
    what: str


def node_lease_witness(client: lightkube.Client, node: str, *, now: datetime,
                       max_age_seconds: float = MAX_LEASE_AGE_SECONDS) -> Witness:
    """The node Lease read live: its resourceVersion and renewal time. KubeError when it cannot be read,
    NotCurrent when it does not exist, carries no version or time, or was renewed too long ago."""
    what = f"the node Lease {NODE_LEASE_NAMESPACE}/{node}"
    cannot = f"cannot prove node {node}'s pods (as listed or as watched) are current"
    try:
        # Read as RawReads reads (the whole answer within its request's read timeouts), decoded as lightkube
        # decodes a Lease.
        lease = get_or_none(f"getting {what}", lambda: decode_object(
            bytes(RawReads(client).get(Lease, namespace=NODE_LEASE_NAMESPACE, name=node)), Lease))
    except KubeError as e:
        raise KubeError(f"{cannot}: {e}", code=e.code, timed_out=e.timed_out) from e.__cause__
    if lease is None:
        raise NotCurrent(f"{cannot}: {what} does not exist")
    rv = resource_version_number(lease.metadata.resourceVersion if lease.metadata else None)
    renewed = lease.spec.renewTime if lease.spec is not None else None
    if rv is None or not isinstance(renewed, datetime):
        raise NotCurrent(f"{cannot}: {what} has no numeric resourceVersion or no renewTime")
    holder = lease.spec.holderIdentity if lease.spec is not None else None
    if holder != node:  # the kubelet always names itself; a Lease held by no one is nobody's renewals
        raise NotCurrent(f"{cannot}: {what} is held by {holder!r}, not by node {node}'s kubelet: its renewals"
                         " say nothing about this node")
    if renewed.tzinfo is None:
        renewed = renewed.replace(tzinfo=UTC)
    age = (now - renewed).total_seconds()
    if -age > MAX_LEASE_AHEAD_SECONDS:
        raise NotCurrent(f"{cannot}: {what} was renewed {-age:.0f}s in the future: a clock stepped back, or a"
                         " Lease not renewed on this node's clock; its age cannot be told")
    if age > max_age_seconds:
        raise NotCurrent(f"{cannot}: {what} was renewed {age:.0f}s ago (more than {max_age_seconds:g}s): "
                         "an old answer, or a kubelet that is not running")
    return Witness(rv=rv, at=renewed, what=what)


def check_list(rv: str | None, objects: Sequence[Any], *, what: str, witness: Witness | None,
               high_rv: int | None) -> int:
    """The list's resourceVersion as a number, or NotCurrent: not numeric, older than the witness read just
    before it or than `high_rv` (the newest already seen), or holding an object newer than itself."""
    number = resource_version_number(rv)
    prefix = f"the list of {what}"
    if number is None:
        raise NotCurrent(f"{prefix} has no numeric resourceVersion ({rv!r}): it cannot prove it is current")
    if witness is not None and number < witness.rv:
        raise NotCurrent(f"{prefix} is at resourceVersion {number}, older than {witness.what} read just before"
                         f" it ({witness.rv}): a lagging API server, cache or proxy")
    if high_rv is not None and number < high_rv:
        raise NotCurrent(f"{prefix} is at resourceVersion {number}, older than {high_rv} already seen: "
                         "a lagging API server, cache or proxy")
    newest = max((n for obj in objects if (n := object_resource_version(obj)) is not None), default=None)
    if newest is not None and newest > number:
        raise NotCurrent(f"{prefix} at resourceVersion {number} holds an object at {newest}: inconsistent")
    return number
