"""Tracked residue items: what the ledger persists and the phase machine moves."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from nodegc.model.resources import Kind


class Phase(StrEnum):
    DETECTED = "detected"
    """Seen orphaned; counting consecutive scans and waiting out the grace period."""
    MARKED = "marked"
    """Orphaned for K scans and the grace period: a reclaim candidate."""
    TERMINATING = "terminating"
    """Fresh re-verification passed; written right before the destructive step (the checkpoint)."""
    CLEANED = "cleaned"
    """The executor reported success; waiting for a rescan to confirm the absence."""
    CLOSED = "closed"
    """Confirmed absent. Final."""
    FAILED = "failed"
    """The executor failed; retried with backoff."""
    RELEASED = "released"
    """No longer residue (in use, protected, unknown or a conflict again): kept. Final."""

    @property
    def final(self) -> bool:
        return self in (Phase.CLOSED, Phase.RELEASED)


Identity = tuple[tuple[str, str], ...]
"""Identity evidence of a resource, e.g. (("container_id", "ab12"), ("inode", "1234")): a re-read must
find the same values before anything is done to it."""


@dataclass(frozen=True)
class Item:
    key: str
    kind: Kind
    resource_id: str
    phase: Phase
    identity: Identity
    finding_class: str
    owner_uid: str | None
    owner_namespace: str | None
    owner_name: str | None
    container_id: str | None
    first_seen: float
    last_seen: float
    orphan_count: int
    attempts: int = 0
    next_attempt: float | None = None
    last_error: str | None = None
    lazy: bool = False


def item_key(kind: Kind, resource_id: str) -> str:
    return f"{kind.value}:{resource_id}"
