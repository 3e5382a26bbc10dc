"""What every desired-state source promises, and the one error it may raise."""

from __future__ import annotations

from typing import Protocol

from nodegc.model.pods import DesiredState, Pod


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
