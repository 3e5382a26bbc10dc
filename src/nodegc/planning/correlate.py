"""Join a node's inventory with the pods bound to it into findings.

Pure: no I/O, no clock (``now`` is passed in). The rules follow DESIGN.md's ownership section, one module
per domain (kubelet objects, CNI attachments, the container runtime's word); each rule ends in a class only
when the evidence supports it, and everything else is ``unknown`` or ``protected`` so that nothing is ever
reclaimed on a guess.
"""

from __future__ import annotations

from datetime import datetime

from nodegc.model.findings import Finding
from nodegc.model.pods import DesiredState
from nodegc.model.resources import Inventory
from nodegc.planning.context import Context, CorrelationPolicy
from nodegc.planning.firewall import correlate_firewall
from nodegc.planning.kubelet import correlate_kubelet
from nodegc.planning.network import correlate_network, shared_namespaces, stand_or_fall_together
from nodegc.planning.runtime import correlate_pod_logs, correlate_runtime

__all__ = ["CorrelationPolicy", "correlate"]


def correlate(
    inventory: Inventory,
    desired: DesiredState,
    *,
    now: datetime,
    policy: CorrelationPolicy | None = None,
) -> tuple[Finding, ...]:
    ctx = Context.build(inventory, desired, now, policy or CorrelationPolicy())
    correlate_kubelet(ctx)
    correlate_network(ctx)
    correlate_runtime(ctx)
    correlate_pod_logs(ctx)
    correlate_firewall(ctx)
    shared_namespaces(ctx)
    stand_or_fall_together(ctx)
    return tuple(ctx.findings)
