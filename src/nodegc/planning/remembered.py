"""Correlations taken again: a scan that sees the very records a recent one saw gets that one's findings.

Pure: no I/O. The agent scans a node every 30 s, and on a quiet node nothing changes in between: the same
records of every kind, the same pods, the same policy; only the time moves. A correlation is a function of
those and of the time, and it reads the time only through its context's clock (`Clock`), which keeps what
every verdict asked of it. When the records, the pods and the policy compare equal and another time would
have answered every one of those questions alike, a correlation from scratch would make the very same
findings: the remembered ones are taken instead. Anything else (one record more or less or changed, a pod
changed, a record that grew old enough to judge, an evidence text that names an age) is correlated anew.

A correlation made anew still takes from the last one made (`planning.context.Earlier`) every verdict whose
inputs are provably the same: the owners of cache entries that look up the very same pods, and the kubelet
domain's verdicts when its records, the pods of its directories' UIDs, the static pods and the policy are
the same and the time answers its questions alike, and, when the network records are the same, each
network verdict whose lookups find the very same owners and claimants (`planning.network._Again`): a node
whose pods change every cycle. What moved is worked out once per correlation, not per verdict: the cache
entries whose owner is not the very same, and the addresses whose claimants are not (looked for among the
addresses of the pods added or removed, when the pods listed both times keep their order). A first pass
then asks that check only of the records a change can reach, found through an index of what each check
reads (`planning.network._Reads`, kept while the records are equal), and takes every other verdict in bulk
(`planning.network._network_again`); the index of the pods is made from the one before when few pods came
or went (`planning.owners.PodIndex`), and the rule that an attachment's parts stand or fall together works
out again only the groups whose parts changed (`planning.network.Stood`). A pod equal by
value to the earlier one of its UID is that earlier object (`planning.context.as_before`: a source that
makes every pod anew, a list or a snapshot parsed again, loses nothing), and the indexes that depend on
the records alone (the cache entries', the netns keys, the addresses the rules name) are taken with them.
Detect's second pass takes from the last second pass made the verdicts its own first pass cannot give it
(on the namespaces whose addresses it read, and the entries and veths that follow them), under the same
rule: the same network records (addresses read included), owners, claimants, policy, and a time that
answers alike what those verdicts and the first-pass verdicts it carried asked.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime

from nodegc.model.findings import Finding
from nodegc.model.pods import DesiredState
from nodegc.model.resources import Inventory
from nodegc.model.runtime import RuntimeView
from nodegc.planning.context import Clock, CorrelationPolicy, Earlier, _read_at, same_policy
from nodegc.planning.correlate import Correlation, correlation

_COMPARED = tuple(f.name for f in fields(Inventory) if f.name not in ("taken_at", "runtime"))
"""What a correlation reads of an inventory: all of it but the time it was taken (never read: the
correlation's time is its `now`) and the runtime's view (compared apart: `_VIEW`)."""
_VIEW = tuple(f.name for f in fields(RuntimeView) if f.name != "read_at")
"""What it reads of the runtime's view besides the time it was read (read through the clock only, as
`Clock.read`: a sandbox born after it is not in the view, and a time that changes such an answer is no
time that answers alike)."""
_DESIRED = tuple(f.name for f in fields(DesiredState) if f.name != "fetched_at")
"""What it reads of a desired state besides its time (read through the clock, as the photo's time)."""


@dataclass(frozen=True)
class _Kept:
    """A correlation's inputs but its time, what its clock was asked, and its findings (not its context:
    its indexes serve only a second pass of the same scan, and a remembered one is never that)."""

    inventory: Inventory
    desired: DesiredState
    policy: CorrelationPolicy
    clock: Clock
    findings: tuple[Finding, ...]


class Correlations:
    """The last few correlations of a process (`size`), and the rule that takes one again."""

    def __init__(self, size: int = 2) -> None:
        self.size = size
        """Two: detect's two passes (about 3 MiB of findings and records at 1,000 pods kept from one cycle to
        the next). A cycle's judgement again on the proven photograph (the same pods at a later time) takes
        the scan's."""
        self._kept: list[_Kept] = []
        self._earlier: Earlier | None = None
        """What the last first pass made leaves for the next one (`planning.context.Earlier`)."""
        self._second: Earlier | None = None
        """What the last second pass made (detect's, after it read namespaces' addresses) leaves for the next
        second pass: the verdicts its first pass cannot give it."""
        self.from_earlier = True
        """Whether a correlation made anew takes from the last one (benchmarks compare without: False)."""
        self.taken_again = 0
        """How many correlations were taken again instead of being made (for tests and benchmarks)."""
        self.reused = 0
        """How many verdicts the correlations made took from an earlier scan's (for tests and benchmarks)."""

    def correlate(self, inventory: Inventory, desired: DesiredState, *, now: datetime, policy: CorrelationPolicy,
                  previous: Correlation | None = None) -> tuple[tuple[Finding, ...], Correlation | None]:
        """The findings of `correlation(...)`, and that correlation when one was made (None: they were taken
        again, provably the same)."""
        kept = self._kept  # replaced whole, never changed in place: a concurrent call loses a memory at worst
        for one in kept:
            if _same(one, inventory, desired, now, policy):
                # Kept with this call's inputs, equal to its own in all that is compared: the scan's
                # records and the source's pods are then held once, not once more by an older copy.
                again = _Kept(inventory, desired, policy, one.clock, one.findings)
                self._kept = [again, *(k for k in kept if k is not one)]
                self.taken_again += 1
                return one.findings, None
        earlier = (self._second if previous is not None else self._earlier) if self.from_earlier else None
        made = correlation(inventory, desired, now=now, policy=policy, previous=previous, earlier=earlier)
        if made.network.second:
            self._second = made.earlier()
        if not made.network.second or self._earlier is None:  # a first pass: the next scan's first is like it
            self._earlier = made.earlier()
        self.reused += made.context.reused
        # A copy: what the context's clock is asked from now on (nothing, as it is) is not this correlation's.
        one = _Kept(inventory, desired, policy, made.context.clock.copy(), made.findings)
        self._kept = [one, *kept][: self.size]
        return made.findings, made

    def forget(self) -> None:
        self._kept = []
        self._earlier = None
        self._second = None


def _same(kept: _Kept, inventory: Inventory, desired: DesiredState, now: datetime,
          policy: CorrelationPolicy) -> bool:
    """Whether a correlation of these would make `kept`'s findings: the same policy, pods and records
    (compared by value: the readers make the same types every scan), and a time that answers every
    question its verdicts asked of the time alike."""
    return (same_policy(policy, kept.policy)
            and all(getattr(desired, n) == getattr(kept.desired, n) for n in _DESIRED)
            and kept.clock.answers_alike(now.timestamp(), desired.fetched_at.timestamp(), _read_at(inventory))
            and _same_view(inventory.runtime, kept.inventory.runtime)
            and all(getattr(inventory, n) == getattr(kept.inventory, n) for n in _COMPARED))


def _same_view(view: RuntimeView | None, kept: RuntimeView | None) -> bool:
    """The same sandboxes, containers, leftovers and identity of the runtime (its reading's time aside),
    each compared by value: the sandbox id and its creation time are a sandbox's identity."""
    if view is None or kept is None:
        return view is kept
    return view is kept or all(getattr(view, n) == getattr(kept, n) for n in _VIEW)
