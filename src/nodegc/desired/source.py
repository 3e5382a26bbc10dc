"""What every desired-state source promises, and the one error it may raise."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from nodegc.model.pods import DesiredState, Pod

FUTURE_TOLERANCE_SECONDS = 5.0
"""A desired state dated more than this after the clock is from the future (clock skew between threads and
files): the engine, `staleness` and the snapshot re-read all refuse it by this one value."""


class SourceError(Exception):
    """The desired state could not be obtained or cannot be trusted.

    Callers must treat this as "no desired state": nothing is planned for reclaim from a scan
    whose desired state failed, because an absent pod would look like residue everywhere.
    Messages name the source and the reason, never tokens or whole payloads.
    """


class DesiredSource(Protocol):
    """A place that tells which pods are bound to this node (the API, or a snapshot file)."""

    name: str

    def fetch(self) -> DesiredState:
        """Return the pods bound to the node now; raise SourceError rather than return a partial list."""
        ...

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """A fresh read of one pod (never a cached copy): None when it does not exist; SourceError when
        the source cannot answer. The engine's terminate phase compares its UID before acting."""
        ...


@runtime_checkable
class ProvableSource(Protocol):
    """A source whose `fetch()` is dated by its freshness (a watch: the last event that moved it forward),
    which proves nothing about a lagging cache behind it. Before acting, the engine takes `proven()`."""

    def proven(self, *, max_age_seconds: float) -> DesiredState:
        """The desired state dated at a proof that it is current, at most `max_age_seconds` old; SourceError
        when it cannot be proven now (the reason in the message)."""
        ...


@runtime_checkable
class RefreshableSource(Protocol):
    """A watched source that can list again on request (in the background): the engine asks when the view
    it would act on is about to be (or is) too old to prove, so that proofs chain instead of waiting for the
    next resync."""

    def refresh(self, reason: str) -> None: ...


def staleness(desired: DesiredState, *, now: datetime, max_age_seconds: float) -> str | None:
    """Why a desired state is too old or too new to act on (what the engine's `stale_source` guard refuses),
    or None. A read-only command reports on it anyway, and says so."""
    age = (now - desired.fetched_at).total_seconds()
    if age > max_age_seconds:
        return (f"the desired state ({desired.source}) is {age:.0f}s old, older than {max_age_seconds:g}s: "
                "pods created since are not in it (clean --apply and the agent refuse it)")
    if age < -FUTURE_TOLERANCE_SECONDS:
        return (f"the desired state ({desired.source}) is dated {-age:.0f}s in the future: a broken clock "
                "(clean --apply and the agent refuse it)")
    return None
