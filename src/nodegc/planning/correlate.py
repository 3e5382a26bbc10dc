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
from nodegc.planning.context import Clock, Context, CorrelationPolicy, Earlier, same_policy
from nodegc.planning.firewall import correlate_firewall
from nodegc.planning.kubelet import correlate_kubelet
from nodegc.planning.network import NetworkPass, Stood, correlate_network, shared_namespaces, stand_or_fall_together
from nodegc.planning.runtime import correlate_pod_logs, correlate_runtime

__all__ = ["Correlation", "CorrelationPolicy", "Earlier", "correlate", "correlation"]


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
    kubelet_clock: Clock | None = None
    """What the kubelet domain's verdicts asked of the time (None: not known)."""
    stood: Stood | None = None
    """What the rule that the parts of an attachment stand or fall together was given and made."""

    def earlier(self) -> Earlier | None:
        """What this correlation leaves for the next scan's (`Earlier`)."""
        ctx = self.context
        if self.kubelet_clock is None:
            return None
        return Earlier(inv=ctx.inv, node=ctx.desired.node, policy=ctx.policy, by_uid=ctx.pods.by_uid,
                       by_name=ctx.pods.by_name, resolutions=ctx.resolutions, mirrored=tuple(ctx.mirrored),
                       unmirrored=tuple(ctx.unmirrored), kubelet=self.kubelet, kubelet_clock=self.kubelet_clock,
                       network=self.network if self.network.clock is not None else None,
                       second=self.network.second,
                       claims=ctx.pods.claims, terminal_claims=ctx.pods.terminal_claims,
                       pending_note=ctx.pending_note(), listed=ctx.listed, cache=ctx.cache,
                       explained=ctx.explained, netns_keys=ctx.netns_keys, index=ctx.pods, stood=self.stood)


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
    earlier: Earlier | None = None,
) -> Correlation:
    """`previous`: a correlation of the same scan before more of its namespaces' addresses were read (the
    findings are the same as without it; only the work that cannot have changed is not done again).
    `earlier`: what a correlation of an earlier scan left (`Correlation.earlier`): the verdicts whose every
    input is the same are taken from it (the findings are the same as without it)."""
    ctx = Context.build(inventory, desired, now, policy or CorrelationPolicy(),
                        previous.context if previous is not None else None, earlier=earlier)
    reuse = previous if previous is not None and ctx.pods is previous.context.pods else None
    kubelet_clock: Clock | None
    if reuse is not None:
        # The kubelet's objects (pod directories, volumes) do not depend on namespaces.
        ctx.findings.extend(reuse.kubelet)
        kubelet_clock = reuse.kubelet_clock
    else:
        kubelet_clock = _kubelet(ctx, earlier)
    kubelet = tuple(ctx.findings)
    network = correlate_network(ctx, reuse.network if reuse is not None else None, earlier)
    correlate_runtime(ctx)
    start = len(ctx.findings)
    if reuse is not None:
        ctx.findings.extend(reuse.pod_logs)
    else:
        correlate_pod_logs(ctx)
    pod_logs = tuple(ctx.findings[start:])
    correlate_firewall(ctx)
    shared_namespaces(ctx)
    # An earlier correlation's outcome of that rule, or the first pass's for a second: the rule works out
    # again only the groups whose parts are not the very same findings (`stand_or_fall_together`).
    then = earlier.stood if earlier is not None else previous.stood if previous is not None else None
    stood = stand_or_fall_together(ctx, then if isinstance(then, Stood) else None)
    return Correlation(stood.after, ctx, kubelet, network, pod_logs, kubelet_clock, stood)


def _kubelet(ctx: Context, earlier: Earlier | None) -> Clock:
    """The kubelet domain's verdicts, asking their own clock (carried on into the correlation's); an
    earlier scan's when they read the very same inputs (`_kubelet_alike`)."""
    if earlier is not None and _kubelet_alike(ctx, earlier):
        ctx.findings.extend(earlier.kubelet)
        ctx.clock.merge(earlier.kubelet_clock)
        ctx.reused += len(earlier.kubelet)
        return earlier.kubelet_clock
    main = ctx.clock
    ctx.clock = own = main.blank()
    try:
        correlate_kubelet(ctx)
    finally:
        ctx.clock = main
    main.merge(own)
    return own


_KUBELET_READS = ("pod_dirs", "pod_logs", "mounts", "cni_cache", "static_pods")
"""What the kubelet domain reads of an inventory: its records, the volumes' mounts, the cache entries
(that name an absent pod directory's owner) and the static pod manifests."""


def _kubelet_alike(ctx: Context, earlier: Earlier) -> bool:
    """Whether the kubelet domain would judge as it did in `earlier`: the same policy and node, the same
    records it reads, the same static pods and mirrors, for every pod directory the same pod of its UID,
    and a time that answers every question its verdicts asked alike. It reads nothing else (`kubelet.py`
    reads the context's pods only by a directory's UID, `Context.static_owner` and the time)."""
    if not (same_policy(ctx.policy, earlier.policy) and ctx.desired.node == earlier.node
            and earlier.kubelet_clock.answers_as(ctx.clock)):
        return False
    inv, then = ctx.inv, earlier.inv
    if not all(getattr(inv, name) == getattr(then, name) for name in _KUBELET_READS):
        return False
    if tuple(ctx.mirrored) != earlier.mirrored or tuple(ctx.unmirrored) != earlier.unmirrored:
        return False
    by_uid, then_uid = ctx.pods.by_uid, earlier.by_uid
    for pod_dir in inv.pod_dirs:
        now_pod, then_pod = by_uid.get(pod_dir.uid), then_uid.get(pod_dir.uid)
        if now_pod is not then_pod and now_pod != then_pod:
            return False
    return True
