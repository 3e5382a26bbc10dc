"""Executors: the host executor calls one reclaim function per kind; the dry-run executor records.

The engine hands over re-verified items in a fixed order (attachments through CNI DEL first, then what
DEL leaves, then mounts, then directories) and gets one outcome per item through `on_outcome`, which
persists it before the next item is touched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nodegc.faults import fault_point
from nodegc.model.items import Item
from nodegc.model.resources import (
    CNICacheEntry,
    HostportRule,
    IPReservation,
    IptablesChain,
    NetnsEntry,
    PodDir,
    VethLink,
    VolumeDir,
)
from nodegc.planning.phases import Resource
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import Roots

Batch = Sequence[tuple[Item, Resource]]
OnOutcome = Callable[[Item, Outcome], None]


class Executor(Protocol):
    def execute(self, batch: Batch, *, on_outcome: OnOutcome) -> None: ...


@dataclass
class DryRunExecutor:
    """Does nothing and records what the host executor would have done, in the same order."""

    actions: list[str] = field(default_factory=list)

    def execute(self, batch: Batch, *, on_outcome: OnOutcome) -> None:
        for item, resource in batch:
            action = f"would {describe(resource)}"
            self.actions.append(action)
            on_outcome(item, Outcome(ok=False, detail=f"dry-run: {action}", skipped=True))


def describe(resource: Resource) -> str:
    match resource:
        case CNICacheEntry():
            return (f"run CNI DEL for {resource.network} container {resource.container_id[:12]} with the cached"
                    f" config, then remove {resource.path}")
        case IPReservation():
            return f"release IP {resource.ip} in {resource.network} (if it still names {resource.container_id})"
        case HostportRule():
            return f"delete rule '{resource.rule}' ({resource.table})"
        case IptablesChain():
            return f"flush and delete chain {resource.table}/{resource.name} and the jumps into it"
        case VethLink():
            return f"delete link {resource.name}"
        case NetnsEntry():
            return f"unmount and remove netns {resource.path}"
        case VolumeDir():
            return f"unmount {resource.path}"
        case PodDir():
            return f"remove pod directory {resource.path}"


@dataclass
class HostExecutor:
    roots: Roots
    timeout: float = 30.0
    unmount_timeout: float = 10.0

    def execute(self, batch: Batch, *, on_outcome: OnOutcome) -> None:
        from nodegc.reclaim.cni_del import remove_cache_entry
        from nodegc.reclaim.filesystem import remove_pod_dir
        from nodegc.reclaim.network import cni_del, delete_veth, release_ip, remove_netns, remove_rules
        from nodegc.reclaim.unmounting import unmount_volume

        rule_items = [(i, r) for i, r in batch if isinstance(r, IptablesChain | HostportRule)]
        rules_done = False
        deleted: list[tuple[Item, CNICacheEntry, Outcome]] = []
        for item, resource in batch:
            kind = item.kind.value
            if isinstance(resource, IptablesChain | HostportRule):
                if not rules_done:
                    rules_done = True
                    self._rules(rule_items, on_outcome, remove_rules)
                continue
            fault_point(f"before_clean:{kind}")
            outcome: Outcome
            match resource:
                case CNICacheEntry():
                    # DEL now; the cache file, the evidence tying netns and chains to the pod, goes last.
                    outcome = cni_del(resource, roots=self.roots, timeout=self.timeout, keep_cache=True)
                    fault_point("after_del:cni_cache")
                    if outcome.ok and not outcome.already_gone:
                        deleted.append((item, resource, outcome))
                        continue
                case IPReservation():
                    outcome = release_ip(resource, roots=self.roots)
                case VethLink():
                    outcome = delete_veth(resource, net_ns=self.roots.net_ns)
                case NetnsEntry():
                    outcome = remove_netns(resource)
                case VolumeDir():
                    outcome = unmount_volume(resource, proc_root=self.roots.proc_root, timeout=self.unmount_timeout)
                case PodDir():
                    outcome = remove_pod_dir(resource, kubelet_root=self.roots.kubelet_root,
                                             proc_root=self.roots.proc_root)
            fault_point(f"after_clean:{kind}")
            on_outcome(item, outcome)
        for item, entry, _ in deleted:
            fault_point("before_clean:cni_cache_file")
            outcome = remove_cache_entry(entry)
            fault_point("after_clean:cni_cache")
            on_outcome(item, outcome)

    def _rules(
        self,
        items: Sequence[tuple[Item, Resource]],
        on_outcome: OnOutcome,
        remove_rules: Callable[..., dict[str, Outcome]],
    ) -> None:
        """All chains and hostport rules of one cycle go through one iptables-restore per family."""
        chains = [r for _, r in items if isinstance(r, IptablesChain)]
        rules = [r for _, r in items if isinstance(r, HostportRule)]
        fault_point("before_clean:iptables")
        outcomes = remove_rules(chains, rules, net_ns=self.roots.net_ns, timeout=self.timeout)
        fault_point("after_clean:iptables")
        for item, resource in items:
            key = resource.name if isinstance(resource, IptablesChain) else resource.rule  # type: ignore[union-attr]
            on_outcome(item, outcomes.get(key, Outcome.failed("no outcome reported for it")))

