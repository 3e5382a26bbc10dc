"""The phase machine, pure: given the ledger's items and a scan, what moves where and why.

The engine persists every transition returned here before it acts on it, so a crash between any two
steps resumes from the ledger without repeating or skipping a step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from nodegc import defaults
from nodegc.model.findings import Finding
from nodegc.model.items import Identity, Item, Phase, item_key
from nodegc.model.resources import (
    CNICacheEntry,
    FirewallRule,
    HostportRule,
    Inventory,
    IPReservation,
    IptablesChain,
    Kind,
    NetnsEntry,
    PodDir,
    PodLogDir,
    ReadProblem,
    VethLink,
    VolumeDir,
)
from nodegc.model.runtime import RuntimeLeftover, RuntimeSandbox

INTERRUPTED_STEP_GONE = ("removed by nodegc: its reclaim step was checkpointed and interrupted before the result"
                         " was recorded; the record was written after a restart, which found the resource absent")
"""An item found absent while TERMINATING: the checkpoint is written right before the step, so its absence is
the step's work, not a disappearance of its own ("gone before it was reclaimed")."""

_ACTIVE = frozenset({Phase.DETECTED, Phase.MARKED, Phase.TERMINATING, Phase.CLEANED, Phase.FAILED})


@dataclass(frozen=True)
class PhasePolicy:
    consecutive_scans: int = defaults.CONSECUTIVE_SCANS
    """K: scans in a row that must see a resource orphaned before it is marked."""
    grace_seconds: float = defaults.GRACE_SECONDS
    """And this long since it was first seen orphaned (first-seen survives restarts in the ledger)."""
    per_kind: Mapping[Kind, tuple[int, float]] = field(default_factory=dict)
    """Overrides of (K, grace) per kind."""
    backoff_base: float = 10.0
    backoff_cap: float = 600.0

    def mark_rule(self, kind: Kind) -> tuple[int, float]:
        return self.per_kind.get(kind, (self.consecutive_scans, self.grace_seconds))

    def backoff(self, attempts: int) -> float:
        return float(min(self.backoff_cap, self.backoff_base * 2 ** max(0, attempts - 1)))


@dataclass(frozen=True)
class Transition:
    item: Item
    previous: Phase | None
    reason: str

    @property
    def phase_changed(self) -> bool:
        return self.previous is not self.item.phase


Resource = (IPReservation | CNICacheEntry | NetnsEntry | VethLink | IptablesChain | HostportRule | PodDir | VolumeDir
            | RuntimeSandbox | PodLogDir | FirewallRule | RuntimeLeftover)


def hostport_rule_id(rule: HostportRule) -> str:
    return f"{rule.table}/{rule.chain}/{rule.target or '?'}/{(rule.container_id or '?')[:12]}"


def resources(inv: Inventory) -> dict[str, Resource]:
    """Every resource of a scan by item key (the key the findings and the ledger use)."""
    out: dict[str, Resource] = {}
    for r in inv.ip_reservations:
        out[item_key(Kind.IP_RESERVATION, f"{r.network}/{r.ip}")] = r
    for c in inv.cni_cache:
        out[item_key(Kind.CNI_CACHE, c.path)] = c
    for n in inv.netns:
        out[item_key(Kind.NETNS, n.path)] = n
    for v in inv.veths:
        out[item_key(Kind.VETH, v.name)] = v
    for ch in inv.chains:
        out[item_key(Kind.IPTABLES_CHAIN, ch.name)] = ch
    for rule in inv.hostport_rules:
        out[item_key(Kind.HOSTPORT_RULE, hostport_rule_id(rule))] = rule
    for d in inv.pod_dirs:
        out[item_key(Kind.POD_DIR, d.path)] = d
        for vol in d.volumes:
            if vol.mounted:
                out[item_key(Kind.VOLUME_MOUNT, vol.path)] = vol
    from nodegc.planning.firewall import firewall_rule_id

    for fw in inv.firewall_rules:
        out[item_key(Kind.FIREWALL_RULE, firewall_rule_id(fw))] = fw
    for log_dir in inv.pod_logs:
        out[item_key(Kind.POD_LOG_DIR, log_dir.path)] = log_dir
    if inv.runtime is not None and inv.runtime.reachable:
        for sb in inv.runtime.sandboxes:
            out[item_key(Kind.SANDBOX, sb.id)] = sb
        for left in inv.runtime.leftovers:
            if left.what != "netns":
                out[item_key(Kind.RUNTIME_LEFTOVER, left.path)] = left
    return out


def identity_of(resource: Resource) -> Identity:
    """The evidence a re-read must find unchanged before anything is done (compare-and-reclaim)."""
    match resource:
        case IPReservation():
            return (("container_id", resource.container_id or ""), ("inode", str(resource.inode)))
        case CNICacheEntry():
            return (("container_id", resource.container_id), ("inode", str(resource.inode)))
        case NetnsEntry():
            return (("ns_inode", str(resource.ns_inode)), ("file_inode", str(resource.file_inode)))
        case VethLink():
            return (("index", str(resource.index)), ("peer_ns_inode", str(resource.peer_ns_inode)))
        case IptablesChain():
            return (("table", resource.table), ("container_id", resource.container_id or ""))
        case HostportRule():
            return (("container_id", resource.container_id or ""), ("rule", resource.rule))
        case PodDir():
            return (("inode", str(resource.inode)),)
        case FirewallRule():
            return (("rule", resource.rule), ("family", str(resource.family)))
        case PodLogDir():
            return (("inode", str(resource.inode)), ("uid", resource.uid))
        case RuntimeSandbox():
            # An id the runtime reuses for another sandbox is another creation time.
            created = resource.created_at.isoformat() if resource.created_at else ""
            return (("sandbox_id", resource.id), ("created_at", created), ("pod_uid", resource.pod_uid))
        case RuntimeLeftover():
            # A directory is its inode (its mount may be gone after a partial reclaim); a shim is its pid and
            # its start time, so a reused pid is another process.
            if resource.what == "shim":
                return (("shim", resource.id), ("pid", str(resource.pid)), ("start_time", str(resource.start_time)))
            return ((resource.what, resource.id), ("inode", str(resource.inode)))
        case VolumeDir():
            # Mount ids are recycled lowest-free-first; the filesystem type and source narrow a reuse.
            return (("mount_id", str(resource.mount_id)), ("fs_type", resource.fs_type or ""),
                    ("source", resource.source or ""))


def identities(inv: Inventory) -> dict[str, Identity]:
    return {key: identity_of(r) for key, r in resources(inv).items()}


def _new_item(f: Finding, identity: Identity, now: float) -> Item:
    return Item(
        key=item_key(f.kind, f.id), kind=f.kind, resource_id=f.id, phase=Phase.DETECTED, identity=identity,
        finding_class=f.cls.value, owner_uid=f.owner.uid, owner_namespace=f.owner.namespace,
        owner_name=f.owner.name, container_id=f.owner.container_id, first_seen=now, last_seen=now,
        orphan_count=1,
    )


def _mark_if_due(item: Item, previous: Phase | None, reason: str, now: float, policy: PhasePolicy) -> Transition:
    k, grace = policy.mark_rule(item.kind)
    if item.orphan_count >= k and now - item.first_seen >= grace:
        why = f"orphaned in {item.orphan_count} consecutive scans over {now - item.first_seen:.0f}s"
        return Transition(dataclasses.replace(item, phase=Phase.MARKED), previous, why)
    return Transition(item, previous, f"{reason} ({item.orphan_count}/{k} scans)")


@dataclass(frozen=True)
class Blind:
    """What a scan could not see: its read problems, as far as they can hide one item's resource.

    For the kinds whose items are files of one directory (cache entries, reservations, netns files, pod
    directories) a problem hides an item only when it is about that very file or a directory above it: a
    junk file beside the others (a non-UTF-8 name, a symlink) says nothing about them, and must not keep
    every item of its kind from ever closing. For any other kind, or a problem that names no path, the whole
    kind is unseen."""

    problems: tuple[ReadProblem, ...] = ()

    def hides(self, item: Item) -> bool:
        return any(_hides(p, item) for p in self.problems if p.kind is item.kind)


def _hides(problem: ReadProblem, item: Item) -> bool:
    path = problem.path.rstrip("/")
    if item.kind not in _PER_FILE or not path.startswith("/"):
        return True
    if item.kind is Kind.IP_RESERVATION:
        # `<data>/networks/<network>/<ip>`: the file itself, its network's directory or the networks one.
        network, _, ip = item.resource_id.partition("/")
        parts = path.split("/")
        if parts[-1] == "networks" or parts[-1] == network or parts[-2:] == [network, ip]:
            return True
        return not (parts[-2] == network or parts[-2] == "networks" or (len(parts) > 2 and parts[-3] == "networks"))
    rid = item.resource_id.rstrip("/")
    return rid == path or rid.startswith(path + "/")  # the file itself or a directory above it


_PER_FILE = frozenset({Kind.CNI_CACHE, Kind.IP_RESERVATION, Kind.NETNS, Kind.POD_DIR, Kind.POD_LOG_DIR})


@dataclass(frozen=True)
class Scope:
    """Where a scan looked for the kinds whose item is a path, and the kinds it did not read (`Scope.of`).

    An item of a path outside those directories (a restart with another kubelet root, netns, CNI data or pod
    log directory) or of a kind not read (no runtime configured any more) was not looked for: a scan that does
    not show it says nothing about it, neither that it went nor that a step of nodegc removed it."""

    dirs: Mapping[Kind, tuple[str, ...]] = field(default_factory=dict)
    """Kind -> the directories (each spelt as configured, normalized and resolved) its paths lie in."""
    unread: frozenset[Kind] = frozenset()

    @classmethod
    def of(cls, inv: Inventory) -> Scope:
        dirs: dict[Kind, tuple[str, ...]] = {}
        for kind, directory in inv.looked_in:
            dirs[kind] = (*dirs.get(kind, ()), directory)
        return cls(dirs=dirs, unread=inv.unread)

    def outside(self, item: Item) -> str | None:
        """Why the scan did not look for `item`'s resource, or None (it did)."""
        if item.kind in self.unread:
            return f"this scan read no {item.kind.value} (no runtime answered)"
        dirs = self.dirs.get(item.kind)
        rid = item.resource_id
        if not dirs or any(rid == d or rid.startswith(d.rstrip("/") + "/") for d in dirs):
            return None
        return f"{rid} is not under {dirs[0]}, where this scan looked"


def reconcile(
    items: Mapping[str, Item],
    findings: Iterable[Finding],
    idents: Mapping[str, Identity],
    *,
    now: float,
    policy: PhasePolicy,
    blind: Blind = Blind(),
    scope: Scope = Scope(),
) -> list[Transition]:
    """Detect and mark: fold one scan into the items. An item the scan's read problems may hide is not
    seen absent: its absence proves nothing and it is not closed; one the scan did not look for (`scope`) is
    released, saying why."""

    def residue(f: Finding, item: Item | None, identity: Identity) -> Transition:
        if item is None or item.phase.final or item.identity != identity:
            fresh = _new_item(f, identity, now)
            why = "identity changed: a different resource now" if item and not item.phase.final else (
                f"seen orphaned: {f.cls.value}")
            return _mark_if_due(fresh, item.phase if item else None, why, now, policy)
        if item.phase is Phase.DETECTED:
            # A count of 0 is a streak broken (sent back, identity changed, a refused proof): it starts again
            # here, its grace counted from this sighting.
            updated = dataclasses.replace(item, orphan_count=item.orphan_count + 1, last_seen=now,
                                          first_seen=item.first_seen if item.orphan_count else now,
                                          finding_class=f.cls.value)
            return _mark_if_due(updated, item.phase, "still orphaned", now, policy)
        if item.phase is Phase.CLEANED:
            attempts = item.attempts + 1
            failed = dataclasses.replace(item, phase=Phase.FAILED, last_seen=now, attempts=attempts,
                                         last_error="still present after clean",
                                         next_attempt=now + policy.backoff(attempts))
            return Transition(failed, item.phase, "confirm: still present after clean")
        return Transition(dataclasses.replace(item, last_seen=now, orphan_count=item.orphan_count + 1),
                          item.phase, "still orphaned")

    return _fold(items, findings, idents, now=now, blind=blind, scope=scope, residue=residue)


def _fold(items: Mapping[str, Item], findings: Iterable[Finding], idents: Mapping[str, Identity], *, now: float,
          blind: Blind, scope: Scope, residue: Callable[[Finding, Item | None, Identity], Transition | None],
          ) -> list[Transition]:
    """One scan folded into the items, by `reconcile` and `refused` alike: an item no longer residue is
    released, a residue finding's item goes where `residue(finding, item, identity)` says (None: nowhere),
    and an item whose resource the scan did not show is closed unless its read problems may hide it."""
    out: list[Transition] = []
    seen: set[str] = set()
    """The items' keys the scan found (only those: a scan of 1,000 pods makes thousands of findings)."""
    for f in findings:
        key = item_key(f.kind, f.id)
        item = items.get(key)
        if item is not None:
            seen.add(key)
        if not f.cls.is_residue:
            if item is not None and item.phase in _ACTIVE:
                out.append(_released(item, f, now))
            continue
        t = residue(f, item, idents.get(key, ()))
        if t is not None:
            out.append(t)
    out += _closed(items, seen, now=now, blind=blind, scope=scope)
    return out


def _released(item: Item, f: Finding, now: float) -> Transition:
    return Transition(dataclasses.replace(item, phase=Phase.RELEASED, last_seen=now, finding_class=f.cls.value),
                      item.phase, f"no longer residue: {f.cls.value}")


def _closed(items: Mapping[str, Item], seen: set[str], *, now: float, blind: Blind, scope: Scope) -> list[Transition]:
    """The items whose resource the scan did not show, unless its read problems may hide it; those it did not
    look for are released instead, not closed: whether their resource is gone is not known."""
    out: list[Transition] = []
    for key, item in items.items():
        if key in seen or item.phase.final or blind.hides(item):
            continue
        why = scope.outside(item)
        if why is not None:
            out.append(Transition(dataclasses.replace(item, phase=Phase.RELEASED), item.phase,
                                  f"not looked for: {why}; whether it is gone is not known"))
            continue
        reason = {Phase.CLEANED: "confirmed absent after clean",
                  Phase.TERMINATING: INTERRUPTED_STEP_GONE}.get(item.phase, "gone before it was reclaimed")
        out.append(Transition(dataclasses.replace(item, phase=Phase.CLOSED, last_seen=now), item.phase, reason))
    return out


def other_node(items: Mapping[str, Item], *, recorded: str, node: str) -> list[Transition]:
    """Release every open item of a ledger recorded for another node (a state directory carried to a node of
    another name, a copied disk image, a hostPath shared by mistake). Its scans in a row, first-seen times
    and marks are a photograph of that node: a resource of the same identity here (the same pod CIDR gives
    the same addresses and chain names) must not inherit them. Released, not closed: whether anything of
    that node is gone is not known here; and not acted on. This node's own scans begin its items again."""
    why = (f"the ledger was kept on node {recorded!r}, not on this one ({node!r}): its scans in a row and grace"
           " say nothing here and start again from this node's own")
    return [Transition(dataclasses.replace(item, phase=Phase.RELEASED), item.phase, why)
            for item in items.values() if not item.phase.final]


STREAK_BROKEN = "the desired state was not proven current for acting: its scans in a row start again"


def refused(
    items: Mapping[str, Item],
    findings: Iterable[Finding],
    idents: Mapping[str, Identity],
    *,
    now: float,
    blind: Blind = Blind(),
    scope: Scope = Scope(),
) -> list[Transition]:
    """Fold a scan whose desired state could not be proven current for acting (`view_not_current`) in the
    one safe direction: away from reclaim. An item no longer residue is released, one whose resource is gone
    is closed (the host's word, as in `reconcile`), and nothing moves toward its mark: no item is begun, a
    detected item's scans in a row drop to 0 (the next sighting counts 1 and starts its grace again), and a
    resource whose identity changed begins again at 0. Marked, failed, terminating and cleaned items that
    are still residue stay as they are: terminate re-verifies them on a proven view before anything."""

    def residue(f: Finding, item: Item | None, identity: Identity) -> Transition | None:
        if item is None or item.phase.final:
            return None
        if item.identity != identity:
            fresh = dataclasses.replace(_new_item(f, identity, now), orphan_count=0)
            return Transition(fresh, item.phase, f"identity changed: a different resource now; {STREAK_BROKEN}")
        if item.phase is Phase.DETECTED and item.orphan_count:
            return Transition(dataclasses.replace(item, orphan_count=0, last_seen=now), item.phase, STREAK_BROKEN)
        return None

    return _fold(items, findings, idents, now=now, blind=blind, scope=scope, residue=residue)


UNKNOWN_STREAK_BROKEN = "the desired state was unknown (unreadable or stale): its scans in a row start again"


def unknown(items: Mapping[str, Item]) -> list[Transition]:
    """Fold a cycle whose desired state could not be had (`source_unavailable`) or was too old or dated in the
    future (`stale_source`): nothing was scanned, so nothing is released, closed or begun, but no streak of
    scans in a row spans a time in which it was not known which pods exist (as none spans a refused proof,
    `refused`). A detected item's count drops to 0; its next sighting counts 1 and starts its grace again.
    An item already at 0 is not written again: a row of such cycles writes once."""
    return [Transition(dataclasses.replace(item, orphan_count=0), item.phase, UNKNOWN_STREAK_BROKEN)
            for item in items.values() if item.phase is Phase.DETECTED and item.orphan_count]


def due(items: Iterable[Item], now: float) -> list[Item]:
    """Reclaim candidates: marked, failed whose backoff has passed, and terminating ones a crash
    interrupted (re-verified and re-run: every step is idempotent)."""
    return [
        i for i in items
        if i.phase in (Phase.MARKED, Phase.TERMINATING)
        or (i.phase is Phase.FAILED and (i.next_attempt or 0) <= now)
    ]


def after_attempt(item: Item, *, ok: bool, changed: bool, detail: str, lazy: bool, now: float,
                  policy: PhasePolicy, skipped: bool = False) -> Transition:
    if skipped:
        return Transition(dataclasses.replace(item, phase=Phase.MARKED), item.phase, detail)
    if ok:
        return Transition(dataclasses.replace(item, phase=Phase.CLEANED, last_error=None, lazy=item.lazy or lazy),
                          item.phase, detail)
    if changed:
        reset = dataclasses.replace(item, phase=Phase.DETECTED, orphan_count=0, first_seen=now, last_error=detail)
        return Transition(reset, item.phase, f"identity changed, back to detect: {detail}")
    attempts = item.attempts + 1
    failed = dataclasses.replace(item, phase=Phase.FAILED, attempts=attempts, last_error=detail,
                                 next_attempt=now + policy.backoff(attempts))
    return Transition(failed, item.phase, f"attempt {attempts} failed: {detail}")


def back_to_detect(item: Item, reason: str, now: float) -> Transition:
    """Any doubt at re-verification moves the item back, not forward."""
    reset = dataclasses.replace(item, phase=Phase.DETECTED, orphan_count=0, first_seen=now, last_error=reason)
    return Transition(reset, item.phase, reason)
