"""What one reclaim step did. Executors never raise for expected failures; they return an outcome."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    ok: bool
    """True when the resource is gone afterwards (including when it was already gone)."""
    detail: str
    already_gone: bool = False
    identity_changed: bool = False
    """The resource at that place is no longer the one that was verified: nothing was done."""
    lazy: bool = False
    """A mount that hung was lazily detached instead of unmounted."""
    skipped: bool = False
    """Nothing was attempted (the dry-run executor): the item stays where it was."""

    @classmethod
    def done(cls, detail: str, *, lazy: bool = False) -> Outcome:
        return cls(ok=True, detail=detail, lazy=lazy)

    @classmethod
    def gone(cls, detail: str = "already gone") -> Outcome:
        return cls(ok=True, detail=detail, already_gone=True)

    @classmethod
    def changed(cls, detail: str) -> Outcome:
        return cls(ok=False, detail=detail, identity_changed=True)

    @classmethod
    def failed(cls, detail: str) -> Outcome:
        return cls(ok=False, detail=detail)
