"""Correlation with the container runtime's word: sandboxes as owners of network attachments, and as
residue of their own.

Pure: no I/O. Runs after the kubelet and network domains and revises their verdicts on attachments where
the runtime knows better (docs/ownership.md, "With the runtime's word"):
- anything tied to a READY sandbox is in use, whatever the API says; so are the pod directory and volumes
  of a UID whose sandbox is READY or has containers not exited (the pod runs, whatever the API says);
- an attachment whose container id names no sandbox the runtime knows is residue once old enough (this
  resolves id-only host-local files and the old sandboxes of live pods after a reboot), unless a live
  pod or a READY sandbox claims one of its IPs;
- a netns path a sandbox names is that sandbox's;
- an attachment of a NotReady sandbox the runtime still holds waits for the runtime's own teardown
  (the newest sandbox of a pod still starting stays protected);
- without a runtime (none configured, its socket never there) today's rules stand; with one whose view is
  not usable (unreachable, an empty or incomplete list on a node with running pods) nothing here is
  concluded, and what today's rules call residue of a pod (its directory, volumes and attachments) waits
  for the runtime's word: only the runtime could say that the pod no longer runs.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from nodegc.model.findings import Finding, FindingClass, Owner
from nodegc.model.pods import OwnerState, Pod
from nodegc.model.resources import Inventory, Kind, NetnsEntry, VethLink
from nodegc.model.runtime import UNTOLD_PROCESS, RuntimeLeftover, RuntimeSandbox, RuntimeView
from nodegc.planning.context import HOLDING, Context, short
from nodegc.planning.owners import entry_key, netns_key, normalize_ip
from nodegc.planning.phases import hostport_rule_id

_RUNTIME_NETNS_NAME = re.compile(r"cni-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""containerd's names for the namespaces it makes (pkg/netns: "cni-" and 16 random bytes as a UUID)."""

_KUBELET_KINDS = frozenset({Kind.POD_DIR, Kind.VOLUME_MOUNT})
"""The kubelet's parts of a pod, kept by UID: in use while the runtime shows that pod running."""


def _waiting(f: Finding, why: str | None) -> Finding:
    """A pod directory, volume or attachment the rules without the runtime call residue, kept while the
    runtime cannot be asked whether its pod still runs: its socket there, its answer not, or a list that is
    not its whole word (`runtime_unusable`; what such a list shows still counts: `_running_pod`, `_tied`)."""
    if not f.cls.is_residue or why is None:
        return f
    return dataclasses.replace(f, cls=FindingClass.PROTECTED,
                               evidence=(*f.evidence, f"needs the runtime's word: {why}"))


_RESIDUE_OF = {
    Kind.IP_RESERVATION: FindingClass.LEAKED_IP,
    Kind.CNI_CACHE: FindingClass.STALE_CNI_CACHE,
    Kind.IPTABLES_CHAIN: FindingClass.LEAKED_CHAIN,
    Kind.HOSTPORT_RULE: FindingClass.LEAKED_HOSTPORT_RULE,
    Kind.NETNS: FindingClass.LEAKED_NETNS,
    Kind.VETH: FindingClass.DANGLING_VETH,
}


def runtime_unusable(view: RuntimeView | None, pods: Iterable[Pod]) -> str | None:
    """Why the runtime's view carries no evidence this scan (None: it does). No view at all is no
    reason: the node has no runtime to ask (the offline forensic mode), and today's rules apply.

    A list that shows no sandbox at all while pods run, or none for some running pod, is not the node's
    runtime's whole word (another runtime's socket, a runtime that just lost its state and whose pods the
    kubelet has not recreated yet): nothing is concluded from it until every running pod has a sandbox."""
    if view is None:
        return None
    if not view.reachable:
        return f"runtime {view.endpoint} unreachable: {view.error}"
    running = [p for p in pods if p.state is OwnerState.LIVE and not p.host_network]
    if not view.sandboxes and running:
        return f"runtime {view.endpoint} lists no sandbox while {len(running)} pods run on this node"
    known = {sb.pod_uid for sb in view.sandboxes}
    missing = [p for p in running if p.uid not in known and (p.static_uid or "") not in known]
    if missing:
        return (f"runtime {view.endpoint} lists no sandbox for {len(missing)} running pod(s), e.g."
                f" {missing[0].namespace}/{missing[0].name}")
    return None


def _running_pods(ctx: Context) -> tuple[Pod, ...]:
    return ctx.desired.pods


def correlate_runtime(ctx: Context) -> None:
    view = ctx.inv.runtime
    if view is None:
        return
    if not view.reachable:
        # The runtime that would say whether an absent or terminal pod still runs cannot answer: its
        # directory, volumes and network wait for its word, as its log directory does (`correlate_pod_logs`).
        why = _unusable(ctx)
        ctx.findings[:] = [_waiting(f, why) if f.kind in _KUBELET_KINDS or f.kind in _RESIDUE_OF else f
                           for f in ctx.findings]
        return
    # An incomplete list still proves what it shows (a READY sandbox is in use); it proves no absence.
    previous = ctx.runtime_pass if isinstance(ctx.runtime_pass, _Runtime) and ctx.runtime_pass.view is view else None
    runtime = _Runtime(ctx, view, complete=_unusable(ctx) is None, previous=previous)
    runtime.run()
    ctx.runtime_pass = runtime


def correlate_pod_logs(ctx: Context) -> None:
    """`<pod log dir>/<namespace>_<name>_<uid>`: the kubelet removes it when it removes the pod. Residue
    when no pod with that UID is in the API, the kubelet has no `pods/<uid>` left to work on, the runtime
    (when one was read) holds no sandbox of that UID, and it is older than the photographs."""
    view = ctx.inv.runtime
    unusable = _unusable(ctx)
    pod_dirs = {d.uid for d in ctx.inv.pod_dirs}
    sandbox_uids = {sb.pod_uid for sb in view.sandboxes} if view is not None and view.reachable else set()
    # Born after the runtime's view was read (less the minimum age): its sandbox may not be in the view.
    young = functools.partial(ctx.clock.viewed_after, offset=ctx.policy.min_age_seconds)
    for log_dir in ctx.inv.pod_logs:
        pod = ctx.pods.by_uid.get(log_dir.uid)
        cls, state, note = FindingClass.ORPHANED_POD_LOG_DIR, OwnerState.ABSENT, (
            f"no pod with uid {log_dir.uid} in the API, no pod directory, no sandbox")
        if pod is not None:
            cls, state, note = FindingClass.IN_USE, pod.state, f"pod uid {log_dir.uid} is {pod.phase}"
        elif log_dir.uid in sandbox_uids:
            cls, note = FindingClass.PROTECTED, "the runtime still holds a sandbox of it"
        elif unusable is not None:
            cls, note = FindingClass.PROTECTED, f"needs the runtime's word: {unusable}"
        elif log_dir.uid in pod_dirs:
            cls, note = FindingClass.PROTECTED, f"pods/{log_dir.uid} still exists: the kubelet is not done with it"
        elif young(log_dir.mtime):
            cls, note = FindingClass.PROTECTED, "younger than the photographs allow to judge"
        owner = Owner(uid=log_dir.uid, namespace=log_dir.namespace, name=log_dir.name)
        ctx.add(Finding(cls, Kind.POD_LOG_DIR, log_dir.path, owner, state, (note,)))


def _holder_of_addresses(ns: NetnsEntry, holders: dict[str, set[str]]) -> str | None:
    """The one container id whose host-local reservations hold every address inside the namespace (read,
    and at least one), for a namespace that neither the runtime nor a cache entry names (containerd's
    libcni writes no netns into its cache entries). An address no reservation explains, or one reserved
    by two containers (two networks), ties it to nobody."""
    if not ns.addresses_read or not ns.addresses:
        return None
    found: set[str] = set()
    for address in ns.addresses:
        held = holders.get(normalize_ip(address) or "", set())
        if len(held) != 1:
            return None
        found |= held
    cid = found.pop() if len(found) == 1 else None
    return cid or None


@dataclass(frozen=True)
class _Networks:
    """The CNI network of each record, by the id its finding has (the first record of an id, as a search
    would find it), and the networks of each container's reservations."""

    cache: dict[str, str]
    chains: dict[str, str | None]
    rules: dict[str, str | None]
    reservations: dict[str, set[str]]

    @classmethod
    def of(cls, inv: Inventory) -> _Networks:
        cache: dict[str, str] = {}
        for e in inv.cni_cache:
            cache.setdefault(e.path, e.network)
        chains: dict[str, str | None] = {}
        for c in inv.chains:
            chains.setdefault(c.name, c.network)
        rules: dict[str, str | None] = {}
        for r in inv.hostport_rules:
            rules.setdefault(hostport_rule_id(r), r.network)
        reservations: dict[str, set[str]] = defaultdict(set)
        for res in inv.ip_reservations:
            if res.container_id is not None:
                reservations[res.container_id].add(res.network)
        return cls(cache, chains, rules, reservations)


def _unusable(ctx: Context) -> str | None:
    """`runtime_unusable` of the context's runtime view and pods, worked out once a correlation."""
    if ctx.runtime_unusable is None:
        ctx.runtime_unusable = (runtime_unusable(ctx.inv.runtime, _running_pods(ctx)),)
    return ctx.runtime_unusable[0]



_Tie = tuple[str | None, float | None, tuple[str, ...]]
"""An attachment's sandbox id (or None), its age stamp and its IPs."""


@dataclass(frozen=True)
class _Indexes:
    """What a pass over the runtime's view needs that no namespace read changes, built once a scan: detect's
    second correlation takes it whole from the first (`_Runtime(previous=...)`)."""

    by_id: dict[str, RuntimeSandbox]
    by_pod: dict[str, list[RuntimeSandbox]]
    """Each pod's sandboxes, oldest first."""
    live_containers: dict[str, int]
    """Running or created containers by sandbox id."""
    by_netns: dict[str, RuntimeSandbox]
    """Sandboxes by the key of the netns path the runtime reports (where the runtime says it is)."""
    ready_ips: set[str]
    who: str
    files_of: dict[tuple[Kind, str], _Tie]
    """The ties of the attachments recorded in files and rules."""
    holders: dict[str, set[str]]
    """The container ids holding each reserved address."""
    cri_networks: set[str]
    networks: _Networks
    veths: dict[str, VethLink]

    @classmethod
    def of(cls, ctx: Context, view: RuntimeView) -> _Indexes:
        inv = ctx.inv
        by_id = view.by_id()
        by_pod: dict[str, list[RuntimeSandbox]] = defaultdict(list)
        for sb in view.sandboxes:
            by_pod[sb.pod_uid].append(sb)
        for sbs in by_pod.values():
            sbs.sort(key=lambda s: (s.created_at.timestamp() if s.created_at else float("inf"), s.attempt))
        live_containers: dict[str, int] = defaultdict(int)
        for c in view.containers:
            if c.state in ("running", "created"):
                live_containers[c.sandbox_id] += 1
        files_of, holders = _files(inv)
        known = set(by_id)
        return cls(
            by_id=by_id,
            by_pod=by_pod,
            live_containers=live_containers,
            # Two sandboxes may name one path (a dead sandbox's, reused by its pod's new one): a READY one wins.
            by_netns={k: sb for sb in sorted(view.sandboxes, key=lambda s: s.ready)
                      if (k := netns_key(sb.netns_path))},
            ready_ips={ip for sb in view.sandboxes if sb.ready for ip in (normalize_ip(i) for i in sb.ips) if ip},
            who=f"{view.runtime_name or 'runtime'} {view.runtime_version or ''}".strip(),
            files_of=files_of,
            holders=holders,
            cri_networks={r.network for r in inv.ip_reservations if r.container_id in known}
            | {e.network for e in inv.cni_cache if e.container_id in known},
            networks=_Networks.of(inv),
            veths={link.name: link for link in inv.veths},
        )


def _files(inv: Inventory) -> tuple[dict[tuple[Kind, str], _Tie], dict[str, set[str]]]:
    """The ties of the attachments recorded in files and rules (they do not depend on the namespaces),
    and the container ids holding each reserved address."""
    out: dict[tuple[Kind, str], _Tie] = {}
    for r in inv.ip_reservations:
        out[(Kind.IP_RESERVATION, f"{r.network}/{r.ip}")] = (r.container_id, r.mtime, (r.ip,))
    for e in inv.cni_cache:
        out[(Kind.CNI_CACHE, e.path)] = (e.container_id, e.mtime, e.ips)
    mtimes: dict[str, float] = {}
    for cid, mt in [(r.container_id, r.mtime) for r in inv.ip_reservations] + [
            (e.container_id, e.mtime) for e in inv.cni_cache]:
        if cid:
            mtimes[cid] = max(mtimes.get(cid, mt), mt)
    ips: dict[str, tuple[str, ...]] = {}
    for cid, _, found in out.values():
        if cid:  # every file of the container counts: a chain's rules may name any of its addresses
            ips[cid] = tuple(dict.fromkeys((*ips.get(cid, ()), *found)))
    for ch in inv.chains:
        cid = ch.container_id
        out[(Kind.IPTABLES_CHAIN, ch.name)] = (cid, mtimes.get(cid or ""), ips.get(cid or "", ()))
    for rule in inv.hostport_rules:
        cid = rule.container_id
        out[(Kind.HOSTPORT_RULE, hostport_rule_id(rule))] = (cid, mtimes.get(cid or ""), ips.get(cid or "", ()))
    holders: dict[str, set[str]] = defaultdict(set)
    for r in inv.ip_reservations:
        if (ip := normalize_ip(r.ip)) is not None:
            holders[ip].add(r.container_id or "")
    return out, holders


class _Runtime:
    def __init__(self, ctx: Context, view: RuntimeView, *, complete: bool = True,
                 previous: _Runtime | None = None) -> None:
        """`previous`: the pass of a correlation whose context this one's was built from (`Context.build`
        with a previous context: the same scan, only its namespaces' addresses read since). What does not
        depend on the namespaces is taken from it: the indexes, the files' ties, the sandboxes' and
        leftovers' own findings."""
        self.ctx = ctx
        self.view = view
        self.complete = complete
        """False: the list misses running pods' sandboxes; only what it shows protects, nothing is residue."""
        self.netns_keys = {ns.path: entry_key(ns) for ns in ctx.inv.netns}
        self.netns_by_path = {ns.path: ns for ns in ctx.inv.netns}
        self.not_theirs: dict[str, RuntimeSandbox] = {}
        """Netns paths tied by address to a sandbox the runtime lists with another netns path."""
        self.own: tuple[Finding, ...] | None = None
        """The sandboxes' and leftovers' findings: they depend on no other finding and no namespace."""
        self.index: _Indexes
        if previous is not None and previous.complete == complete:
            self.index, self.own = previous.index, previous.own
        else:
            self.index = _Indexes.of(ctx, view)
        self.cid_of = self._container_ids()

    def run(self) -> None:
        revised = [self._revise(f) for f in self.ctx.findings]
        self.ctx.findings[:] = revised
        if self.own is None:
            self.own = self._own()
        self.ctx.findings.extend(self.own)

    def _own(self) -> tuple[Finding, ...]:
        out: list[Finding] = []
        for sb in self.view.sandboxes:
            out.append(self._sandbox(sb))
        if self.complete:
            out.extend(self._leftovers())
        return tuple(out)

    # -- containerd's own leftovers ---------------------------------------------------------------

    def _leftovers(self) -> list[Finding]:
        """What containerd keeps by id and no longer lists. A shim first: while it runs, its sandbox's
        directories stay (its processes may use them); they are reclaimed once it is gone."""
        # A container the runtime lists names its sandbox: that sandbox's dirs are the runtime's too, even
        # when the sandbox itself is not listed (listed between the two calls, or not loaded at recovery).
        known = set(self.index.by_id) | {i for c in self.view.containers for i in (c.id, c.sandbox_id) if i}
        shims = {left.id: left for left in self.view.leftovers if left.what == "shim"}
        busy = {i: left.busy for left in self.view.leftovers if left.what == "task_dir" and left.busy
                for i in (left.id, left.sandbox_id) if i}
        blind = self._leftovers_unjudgeable(shims)
        out: list[Finding] = []
        for left in self.view.leftovers:
            if left.what not in ("sandbox_dir", "task_dir", "shim"):
                continue  # netns files under the state dir are network namespaces (Kind.NETNS), not leftovers
            if left.id in known:
                continue  # the runtime's own: never touched
            out.append(self._leftover(left, known, shims, busy, blind))
        return out

    def _leftovers_unjudgeable(self, shims: dict[str, RuntimeLeftover]) -> str | None:
        """Why no leftover can be judged this scan, beyond the list's completeness for network attachments:
        - a running pod on the host network without a sandbox in the list: the list misses it (containerd's
          start-up recovery skips a sandbox it cannot load; its shim and processes run on), and its state
          dir and task bundles are exactly what the list does not show;
        - READY sandboxes listed, none of whose shims the process table shows: that table is not the
          node's (another pid namespace) or the shims' `-address` names another socket than the endpoint's, so
          "no shim of this id runs" and "its init process is gone" prove nothing."""
        uids = {sb.pod_uid for sb in self.view.sandboxes}
        missing = [p for p in self.ctx.desired.pods if p.state is OwnerState.LIVE and p.host_network
                   and p.uid not in uids and (p.static_uid or "") not in uids]
        if missing:
            return (f"the runtime lists no sandbox for running pod {missing[0].namespace}/{missing[0].name}"
                    " (host network): its list is not the node's whole word")
        untold = [left for left in self.view.leftovers
                  if left.what == "shim" and not left.id and (left.problem or "").startswith(UNTOLD_PROCESS)]
        if untold:
            return (f"pid {untold[0].pid}'s command line could not be read in time ({len(untold)} such): any"
                    " process may be a shim of any id, so which shims run cannot be told")
        ready = [sb.id for sb in self.view.sandboxes if sb.ready]
        if ready and not any(i in shims for i in ready):
            return (f"no shim of the {len(ready)} READY sandbox(es) the runtime lists is in the process table"
                    f" (e.g. {short(ready[0])}): it is not the node's, or the shims' -address is not"
                    " the endpoint's socket; which shims and init processes run cannot be told")
        return None

    def _leftover(self, left: RuntimeLeftover, known: set[str], shims: dict[str, RuntimeLeftover],
                  busy: dict[str, str], blind: str | None = None) -> Finding:
        state = "mounted" if left.mounted else f"pid {left.pid}" if left.pid else "not mounted"
        why = (f"{left.what} of id {short(left.id) or '?'} ({state}): the runtime ({self.index.who}) lists no such"
               " sandbox or container")

        def finding(cls: FindingClass, note: str) -> Finding:
            residue = cls in (FindingClass.ORPHANED_RUNTIME_DIR, FindingClass.ORPHANED_SHIM)
            return Finding(cls, Kind.RUNTIME_LEFTOVER, left.path, Owner(container_id=left.id or None),
                           OwnerState.ABSENT, (why, note), sandbox=left.id if residue else None)

        young = self.ctx.viewed_young(left.mtime)
        starting = self._starting_without_sandbox(left)
        if left.problem:
            return finding(FindingClass.RUNTIME_LEFTOVER, f"not reclaimed: {left.problem}")
        if blind:
            return finding(FindingClass.PROTECTED, f"not judged: {blind}")
        if starting:
            return finding(FindingClass.PROTECTED, starting)
        if left.what == "shim":
            if young:
                return finding(FindingClass.PROTECTED, "younger than the runtime's and the API's photographs")
            if not self.ctx.policy.stop_orphan_shims:
                return finding(FindingClass.RUNTIME_LEFTOVER, "reported; stopped only with --stop-orphan-shims")
            return finding(FindingClass.ORPHANED_SHIM, "stopped: SIGTERM, then SIGKILL")
        group = {i for i in (left.id, left.sandbox_id) if i}
        if left.sandbox_id and left.sandbox_id in known:
            return finding(FindingClass.RUNTIME_LEFTOVER, f"kept: its sandbox {short(left.sandbox_id)} is the"
                                                           " runtime's")
        if left.other_mounts:
            return finding(FindingClass.RUNTIME_LEFTOVER, f"not touched: mounted below it, not its own"
                                                           f" {(left.mount_point or '').rsplit('/', 1)[-1]}:"
                                                           f" {', '.join(left.other_mounts[:3])}")
        running = [shims[i] for i in sorted(group) if i in shims]
        if running:
            return finding(FindingClass.RUNTIME_LEFTOVER, f"kept while its shim (pid {running[0].pid}) runs")
        held = next((busy[i] for i in sorted(group) if i in busy), None)
        if held:
            return finding(FindingClass.RUNTIME_LEFTOVER, f"kept: {held}")
        if young:
            return finding(FindingClass.PROTECTED, "younger than the runtime's and the API's photographs")
        what = "its shm" if left.what == "sandbox_dir" else "its rootfs"
        return finding(FindingClass.ORPHANED_RUNTIME_DIR,
                       f"{what} unmounted (if mounted), then the directory removed" if left.mounted else
                       "the directory removed")

    # -- which sandbox an attachment belongs to -----------------------------------------------------

    def _container_ids(self) -> dict[tuple[Kind, str], _Tie]:
        """(kind, finding id) -> (sandbox id, age stamp, IPs) for every attachment of the scan."""
        inv = self.ctx.inv
        out = dict(self.index.files_of)
        holders = self.index.holders
        for ns in inv.netns:
            key = entry_key(ns)
            sb = self.index.by_netns.get(key)
            entries = self.ctx.cache.by_netns.get(key, [])
            cid = sb.id if sb else (entries[0].container_id if len({e.container_id for e in entries}) == 1 else None)
            if sb is None and not entries:
                cid = _holder_of_addresses(ns, holders)
                held_by = self.index.by_id.get(cid or "")
                if held_by is not None and (named := netns_key(held_by.netns_path)) and named != key:
                    # The sandbox whose reservations hold its addresses names another netns: this one is not
                    # that sandbox's (a dead sandbox's namespace holding an address given out again).
                    self.not_theirs[ns.path] = held_by
                    cid = None
            # Its addresses, and those of every cache entry naming it: a live pod's address keeps it.
            out[(Kind.NETNS, ns.path)] = (cid, ns.mtime, (*ns.addresses, *(ip for e in entries for ip in e.ips)))
        netns_cid = {ns.path: out[(Kind.NETNS, ns.path)] for ns in inv.netns}
        for link in inv.veths:
            out[(Kind.VETH, link.name)] = netns_cid.get(link.peer_netns_path or "", (None, None, ()))
        return out

    # -- attachments ------------------------------------------------------------------------------

    def _revise(self, f: Finding) -> Finding:
        if f.kind in _KUBELET_KINDS:
            return self._running_pod(f)
        if f.kind not in _RESIDUE_OF:
            return f
        sb = self.index.by_netns.get(self.netns_keys.get(f.id, "")) if f.kind is Kind.NETNS else None
        if sb is not None and (sb.ready or f.cls is not FindingClass.CONFLICT):
            # Where the runtime says a READY sandbox's netns is decides, over what cache entries or the
            # addresses inside suggested (the conflict stays on the entry that names it wrongly).
            return self._tied(f, sb, f"the runtime names {f.id} as the netns of sandbox {short(sb.id)}")
        if f.cls is FindingClass.CONFLICT:
            return f
        cid, mtime, ips = self.cid_of.get((f.kind, f.id), (None, None, ()))
        if not cid and (other := self._not_theirs(f)) is not None:
            if f.cls.is_residue or f.cls is FindingClass.IN_USE:
                return dataclasses.replace(f, cls=FindingClass.CONFLICT, evidence=(
                    *f.evidence, f"its addresses are sandbox {short(other.id)}'s, whose netns the runtime reports"
                    f" as {other.netns_path}: two namespaces hold them"))
            return f
        if not cid:
            # Tied to no id, yet a READY sandbox's address is inside (its own netns, keyed otherwise than its
            # path, of a terminal pod the kubelet has not stopped yet): never residue.
            f = self._ready_address(f, ips)
            return self._dead_netns(f) if f.kind is Kind.NETNS and f.cls is FindingClass.UNKNOWN else f
        sb = self.index.by_id.get(cid)
        if sb is not None:
            return self._tied(f, sb, f"container id {short(cid)} is sandbox {short(cid)} in the runtime")
        if not self.complete:
            return _waiting(self._protect_only(f, cid, ips), _unusable(self.ctx))  # absent from it proves nothing
        return self._unknown_to_runtime(f, cid, mtime, ips)

    def _running_pod(self, f: Finding) -> Finding:
        """A pod directory or volume the desired state calls residue (its pod absent, or terminal) while the
        runtime shows a sandbox of that UID READY, or with containers not exited: the pod still runs (an
        API that lost it, an etcd restored from a backup, a pod force-deleted before the kubelet stopped
        it, a phase that went wrong). Its files and mounts are in use, as its network is. A list that is not
        the runtime's whole word (empty while pods run, or missing a running pod's sandbox) cannot say the pod
        stopped, as an unreachable runtime cannot: they wait for its word (`_waiting`)."""
        if not f.cls.is_residue or f.owner.uid is None:
            return f
        for sb in self.index.by_pod.get(f.owner.uid, ()):
            live = self.index.live_containers.get(sb.id, 0)
            if sb.ready or live:
                why = "READY" if sb.ready else f"NotReady with {live} containers not exited"
                return dataclasses.replace(f, cls=FindingClass.IN_USE, evidence=(
                    *f.evidence, f"sandbox {short(sb.id)} of uid {f.owner.uid} is {why} in the runtime: the pod"
                    " still runs, whatever the API says"))
        return f if self.complete else _waiting(f, _unusable(self.ctx))

    def _dead_netns(self, f: Finding) -> Finding:
        """A mounted namespace nothing ties to anything (no sandbox, no cache entry, no pod's address): what
        a partial teardown leaves (the CNI DEL ran and removed the cache entry and the pod's veth, the
        runtime dropped the sandbox, the bind mount stayed). Residue only on proof that it is dead
        (`_not_proven_dead`); else it stays unknown and says what is missing."""
        ns = self.netns_by_path.get(f.id)
        if ns is None or not ns.mounted or self.ctx.cache.by_netns.get(entry_key(ns)):
            return f
        why = self._not_proven_dead(ns)
        if why is not None:
            return dataclasses.replace(f, evidence=(*f.evidence, f"not proven dead: {why}"))
        evidence = (*f.evidence, f"dead: no sandbox in the runtime's complete list ({self.index.who}) names it, no task"
                    " of the node's process table is inside it, and nodegc's mount table holds it once")
        if self.ctx.young(ns.mtime) or self.ctx.viewed_young(ns.mtime):
            return dataclasses.replace(f, cls=FindingClass.PROTECTED, evidence=(
                *evidence, "younger than the runtime's and the API's photographs allow to judge"))
        settle = max(self.ctx.policy.add_settle_seconds, self.ctx.policy.min_age_seconds)
        if self.ctx.clock.since(ns.mtime or 0.0, settle):
            # A sandbox re-created for a pod that stays Running (so none is starting) has its namespace before
            # its ADD, which may run this long (the cache entry comes at its end, the runtime lists the sandbox
            # after it), with no task inside between the plugins' steps: kept as a reservation would be.
            return dataclasses.replace(f, cls=FindingClass.PROTECTED, evidence=(
                *evidence, f"younger than {settle:.0f}s: a CNI ADD may still run in it"))
        return dataclasses.replace(f, cls=FindingClass.LEAKED_NETNS, owner_state=OwnerState.ABSENT, evidence=evidence)

    def _not_proven_dead(self, ns: NetnsEntry) -> str | None:
        """Why a namespace nothing ties to anything is not proven dead, or None. The proof: the runtime's
        list is complete and knows every sandbox's netns (none names this one); the file has the name the
        runtime gives its namespaces (cni-<uuid>) or lies in its state dir (not an `ip netns add` of the
        node's own); no pod on the node is still starting (a sandbox being made is listed only once its
        network is up); its addresses were read (no pod claims one: the network domain judged that) and
        none is the address of a sandbox the runtime lists (whose netns it reports elsewhere, or that it
        still holds); the namespace is mounted once (no other holder pins it through a bind of its own);
        and no task of the process table is inside it, a table shown to be the node's by a task in every
        READY sandbox's namespace (a table of another pid namespace shows no task anywhere)."""
        if not self.complete:
            return "the runtime's list is incomplete (running pods without a sandbox in it)"
        starting = self.ctx.pending_note()
        if starting is not None:
            # A sandbox being made has its namespace before the runtime lists it, and between the plugins'
            # steps nothing is inside it.
            return starting
        unread = [sb for sb in self.view.sandboxes if not sb.status_read]
        if unread:
            return f"the netns of sandbox {short(unread[0].id)} is not known (its status was not read)"
        if not (ns.runtime_dir or ns.runtime_keyed or _RUNTIME_NETNS_NAME.fullmatch(ns.name)):
            return f"{ns.name!r} is not a name the runtime gives its namespaces (cni-<uuid>)"
        if not ns.addresses_read:
            return "its addresses were not read"
        if ns.addresses:
            # An address a sandbox the runtime lists holds (READY, its netns reported under another key, or
            # NotReady and still held): the namespace is tied to that sandbox, whatever no pod's status says.
            listed = {ip: sb for sb in self.view.sandboxes for ip in (normalize_ip(i) for i in sb.ips) if ip}
            for address in ns.addresses:
                if (sb := listed.get(normalize_ip(address) or "")) is not None:
                    return (f"it holds {address}, an address of sandbox {short(sb.id)}, whose netns the runtime"
                            f" reports as {sb.netns_path or 'unknown'}")
        if ns.tasks is None:
            return "the tasks inside it were not counted"
        if ns.tasks:
            return f"{ns.tasks} task(s) of the process table are inside it"
        root = f"net:[{ns.ns_inode}]"
        mounted = sum(1 for m in self.ctx.inv.mounts if m.fs_type == "nsfs" and m.root == root)
        if mounted != 1:
            return f"its namespace is mounted {mounted} times in the mount table"
        ready = {k for sb in self.view.sandboxes if sb.ready and (k := netns_key(sb.netns_path))}
        seen = [w for w in self.ctx.inv.netns if w.mounted and entry_key(w) in ready]
        if not seen:
            return "no READY sandbox's namespace is there to show that the process table is the node's"
        empty = [w for w in seen if not w.tasks]
        if empty:
            return (f"the process table shows no task in READY sandbox namespace {empty[0].path}: it is not"
                    " the node's")
        return None

    def _not_theirs(self, f: Finding) -> RuntimeSandbox | None:
        """For a netns (or the veth into it) tied by its addresses to a sandbox that names another netns,
        that sandbox."""
        if f.kind is Kind.NETNS:
            return self.not_theirs.get(f.id)
        if f.kind is Kind.VETH:
            link = self.index.veths.get(f.id)
            return self.not_theirs.get(link.peer_netns_path or "") if link is not None else None
        return None

    def _protect_only(self, f: Finding, cid: str, ips: tuple[str, ...]) -> Finding:
        """What an incomplete list still proves: a READY sandbox's netns and addresses are in use."""
        keep = self._netns_of_another_sandbox(f, cid)
        if keep and (f.cls.is_residue or f.cls is FindingClass.IN_USE):
            return dataclasses.replace(f, cls=FindingClass.CONFLICT, evidence=(*f.evidence, keep))
        return self._ready_address(f, ips)

    def _ready_address(self, f: Finding, ips: tuple[str, ...]) -> Finding:
        """Residue holding a READY sandbox's address is kept (`conflict`): a live sandbox's address is never taken."""
        if not f.cls.is_residue or not self.index.ready_ips:
            return f
        hit = [ip for ip in (normalize_ip(i) for i in ips) if ip and ip in self.index.ready_ips]
        if hit and f.cls.is_residue:
            return dataclasses.replace(f, cls=FindingClass.CONFLICT,
                                       evidence=(*f.evidence, f"{hit[0]} is a READY sandbox's address"))
        return f

    def _tied(self, f: Finding, sb: RuntimeSandbox, why: str) -> Finding:
        owner = Owner(uid=sb.pod_uid or f.owner.uid, namespace=sb.pod_namespace or f.owner.namespace,
                      name=sb.pod_name or f.owner.name, container_id=sb.id)
        if sb.ready:
            return dataclasses.replace(f, cls=FindingClass.IN_USE, owner=owner,
                                       evidence=(*f.evidence, why, f"sandbox {short(sb.id)} is READY"))
        if self._newest_of_starting_pod(sb):
            note = f"sandbox {short(sb.id)} is NotReady but the newest of a pod still starting"
            return dataclasses.replace(f, cls=FindingClass.PROTECTED if f.cls.is_residue else f.cls, owner=owner,
                                       evidence=(*f.evidence, why, note))
        if self.complete and sb.id in self.ctx.policy.runtime_gave_up and f.kind in _RESIDUE_OF:
            _, mtime, ips = self.cid_of.get((f.kind, f.id), (sb.id, None, ()))
            if mtime is None and sb.created_at is not None:
                mtime = sb.created_at.timestamp()  # the part has no age of its own: its sandbox's (missing: young)
            judged = self._unknown_to_runtime(f, sb.id, mtime, ips)
            return dataclasses.replace(judged, evidence=(*judged.evidence, f"the runtime failed to remove sandbox"
                                                         f" {short(sb.id)} repeatedly: its turn is over"))
        # The runtime still holds the sandbox: its own teardown (StopPodSandbox runs CNI DEL) goes first.
        note = (f"sandbox {short(sb.id)} is NotReady and still held by the runtime; its parts wait until the"
                " runtime has removed it (orphaned_sandbox)")
        cls = FindingClass.PROTECTED if f.cls.is_residue or f.cls is FindingClass.IN_USE else f.cls
        return dataclasses.replace(f, cls=cls, owner=owner, evidence=(*f.evidence, why, note))

    def _networks_of(self, f: Finding, cid: str) -> set[str]:
        """The CNI networks the attachment belongs to: its own record's, else every one its container's
        files name (a netns or a veth carries a sandbox's every network: its pod network and loopback)."""
        if f.kind is Kind.IP_RESERVATION:
            return {f.id.split("/", 1)[0]}
        if f.kind is Kind.CNI_CACHE:
            network = self.index.networks.cache.get(f.id)
            return {network} if network else set()
        if f.kind is Kind.IPTABLES_CHAIN and (network := self.index.networks.chains.get(f.id)):
            return {network}
        if f.kind is Kind.HOSTPORT_RULE and (network := self.index.networks.rules.get(f.id)):
            return {network}
        nets = {e.network for e in self.ctx.cache.by_container.get(cid, [])}
        return nets | self.index.networks.reservations.get(cid, set())

    def _unknown_to_runtime(self, f: Finding, cid: str, mtime: float | None, ips: tuple[str, ...]) -> Finding:
        networks = self._networks_of(f, cid)
        if not networks or not networks <= self.index.cri_networks:
            # Not (provably) networks of the runtime's sandboxes only: another CNI user's (nerdctl, podman,
            # a VM), whose containers the runtime cannot know. Its word says nothing here.
            return f
        why = f"container id {short(cid)} names no sandbox the runtime ({self.index.who}) knows"
        keep = self._netns_of_another_sandbox(f, cid) or self._add_may_run(f, cid, mtime)
        if keep:
            cls = FindingClass.CONFLICT if keep.startswith("its netns") else FindingClass.PROTECTED
            return dataclasses.replace(f, cls=cls if f.cls.is_residue or f.cls is FindingClass.IN_USE else f.cls,
                                       evidence=(*f.evidence, why, keep))
        normalized = [ip for ip in (normalize_ip(i) for i in ips) if ip]
        claimed = [ip for ip in normalized if ip in self.ctx.pods.claims or ip in self.index.ready_ips]
        if claimed:
            note = f"but {claimed[0]} is a live pod's or a READY sandbox's address"
            cls = FindingClass.CONFLICT if f.cls.is_residue else f.cls
            return dataclasses.replace(f, cls=cls, evidence=(*f.evidence, why, note))
        owner = dataclasses.replace(f.owner, container_id=cid)
        if self.ctx.viewed_young(mtime):
            note = "younger than the runtime's and the API's photographs allow to judge"
            cls = FindingClass.PROTECTED if f.cls.is_residue or f.cls in (
                FindingClass.IN_USE, FindingClass.UNKNOWN) else f.cls
            return dataclasses.replace(f, cls=cls, owner=owner, evidence=(*f.evidence, why, note))
        return dataclasses.replace(f, cls=_RESIDUE_OF[f.kind], owner=owner, sandbox=cid,
                                   owner_state=f.owner_state if f.owner_state is not OwnerState.UNKNOWN
                                   else OwnerState.ABSENT, evidence=(*f.evidence, why))

    def _netns_of_another_sandbox(self, f: Finding, cid: str) -> str | None:
        """A cache entry naming the netns of a sandbox the runtime knows (the live one after a reboot, or
        another pod's): its CNI DEL would run inside that sandbox."""
        if f.kind is not Kind.CNI_CACHE:
            return None
        sb = self.index.by_netns.get(netns_key(f.netns) or "")
        if sb is None or sb.id == cid:  # its own NotReady sandbox's netns: where its teardown would run too
            return None
        return f"its netns {f.netns} is the runtime's sandbox {short(sb.id)}'s: a DEL there would cut it"

    def _add_may_run(self, f: Finding, cid: str, mtime: float | None) -> str | None:
        """While a sandbox is set up, the runtime lists it only once CNI ADD has finished (containerd adds
        it to its store at the end of RunPodSandbox), and the cache entry is written at the end of ADD. So a
        reservation without a cache entry, of a node with a starting pod the runtime shows no sandbox for,
        or young enough for an ADD to still run, may be that sandbox's."""
        if f.kind is not Kind.IP_RESERVATION or self.ctx.cache.by_container.get(cid):
            return None
        starting = [p for p in self.ctx.pods.unsettled if p.uid not in self.index.by_pod]
        if starting:
            return (f"pod {starting[0].namespace}/{starting[0].name} is starting and the runtime shows no sandbox"
                    " for it yet: this may be its ADD")
        settle = max(self.ctx.policy.add_settle_seconds, self.ctx.policy.min_age_seconds)
        if mtime is None or self.ctx.clock.since(mtime, settle):
            return f"no cache entry yet and younger than {settle:.0f}s: its CNI ADD may still run"
        return None

    def _starting_without_sandbox(self, left: RuntimeLeftover) -> str | None:
        """RunPodSandbox makes the sandbox's directories and starts its shim before the runtime lists the
        sandbox (at its very end): while a pod on this node is starting with no sandbox listed, a leftover
        younger than the ADD settle time may be that sandbox's."""
        starting = [p for p in self.ctx.pods.unsettled if p.uid not in self.index.by_pod]
        settle = max(self.ctx.policy.add_settle_seconds, self.ctx.policy.min_age_seconds)
        if not starting or (left.mtime is not None and self.ctx.clock.before(left.mtime, settle)):
            return None
        return (f"pod {starting[0].namespace}/{starting[0].name} is starting and the runtime shows no sandbox for"
                " it yet: this may be its RunPodSandbox")

    def _newest_of_starting_pod(self, sb: RuntimeSandbox) -> bool:
        pod = self.ctx.pods.by_uid.get(sb.pod_uid)
        if pod is None or pod.state not in HOLDING:
            return False
        return self.index.by_pod[sb.pod_uid][-1].id == sb.id and pod.state is not OwnerState.LIVE

    # -- the sandboxes themselves -------------------------------------------------------------------

    def _sandbox(self, sb: RuntimeSandbox) -> Finding:
        pod = self.ctx.pods.by_uid.get(sb.pod_uid)
        owner = Owner(uid=sb.pod_uid or None, namespace=sb.pod_namespace or None, name=sb.pod_name or None,
                      container_id=sb.id)
        state = pod.state if pod is not None else OwnerState.ABSENT
        made = sb.created_at.timestamp() if sb.created_at else None
        young = self.ctx.viewed_young(made)
        evidence: tuple[str, ...] = (f"sandbox {short(sb.id)} of {owner.label()} is "
                                     f"{'READY' if sb.ready else 'NotReady'} in {self.index.who}",)
        def finding(cls: FindingClass, *notes: str, sandbox: str | None = None) -> Finding:
            if not self.complete and cls not in (FindingClass.IN_USE, FindingClass.UNKNOWN):
                cls, sandbox = FindingClass.PROTECTED, None
                notes = (*notes, "the runtime's list misses running pods: nothing is concluded from it")
            return Finding(cls, Kind.SANDBOX, sb.id, owner, state, (*evidence, *notes),
                           netns=sb.netns_path, ip=sb.ips[0] if sb.ips else None, sandbox=sandbox)
        static = None
        if pod is None:
            static = self.ctx.static_owner(uid=sb.pod_uid or None, namespace=sb.pod_namespace or None,
                                           name=sb.pod_name or None)
        if sb.ready:
            if static is not None:
                # The kubelet runs static pods whose mirror the API refused (a missing namespace, a
                # ServiceAccount reference): not an orphan, whatever the API shows.
                return finding(FindingClass.PROTECTED, static)
            if pod is None and not young:
                return finding(FindingClass.RUNNING_ORPHAN, "its pod is not in the API: reported, not stopped")
            return finding(FindingClass.IN_USE if pod is not None else FindingClass.PROTECTED,
                           "READY" if pod is not None else "its pod is not in the API yet or any more (young)")
        running = self.index.live_containers.get(sb.id, 0)
        if running:
            return finding(FindingClass.UNKNOWN, f"NotReady, yet {running} of its containers are not exited")
        if young:
            return finding(FindingClass.PROTECTED, "NotReady, but younger than the photographs allow to judge")
        if pod is None:
            if static is not None:
                return finding(FindingClass.PROTECTED, static)
            return finding(FindingClass.ORPHANED_SANDBOX, "NotReady and its pod is not in the API", sandbox=sb.id)
        if pod.state is OwnerState.TERMINAL:
            return finding(FindingClass.ORPHANED_SANDBOX, f"NotReady and its pod is {pod.phase}", sandbox=sb.id)
        if self.index.by_pod[sb.pod_uid][-1].id != sb.id:
            return finding(FindingClass.ORPHANED_SANDBOX, "NotReady and not its live pod's newest sandbox",
                           sandbox=sb.id)
        return finding(FindingClass.PROTECTED, "NotReady, the newest sandbox of a pod that still exists")
