"""Join a node's inventory with the pods bound to it into findings.

Pure: no I/O, no clock (``now`` is passed in). The rules follow DESIGN.md's ownership section, one module
per domain (kubelet objects, CNI attachments, the container runtime's word); each rule ends in a class only
when the evidence supports it, and everything else is ``unknown`` or ``protected`` so that nothing is ever
reclaimed on a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nodegc.model.findings import Finding
from nodegc.model.pods import DesiredState
from nodegc.model.resources import Inventory
from nodegc.planning.context import Context, CorrelationPolicy
from nodegc.planning.firewall import correlate_firewall
from nodegc.planning.kubelet import correlate_kubelet
from nodegc.planning.network import NetworkPass, correlate_network, shared_namespaces, stand_or_fall_together
from nodegc.planning.runtime import correlate_pod_logs, correlate_runtime

__all__ = ["Correlation", "CorrelationPolicy", "correlate", "correlation"]


@dataclass(frozen=True)
class Correlation:
    """The findings of one correlation, and what a second one of the same scan can take from it."""

    findings: tuple[Finding, ...]
    context: Context
    kubelet: tuple[Finding, ...]
    """The kubelet domain's findings as it made them: it runs first and reads no namespace."""
    network: NetworkPass
    """What the network domain decided without looking at a namespace."""
    pod_logs: tuple[Finding, ...] = ()
    """The pod log directories' findings: they depend on no namespace and no other finding."""


def correlate(
    inventory: Inventory,
    desired: DesiredState,
    *,
    now: datetime,
    policy: CorrelationPolicy | None = None,
) -> tuple[Finding, ...]:
    return correlation(inventory, desired, now=now, policy=policy).findings


def correlation(
    inventory: Inventory,
    desired: DesiredState,
    *,
    now: datetime,
    policy: CorrelationPolicy | None = None,
    previous: Correlation | None = None,
) -> Correlation:
    """`previous`: a correlation of the same scan before more of its namespaces' addresses were read (the
    findings are the same as without it; only the work that cannot have changed is not done again)."""
    ctx = Context.build(inventory, desired, now, policy or CorrelationPolicy(),
                        previous.context if previous is not None else None)
    reuse = previous if previous is not None and ctx.pods is previous.context.pods else None
    if reuse is not None:
        # The kubelet's objects (pod directories, volumes) do not depend on namespaces.
        ctx.findings.extend(reuse.kubelet)
    else:
        correlate_kubelet(ctx)
    kubelet = tuple(ctx.findings)
    network = correlate_network(ctx, reuse.network if reuse is not None else None)
    correlate_runtime(ctx)
    start = len(ctx.findings)
    if reuse is not None:
        ctx.findings.extend(reuse.pod_logs)
    else:
        correlate_pod_logs(ctx)
    pod_logs = tuple(ctx.findings[start:])
    correlate_firewall(ctx)
    shared_namespaces(ctx)
    stand_or_fall_together(ctx)
    return Correlation(tuple(ctx.findings), ctx, kubelet, network, pod_logs)
