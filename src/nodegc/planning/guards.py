"""The blast-radius guard: refuse to act when a scan would reclaim too much of the node at once.

An empty pod list on a busy node (an API hiccup, a wrong node name, a stale snapshot) makes every
resource look orphaned; this is where that is caught, before anything is marked for reclaim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nodegc import defaults
from nodegc.model.findings import Finding, FindingClass
from nodegc.model.pods import DesiredState
from nodegc.model.resources import Kind


@dataclass(frozen=True)
class BlastRadius:
    max_share: float = defaults.MAX_SHARE
    """Largest share of the node's owners (pods and sandboxes) one scan may find orphaned."""
    min_owners: int = defaults.MIN_OWNERS
    """Below this many orphaned owners the share rule does not apply (a small node can lose half)."""
    allow_empty_desired: bool = False
    """An empty pod list with pod directories or attachments on disk is refused unless this is set."""


_NODE_KINDS = frozenset({Kind.POD_DIR, Kind.CNI_CACHE, Kind.IP_RESERVATION})


def blast_radius_refusal(findings: Sequence[Finding], desired: DesiredState, policy: BlastRadius) -> str | None:
    """A reason to refuse all destructive steps this cycle, or None."""
    if not desired.pods and not policy.allow_empty_desired:
        busy = sum(1 for f in findings if f.kind in _NODE_KINDS)
        if busy:
            return (f"the desired state lists no pods for node {desired.node} while {busy} pod directories and"
                    " attachments exist: refusing to treat them all as residue")
    # Every listed pod counts, finished ones too: a finished pod keeps its directory until it is deleted, so
    # a list of which no pod is found here (another node's finished Jobs) is about another node. Found is a
    # finding whose owner the list shows: `in_use` alone is not (the runtime's READY sandboxes make such
    # findings whatever the list says).
    listed = desired.pods
    uids = {u for p in listed for u in (p.uid, p.static_uid) if u}
    found = any(f.owner.uid is not None and f.owner.uid in uids for f in findings)
    if listed and not policy.allow_empty_desired and not found:
        busy = sum(1 for f in findings if f.kind in _NODE_KINDS)
        if busy:
            return (f"none of the {len(listed)} pods the desired state lists for node {desired.node} is found on"
                    f" this node, while {busy} pod directories and attachments exist: wrong node name?")
    orphaned = {f.group_key for f in findings if f.cls.is_residue}
    holding = {f.group_key for f in findings if f.cls in (FindingClass.IN_USE, FindingClass.PROTECTED)}
    total = len(orphaned | holding)
    if len(orphaned) >= policy.min_owners and total and len(orphaned) / total > policy.max_share:
        return (f"{len(orphaned)} of {total} owners on this node look orphaned ({len(orphaned) / total:.0%}),"
                f" above the {policy.max_share:.0%} limit")
    return None
