"""Executors: the host executor calls one reclaim function per kind; the dry-run executor records.

The engine hands over re-verified items in a fixed order (attachments through CNI DEL first, then what
DEL leaves, then mounts, then directories) and gets one outcome per item through `on_outcome`, which
persists it before the next item is touched.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from nodegc import defaults
from nodegc.faults import fault_point
from nodegc.model.items import Item
from nodegc.model.resources import (
    CNICacheEntry,
    FirewallRule,
    HostportRule,
    IPReservation,
    IptablesChain,
    NetnsEntry,
    PodDir,
    PodLogDir,
    VethLink,
    VolumeDir,
)
from nodegc.model.runtime import RuntimeLeftover, RuntimeSandbox
from nodegc.observe.logs import get_logger
from nodegc.planning.phases import Resource
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import Roots

log = get_logger("nodegc.reclaim")

Batch = Sequence[tuple[Item, Resource]]
DEL_ATTEMPTS_BEFORE_DIRECT = 3
"""CNI DEL failures of one sandbox before its parts are reclaimed without the plugins."""
OnOutcome = Callable[[Item, Outcome], None]


class Executor(Protocol):
    destructive: bool
    """False for an executor that changes nothing: the engine then writes no checkpoint for it."""

    def execute(self, batch: Batch, *, on_outcome: OnOutcome) -> None: ...


@dataclass
class DryRunExecutor:
    """Does nothing and records what the host executor would have done, in the same order."""

    actions: list[str] = field(default_factory=list)
    destructive: bool = False

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
        case PodLogDir():
            return f"remove pod log directory {resource.path}"
        case FirewallRule():
            return f"delete firewall rule '{resource.rule}' (while no other container holds {resource.ip})"
        case RuntimeLeftover() if resource.what == "shim":
            return f"stop shim {resource.id[:12]} (pid {resource.pid}): SIGTERM, then SIGKILL"
        case RuntimeLeftover():
            mount = f"unmount {resource.mount_point}, then " if resource.mounted else ""
            return f"{mount}remove {resource.what} {resource.path}"
        case RuntimeSandbox():
            return (f"ask the runtime to stop, then remove sandbox {resource.id[:12]} of"
                    f" {resource.pod_namespace}/{resource.pod_name} (CRI StopPodSandbox, RemovePodSandbox)")


@dataclass
class HostExecutor:
    roots: Roots
    timeout: float = 30.0
    unmount_timeout: float = 10.0
    destructive: bool = True
    runtime_endpoint: str | None = None
    """CRI endpoint for sandboxes (StopPodSandbox, RemovePodSandbox); None: sandboxes are not touched."""
    runtime_timeout: float = 60.0
    runtime_state_dir: Path | None = None
    """containerd's state directory: its leftover directories, and its netns files
    (`<state>/io.containerd.grpc.v1.cri/netns`), are removed only inside it; None: neither."""
    runc_root: Path | None = Path(defaults.RUNC_ROOT)
    """The runc shim's state root: a reclaimed task bundle's `<root>/k8s.io/<id>` goes with it; None: kept."""
    cgroup_root: Path | None = Path(defaults.CGROUP_ROOT)
    """Where the cgroup hierarchies are mounted: a reclaimed task bundle's empty container cgroups (cgroupfs
    driver) go with it; None: kept."""
    direct_teardown: bool = True
    """CNI attachments whose plugins nodegc knows completely are torn down without running them
    (`reclaim.teardown`); False runs CNI DEL for every attachment."""
    del_parallelism: int = 4
    """CNI DELs run at once for different sandboxes, as a runtime runs them."""
    iptables_backend: str = "auto"
    """Whose iptables-save/-restore: legacy, nft, default, or auto (detected, as kube-proxy does)."""

    def execute(self, batch: Batch, *, on_outcome: OnOutcome) -> None:
        _HostRun(self, on_outcome).run(batch)


class _HostRun:
    """One batch. A sandbox's items share a fate: when its CNI DEL fails, the rest of it waits (the DEL may
    still need it), and its cache entry, the evidence tying the rest to the dead pod, goes last and only
    once everything else of that sandbox is gone."""

    def __init__(self, executor: HostExecutor, on_outcome: OnOutcome) -> None:
        self.x = executor
        self.on_outcome = on_outcome
        self.failed_del: set[str] = set()
        self.results: dict[str, list[bool]] = {}
        self.deleted: list[tuple[Item, CNICacheEntry]] = []
        self.direct: set[str] = set()
        """Sandboxes reclaimed without a successful DEL (it kept failing)."""
        self.torn_down: set[str] = set()
        """Sandboxes whose DEL nodegc did itself (`reclaim.teardown`)."""
        self.resumed: dict[str, str] = {}
        """Cache entries whose DEL succeeded only once resumed after their siblings' (item key: how)."""

    def report(self, item: Item, outcome: Outcome) -> None:
        if item.container_id:
            self.results.setdefault(item.container_id, []).append(outcome.ok)
        self.on_outcome(item, outcome)

    def held(self, item: Item) -> bool:
        if item.container_id in self.failed_del:
            self.report(item, Outcome.failed("CNI DEL of this sandbox failed; kept until it succeeds"))
            return True
        return False

    def run(self, batch: Batch) -> None:
        rules_done = veths_done = dels_done = firewall_done = ips_done = False
        for item, resource in batch:
            if isinstance(resource, IptablesChain | HostportRule):
                if not rules_done:
                    rules_done = True
                    self.rules([(i, r) for i, r in batch
                                if isinstance(r, IptablesChain | HostportRule) and not self.held(i)])
                continue
            if isinstance(resource, FirewallRule):
                if not firewall_done:
                    firewall_done = True
                    self.firewall([(i, r) for i, r in batch if isinstance(r, FirewallRule) and not self.held(i)])
                continue
            if isinstance(resource, CNICacheEntry):
                if not dels_done:
                    dels_done = True
                    self.cni_dels([(i, r) for i, r in batch if isinstance(r, CNICacheEntry)])
                continue
            if isinstance(resource, IPReservation):
                if not ips_done:
                    ips_done = True
                    self.ips([(i, r) for i, r in batch if isinstance(r, IPReservation) and not self.held(i)])
                continue
            if isinstance(resource, VethLink):
                if not veths_done:
                    veths_done = True
                    self.veths([(i, r) for i, r in batch if isinstance(r, VethLink) and not self.held(i)])
                continue
            if not self.held(item):
                fault_point(f"before_clean:{item.kind.value}")
                try:
                    outcome = self.reclaim(resource)
                except Exception as e:  # fails this item (retried with backoff), never the batch
                    log.exception("reclaim step raised", item=item.key)
                    outcome = Outcome.failed(f"reclaim step raised {type(e).__name__}: {e}")
                fault_point(f"after_clean:{item.kind.value}")
                self.report(item, outcome)
        self.cache_files()

    def cni_dels(self, entries: Sequence[tuple[Item, CNICacheEntry]]) -> None:
        """Every attachment of the batch: those whose plugins nodegc knows torn down together, the others
        through CNI DEL, several at once; the outcomes are then handled in batch order."""
        from nodegc.reclaim.teardown import Teardown, identifier, plan, tear_down

        roots = self.x.roots
        identify = identifier(roots.cni_bin_dirs)
        direct: list[tuple[Item, Teardown]] = []
        via_plugins: list[tuple[Item, CNICacheEntry]] = []
        for item, entry in entries:
            td = plan(entry, roots=roots, identify=identify) if self.x.direct_teardown else "turned off"
            if isinstance(td, Teardown):
                direct.append((item, td))
            else:
                via_plugins.append((item, entry))
                log.debug("CNI DEL through the plugins", item=item.key, reason=td)
        fault_point("before_clean:cni_cache")
        outcomes: dict[str, Outcome] = {}
        if direct:
            budget = self.x.timeout * (1 + len(direct) // 100)
            try:
                done = tear_down([td for _, td in direct], roots=roots, timeout=budget,
                                 iptables_backend=self.x.iptables_backend,
                                 runtime_state_dir=self.x.runtime_state_dir)
            except Exception as e:
                log.exception("direct teardown raised")
                done = [Outcome.failed(f"direct teardown raised {type(e).__name__}: {e}") for _ in direct]
            outcomes.update((item.key, o) for (item, _), o in zip(direct, done, strict=True))
            self.torn_down.update(td.entry.container_id for _, td in direct)
        outcomes.update(self._run_dels(via_plugins))
        fault_point("after_del:cni_cache")
        for item, entry in entries:
            self.after_del(item, entry, outcomes[item.key])

    def _run_dels(self, entries: Sequence[tuple[Item, CNICacheEntry]]) -> dict[str, Outcome]:
        """DELs of different sandboxes run at once; the attachments of one sandbox on one network (two
        interfaces, as multus makes them) run one after the other, in one worker (`_dels_of_one_network`)."""
        from concurrent.futures import ThreadPoolExecutor

        groups: dict[tuple[str, str], list[tuple[Item, CNICacheEntry]]] = {}
        for item, entry in entries:
            groups.setdefault((entry.container_id, entry.network), []).append((item, entry))
        if len(groups) <= 1 or self.x.del_parallelism <= 1:
            return {k: o for group in groups.values() for k, o in self._dels_of_one_network(group).items()}
        with ThreadPoolExecutor(max_workers=self.x.del_parallelism, thread_name_prefix="cni-del") as pool:
            futures = [pool.submit(self._dels_of_one_network, group) for group in groups.values()]
            return {k: o for future in futures for k, o in future.result().items()}

    def _dels_of_one_network(self, group: Sequence[tuple[Item, CNICacheEntry]]) -> dict[str, Outcome]:
        """The DELs of one sandbox's attachments to one network. Their plugins share state keyed by network
        and container id: the bridge plugin's masquerade chain above all, which each attachment's DEL
        flushes and then fails to delete while a sibling's jump to it is left (`CHAIN_DEL failed (Device or
        resource busy)`). Once every sibling's DEL has run, a DEL that failed is resumed once at the plugin
        that failed, as a runtime's retried teardown would run it again, without repeating the DELs of the
        plugins that succeeded."""
        from nodegc.reclaim.cni_del import DelProgress
        from nodegc.reclaim.network import cni_del

        def one(entry: CNICacheEntry, progress: DelProgress) -> Outcome:
            try:
                return cni_del(entry, roots=self.x.roots, timeout=self.x.timeout, keep_cache=True,
                               runtime_state_dir=self.x.runtime_state_dir, progress=progress)
            except Exception as e:  # one sandbox's odd input fails that sandbox, never the batch
                log.exception("CNI DEL raised", entry=entry.path)
                return Outcome.failed(f"CNI DEL raised {type(e).__name__}: {e}")

        progress = {item.key: DelProgress() for item, _ in group}
        outcomes = {item.key: one(entry, progress[item.key]) for item, entry in group}
        if len(group) < 2:
            return outcomes
        for item, entry in group:
            first = outcomes[item.key]
            plugin = progress[item.key].failed_plugin
            if first.ok or first.identity_changed or plugin is None:
                continue
            others = ", ".join(e.ifname for i, e in group if i.key != item.key)
            again = one(entry, progress[item.key])
            log.info("CNI DEL resumed after its siblings on the network", item=item.key, plugin=plugin,
                     siblings=others, ok=again.ok, first_error=first.detail)
            if again.ok:
                self.resumed[item.key] = f"{plugin} DEL resumed after {others} on {entry.network}"
            outcomes[item.key] = again
        return outcomes

    def after_del(self, item: Item, entry: CNICacheEntry, outcome: Outcome) -> None:
        if outcome.ok and not outcome.already_gone:
            self.deleted.append((item, entry))
            return
        if not outcome.ok and item.container_id and not outcome.identity_changed:
            if item.attempts + 1 < DEL_ATTEMPTS_BEFORE_DIRECT:
                self.failed_del.add(item.container_id)
            else:
                # DEL keeps failing (e.g. the bridge plugin fails when its chain is already gone): reclaim the
                # sandbox's parts directly, as for one without a cache entry, and drop the entry last.
                log.warning("CNI DEL keeps failing; reclaiming the sandbox directly", item=item.key,
                            attempts=item.attempts + 1, error=outcome.detail)
                self.direct.add(entry.container_id)
                self.deleted.append((item, entry))
                return
        self.on_outcome(item, outcome)

    def reclaim(self, resource: Resource) -> Outcome:
        from nodegc.reclaim.filesystem import remove_pod_dir
        from nodegc.reclaim.network import delete_veth, remove_netns
        from nodegc.reclaim.unmounting import unmount_volume

        roots = self.x.roots
        match resource:
            case IPReservation():
                from nodegc.reclaim.ipam import release_ip

                return release_ip(resource, roots=roots)
            case VethLink():
                return delete_veth(resource, net_ns=roots.net_ns)
            case NetnsEntry():
                return remove_netns(resource, netns_dir=roots.netns_dir, runtime_state_dir=self.x.runtime_state_dir)
            case VolumeDir():
                return unmount_volume(resource, proc_root=roots.proc_root, timeout=self.x.unmount_timeout)
            case PodDir():
                return remove_pod_dir(resource, kubelet_root=roots.kubelet_root, proc_root=roots.proc_root)
            case PodLogDir():
                from nodegc.reclaim.removing import remove_dir_in

                if os.path.dirname(resource.path) not in (os.fsdecode(roots.pod_log_dir),
                                                          os.path.realpath(roots.pod_log_dir)):
                    return Outcome.failed(f"refused: {resource.path} is not directly in {roots.pod_log_dir}")
                return remove_dir_in(roots.pod_log_dir, os.path.basename(resource.path), inode=resource.inode,
                                     proc_root=roots.proc_root)
            case RuntimeLeftover():
                from nodegc.reclaim.runtime_leftovers import remove_runtime_dir, stop_shim

                if resource.what == "shim":
                    return stop_shim(resource, endpoint=self.x.runtime_endpoint, timeout=self.x.runtime_timeout,
                                     proc_root=roots.proc_root)
                if resource.what in ("sandbox_dir", "task_dir"):
                    return remove_runtime_dir(resource, state_dir=self.x.runtime_state_dir,
                                              endpoint=self.x.runtime_endpoint, timeout=self.x.runtime_timeout,
                                              unmount_timeout=self.x.unmount_timeout, proc_root=roots.proc_root,
                                              runc_root=self.x.runc_root, cgroup_root=self.x.cgroup_root)
                return Outcome.failed(f"refused: a {resource.what} leftover is not reclaimed")
            case RuntimeSandbox():
                from nodegc.reclaim.sandboxes import remove_sandbox

                return remove_sandbox(resource, endpoint=self.x.runtime_endpoint, timeout=self.x.runtime_timeout)
        return Outcome.failed(f"no executor for {type(resource).__name__}")

    def firewall(self, items: Sequence[tuple[Item, Resource]]) -> None:
        """The firewall plugin's rules of one cycle, each checked against the reservations, in one
        iptables-restore per family."""
        from nodegc.reclaim.firewall import remove_firewall_rules

        if not items:
            return
        rules = [(r, i.container_id) for i, r in items if isinstance(r, FirewallRule)]
        fault_point("before_clean:firewall_rule")
        outcomes = _guarded("firewall rules", len(items), lambda: remove_firewall_rules(
            rules, roots=self.x.roots, timeout=self.x.timeout, backend=self.x.iptables_backend))
        fault_point("after_clean:firewall_rule")
        for (item, _), outcome in zip(items, outcomes, strict=True):
            self.report(item, outcome)

    def ips(self, items: Sequence[tuple[Item, Resource]]) -> None:
        """All reservations of one cycle: host-local's lock of each network taken once for all of its
        reservations (a busy lock costs one timeout per network), each compared before its removal."""
        from nodegc.reclaim.ipam import release_ips

        if not items:
            return
        fault_point("before_clean:ip_reservation")
        outcomes = _guarded("IP reservations", len(items), lambda: release_ips(
            [r for _, r in items if isinstance(r, IPReservation)], roots=self.x.roots))
        fault_point("after_clean:ip_reservation")
        for (item, _), outcome in zip(items, outcomes, strict=True):
            self.report(item, outcome)

    def veths(self, items: Sequence[tuple[Item, Resource]]) -> None:
        """All veths of one cycle on one netlink socket, each compared before its delete."""
        from nodegc.reclaim.veth import delete_veths

        if not items:
            return
        fault_point("before_clean:veth")
        outcomes = _guarded("veths", len(items), lambda: delete_veths(
            [r for _, r in items if isinstance(r, VethLink)], net_ns=self.x.roots.net_ns))
        fault_point("after_clean:veth")
        for (item, _), outcome in zip(items, outcomes, strict=True):
            self.report(item, outcome)

    def rules(self, items: Sequence[tuple[Item, Resource]]) -> None:
        """All chains and hostport rules of one cycle go through one iptables-restore per family."""
        from nodegc.reclaim.network import remove_rules

        if not items:
            return
        chains = [r for _, r in items if isinstance(r, IptablesChain)]
        rules = [r for _, r in items if isinstance(r, HostportRule)]
        fault_point("before_clean:iptables")
        try:
            outcomes = remove_rules(chains, rules, net_ns=self.x.roots.net_ns, timeout=self.x.timeout,
                                    backend=self.x.iptables_backend)
        except Exception as e:  # fails these items (retried with backoff), never the batch
            log.exception("removing rules raised")
            outcomes = {}
            missing = Outcome.failed(f"removing rules raised {type(e).__name__}: {e}")
        else:
            missing = Outcome.failed("no outcome reported for it")
        fault_point("after_clean:iptables")
        for item, resource in items:
            key = resource.name if isinstance(resource, IptablesChain) else getattr(resource, "rule", "")
            self.report(item, outcomes.get(key, missing))

    def cache_files(self) -> None:
        from nodegc.reclaim.cni_del import remove_cache_entry

        for item, entry in self.deleted:
            if not all(self.results.get(entry.container_id, [])):
                self.on_outcome(item, Outcome.failed(
                    "CNI DEL done; cache entry kept until the sandbox's other leftovers are gone"))
                continue
            fault_point("before_clean:cni_cache_file")
            outcome = remove_cache_entry(entry)
            fault_point("after_clean:cni_cache")
            if entry.container_id in self.torn_down and outcome.ok:
                outcome = dataclasses.replace(outcome, detail=f"torn down directly; {outcome.detail}")
            if item.key in self.resumed and outcome.ok:
                outcome = dataclasses.replace(outcome, detail=f"{self.resumed[item.key]}; {outcome.detail}")
            if entry.container_id in self.direct:
                outcome = dataclasses.replace(
                    outcome, detail=f"CNI DEL kept failing; the sandbox was reclaimed directly: {outcome.detail}")
            self.on_outcome(item, outcome)


def _guarded(what: str, count: int, call: Callable[[], list[Outcome]]) -> list[Outcome]:
    """A batched step's outcomes; an exception out of it fails its items (retried), never the batch."""
    try:
        return call()
    except Exception as e:
        log.exception("batched reclaim step raised", step=what)
        return [Outcome.failed(f"removing {what} raised {type(e).__name__}: {e}")] * count
