"""What the node's conditions say after a cycle (pure): refused reclaim, and IP ranges running out.

A refusal on a stale or unavailable desired state, or by the blast-radius guard, means residue stays on
the node however long it lasts (an unreadable container runtime holds back what needs its word);
`rate_limit` and `reverification` are normal throttling and doubt, not a condition. A range is under
pressure when its forecast says it is full within `exhaustion_seconds`, or when it is already
`usage_ratio` full.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nodegc.model.conditions import IP_RANGE_PRESSURE, RECLAIM_BLOCKED, NodeCondition
from nodegc.model.ipranges import RangeStatus

BLOCKING = {
    "stale_source": "StaleDesiredState",
    "source_unavailable": "DesiredStateUnavailable",
    "blast_radius": "BlastRadiusGuard",
    "runtime_unavailable": "ContainerRuntimeUnavailable",
}
PARTIAL = frozenset({"runtime_unavailable"})
"""Refusals that hold back only what needs the container runtime's word; the others stop every reclaim."""
MAX_MESSAGE = 512


@dataclass(frozen=True)
class PressurePolicy:
    exhaustion_seconds: float = 4 * 3600.0
    usage_ratio: float = 0.9


def reclaim_blocked(blocked: Sequence[str]) -> NodeCondition:
    """From the cycle's refusals ("reason: message"); the first blocking one names the condition."""
    found = [entry.partition(": ") for entry in blocked]
    for reason, _, message in sorted(found, key=lambda f: f[0] in PARTIAL):  # a full refusal names it first
        if reason in BLOCKING:
            what = ("nodegc reclaims nothing that needs the container runtime's word" if reason in PARTIAL
                    else "nodegc reclaims nothing on this node")
            return NodeCondition(RECLAIM_BLOCKED, "True", BLOCKING[reason], _cut(f"{what}: {message}"))
    return NodeCondition(RECLAIM_BLOCKED, "False", "ReclaimAllowed", "nodegc can reclaim residue on this node")


def ip_range_pressure(statuses: Iterable[RangeStatus], policy: PressurePolicy | None = None) -> NodeCondition:
    policy = policy or PressurePolicy()
    pressed: list[tuple[float, str, str]] = []
    for s in statuses:
        u = s.usage
        if not u.capacity:
            continue
        ratio = u.reserved / u.capacity
        left = s.seconds_to_exhaustion
        used = f"{u.reserved}/{u.capacity} reserved, {u.leaked} leaked"
        if ratio >= policy.usage_ratio:
            pressed.append((0.0 if left == 0 else left, "RangeNearlyFull",
                            f"{u.network} {u.range}: {used} ({ratio:.0%})"))
        elif left <= policy.exhaustion_seconds:
            pressed.append((left, "RangeExhaustionForecast",
                            f"{u.network} {u.range}: {used}, full in about {_duration(left)} at "
                            f"{s.forecast.leak_rate * 3600:.1f} leaked addresses an hour"))
    if not pressed:
        return NodeCondition(IP_RANGE_PRESSURE, "False", "RangesHaveHeadroom",
                             "every host-local pod IP range has headroom")
    pressed.sort()
    return NodeCondition(IP_RANGE_PRESSURE, "True", pressed[0][1], _cut("; ".join(p[2] for p in pressed)))


def node_conditions(blocked: Sequence[str], statuses: Iterable[RangeStatus],
                    policy: PressurePolicy | None = None) -> tuple[NodeCondition, NodeCondition]:
    return reclaim_blocked(blocked), ip_range_pressure(statuses, policy)


def _duration(seconds: float) -> str:
    if math.isinf(seconds):
        return "never"
    if seconds < 3600:
        return f"{max(seconds, 0) / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."
