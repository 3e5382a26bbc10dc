"""nodegc's conditions on its Node (status.conditions), set the way node-problem-detector sets its own.

One strategic merge patch on the `nodes/<name>/status` subresource carries only nodegc's condition types
(merge key `type`), so the kubelet's conditions and other writers' are left alone. A condition is
written when its status, reason or message changes, and again every `heartbeat_seconds` (its
`lastHeartbeatTime` says nodegc is still watching); `lastTransitionTime` moves only when the status does.
The first update reads the Node once, so a restarted agent keeps the transition times already there.
A failed read or write is logged and retried at the first update a minute later; it never raises.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import lightkube
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from nodegc.api.errors import KubeError, call
from nodegc.api.streaming import Requests
from nodegc.kube.events import rfc3339
from nodegc.model.conditions import CONDITION_TYPES, NodeCondition
from nodegc.observe.logs import get_logger

log = get_logger("nodegc.kube.nodes")
HEARTBEAT_SECONDS = 300.0
RETRY_SECONDS = 60.0
"""After a failed read or write, the next attempt waits this long (a missing Node, RBAC not granted)."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Written:
    condition: NodeCondition
    transition: str
    at: float


class NodeConditionWriter:
    def __init__(
        self,
        client: lightkube.Client,
        node: str,
        *,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
        clock: Callable[[], datetime] = _utcnow,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.node = node
        self.heartbeat = heartbeat_seconds
        self.clock = clock
        self.monotonic = monotonic
        self._written: dict[str, _Written] = {}
        self._known: dict[str, tuple[str, str]] | None = None
        """Status and lastTransitionTime of nodegc's conditions as the Node had them when first read."""
        self.patches = 0
        self._retry_at = 0.0

    def update(self, conditions: Sequence[NodeCondition]) -> bool:
        """Write what changed (or is due for a heartbeat); True when the Node is up to date."""
        if self.monotonic() < self._retry_at:
            return False
        try:
            if self._known is None:
                self._known = self._read()
            now = self.clock()
            stamp = rfc3339(now)
            due: list[dict[str, Any]] = []
            pending: dict[str, _Written] = {}
            for c in conditions:
                last = self._written.get(c.type)
                if last is not None and last.condition == c and self.monotonic() - last.at < self.heartbeat:
                    continue
                transition = self._transition(c, last, stamp)
                due.append({"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
                            "lastHeartbeatTime": stamp, "lastTransitionTime": transition})
                pending[c.type] = _Written(c, transition, self.monotonic())
            if not due:
                return True
            call(f"patch node {self.node} status", lambda: Requests(self.client).patch(
                Node.Status, self.node, {"status": {"conditions": due}}, patch_type=PatchType.STRATEGIC))
        except KubeError as e:
            self._retry_at = self.monotonic() + RETRY_SECONDS
            log.warning("node conditions not written; retried later", node=self.node, error=str(e),
                        retry_seconds=RETRY_SECONDS)
            return False
        self.patches += 1
        self._written.update(pending)
        for c in conditions:
            if c.type in pending:
                log.info("node condition", node=self.node, type=c.type, status=c.status, reason=c.reason)
        return True

    def _transition(self, c: NodeCondition, last: _Written | None, stamp: str) -> str:
        if last is not None:
            return last.transition if last.condition.status == c.status else stamp
        known = (self._known or {}).get(c.type)
        if known is not None and known[0] == c.status and known[1]:
            return known[1]
        return stamp

    def _read(self) -> dict[str, tuple[str, str]]:
        node = call(f"get node {self.node}", lambda: Requests(self.client).get(Node, self.node))
        out: dict[str, tuple[str, str]] = {}
        for cond in (node.status.conditions if node.status and node.status.conditions else []):
            if cond.type in CONDITION_TYPES:
                when = cond.lastTransitionTime
                out[cond.type] = (cond.status, rfc3339(when) if isinstance(when, datetime) else str(when or ""))
        return out
