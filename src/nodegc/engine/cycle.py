"""One engine cycle: detect, mark, terminate (fresh re-verification), clean, confirm.

Every transition is written to the ledger before the side effect it guards. Whatever goes wrong on the
way (the desired state unavailable or stale, a blast-radius trip, a doubt at re-verification), the
answer is to do nothing destructive and say why in logs and metrics.

A watched desired state (`desired.source.ProvableSource`) is dated by its freshness, which a lagging watch
cache fakes; a cycle that has something to mark or to terminate takes its proof first (`proven()`: at
most one node Lease GET, none on a cycle with nothing to act on) and judges the node again on the proven
photograph (unless it shows the same pods and is not older: `same_judgement`); without a proof it refuses
(`view_not_current`) and writes only what moves away from reclaim (`planning.phases.refused`). The scan is
checked against the container runtime once, on the photograph the cycle acts on (`_checked`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nodegc import defaults
from nodegc.desired.source import (
    FUTURE_TOLERANCE_SECONDS,
    DesiredSource,
    ProvableSource,
    RefreshableSource,
    SourceError,
)
from nodegc.engine.detecting import detect
from nodegc.engine.limits import TokenBucket
from nodegc.engine.orphans import RunningOrphans, stop_running_orphan
from nodegc.faults import fault_point
from nodegc.hostio.clock import BootTime, read_boot_time
from nodegc.inventory.cri.client import CRIError
from nodegc.inventory.cri.runtimes import runtime_reader
from nodegc.inventory.scanning import scan_node
from nodegc.ledger.store import Ledger, LedgerError
from nodegc.model.findings import Finding, FindingClass
from nodegc.model.ipranges import RangeStatus
from nodegc.model.items import Identity, Item, Phase, item_key
from nodegc.model.pods import DesiredState, OwnerState, Pod
from nodegc.model.resources import Inventory, Kind, ReadProblem
from nodegc.model.runtime import RuntimeSandbox, RuntimeView
from nodegc.observe.logs import get_logger
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.guards import BlastRadius, blast_radius_refusal
from nodegc.planning.ipranges import NOT_URGENT, RangeTracker, range_usage, reclaim_urgency
from nodegc.planning.phases import (
    INTERRUPTED_STEP_GONE,
    Blind,
    PhasePolicy,
    Resource,
    Scope,
    Transition,
    after_attempt,
    back_to_detect,
    due,
    identity_of,
    other_node,
    reconcile,
    refused,
    resources,
    unknown,
)
from nodegc.planning.runtime import runtime_unusable
from nodegc.reclaim.dispatch import Executor
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import Roots, ScanOptions

log = get_logger("nodegc.engine")


class MetricsSink(Protocol):
    """What the engine reports (observe.metrics.Metrics implements it)."""

    def blocked(self, reason: str) -> None: ...
    def reclaimed(self, kind: str, result: str) -> None: ...
    def scanned(self, seconds: float, problems: Sequence[tuple[str, int]]) -> None: ...
    def problems(self, problems: Sequence[tuple[str, int]]) -> None: ...
    def scan_problems(self, problems: Sequence[tuple[str, str]]) -> None: ...
    def streaks_restarted(self, reason: str, n: int) -> None: ...
    def marked(self, counts: dict[str, int]) -> None: ...
    def items(self, counts: dict[tuple[str, str], int]) -> None: ...
    def ledger_error(self) -> None: ...
    def ledger_taken_over(self) -> None: ...
    def desired_age(self, seconds: float) -> None: ...
    def protected(self, counts: dict[str, int]) -> None: ...
    def ranges(self, statuses: Sequence[RangeStatus]) -> None: ...
    def cycle_succeeded(self, at: float) -> None: ...
    def runtime(self, reachable: bool | None, running_orphans: int, orphan_shims: int = 0) -> None: ...


class NullMetrics:
    def blocked(self, reason: str) -> None:
        pass

    def reclaimed(self, kind: str, result: str) -> None:
        pass

    def scanned(self, seconds: float, problems: Sequence[tuple[str, int]]) -> None:
        pass

    def problems(self, problems: Sequence[tuple[str, int]]) -> None:
        pass

    def scan_problems(self, problems: Sequence[tuple[str, str]]) -> None:
        pass

    def streaks_restarted(self, reason: str, n: int) -> None:
        pass

    def marked(self, counts: dict[str, int]) -> None:
        pass

    def items(self, counts: dict[tuple[str, str], int]) -> None:
        pass

    def ledger_error(self) -> None:
        pass

    def ledger_taken_over(self) -> None:
        pass

    def desired_age(self, seconds: float) -> None:
        pass

    def protected(self, counts: dict[str, int]) -> None:
        pass

    def ranges(self, statuses: Sequence[RangeStatus]) -> None:
        pass

    def cycle_succeeded(self, at: float) -> None:
        pass

    def runtime(self, reachable: bool | None, running_orphans: int, orphan_shims: int = 0) -> None:
        pass


@dataclass(frozen=True)
class EngineSettings:
    phases: PhasePolicy = field(default_factory=PhasePolicy)
    correlation: CorrelationPolicy = field(default_factory=CorrelationPolicy)
    blast_radius: BlastRadius = field(default_factory=BlastRadius)
    scan: ScanOptions = field(default_factory=ScanOptions)
    max_desired_age_seconds: float = defaults.MAX_DESIRED_AGE_SECONDS
    """A desired state older than this is stale: nothing destructive proceeds on it."""
    reclaims_per_minute: float = defaults.RECLAIMS_PER_MINUTE
    reclaim_burst: int = defaults.RECLAIM_BURST
    running_orphan_grace_seconds: float = defaults.RUNNING_ORPHAN_GRACE_SECONDS
    """A READY sandbox of a pod absent from the API this long is reported (Event, metric)."""
    stop_running_orphans: bool = False
    """Opt-in: stop such a sandbox through CRI (the workload is still running)."""


@dataclass(frozen=True)
class LedgerTakeover:
    """A ledger recorded for another node, taken over at this cycle (`Engine._own_ledger`)."""

    recorded: str
    """The node the ledger was recorded for."""
    node: str
    """The node it belongs to now: the desired state's."""
    released: int
    """Its open items, released."""
    ledger: str
    """The ledger's path (`:memory:` for an in-memory one)."""


@dataclass
class CycleReport:
    blocked: list[str] = field(default_factory=list)
    findings: tuple[Finding, ...] = ()
    verified: list[Item] = field(default_factory=list)
    outcomes: list[tuple[Item, Outcome]] = field(default_factory=list)
    sent_back: list[tuple[Item, str]] = field(default_factory=list)
    closed: list[Item] = field(default_factory=list)
    problems: int = 0
    ranges: tuple[RangeStatus, ...] = ()
    """host-local range sets at this cycle's scan, with their forecast."""
    running_orphans: list[Finding] = field(default_factory=list)
    """READY sandboxes whose pod has been absent from the API longer than the long grace."""
    stopped_orphans: list[tuple[Finding, bool, str]] = field(default_factory=list)
    orphan_shims: list[Finding] = field(default_factory=list)
    """Shim processes whose id the runtime does not list (stopped only with --stop-orphan-shims)."""
    ledger_taken_over: LedgerTakeover | None = None
    """The ledger was another node's and this cycle took it over: logged and counted by the engine, printed by
    the one-shot commands, whose logs are quiet by default."""


class Engine:
    def __init__(
        self,
        *,
        roots: Roots,
        source: DesiredSource,
        ledger: Ledger,
        executor: Executor,
        settings: EngineSettings | None = None,
        metrics: MetricsSink | None = None,
        clock: Callable[[], float] = time.time,
        scanner: Callable[[Roots, ScanOptions], Inventory] = scan_node,
        boot_clock: Callable[[], BootTime | None] | None = None,
    ) -> None:
        self.roots = roots
        self.source = source
        self.ledger = ledger
        self.executor = executor
        self.settings = settings or EngineSettings()
        self.metrics: MetricsSink = metrics or NullMetrics()
        self.clock = clock
        self.scanner = scanner
        self.node: str | None = None
        """The node the desired state is about, learned from the first fetch."""
        self._ledger_node: str | None = None
        """The node the ledger was last found or made to belong to (`_own_ledger`)."""
        self.ip_ranges = RangeTracker()
        self.orphans = RunningOrphans(
            grace_seconds=self.settings.running_orphan_grace_seconds, store=ledger,
            on_store_error=self.metrics.ledger_error,
            boot_clock=boot_clock or functools.partial(read_boot_time, roots.proc_root))
        """`boot_clock` (default: the node's boot id under the proc root, and CLOCK_BOOTTIME) measures the
        running orphans' grace where `clock` could step."""
        self._gave_up: frozenset[str] = frozenset()
        """Sandboxes whose removal through the runtime failed repeatedly, as of the last scan."""
        self._unusable: tuple[RuntimeView | None, tuple[Pod, ...], str | None] | None = None
        self._had_desired = False
        """Whether this process has had a usable desired state (one `_dated` let through)."""
        self._started: float | None = None
        self._interval: float | None = None
        """The time between the last two cycles' starts: how much older the view will be at the next one."""
        self.bucket = TokenBucket(per_minute=self.settings.reclaims_per_minute, burst=self.settings.reclaim_burst,
                                  clock=clock)

    # -- the cycle -------------------------------------------------------------------------------

    def cycle(self) -> CycleReport:
        """One pass; a LedgerError (any read or write of the ledger) is counted and ends the cycle."""
        try:
            return self._cycle()
        except LedgerError:
            self.metrics.ledger_error()
            raise
        finally:
            self._unusable = None  # nothing of this cycle's views is kept to the next

    def _runtime_unusable(self, view: RuntimeView | None, pods: tuple[Pod, ...]) -> str | None:
        """`runtime_unusable`, once per runtime view and photograph: the runtime check (`_checked`) and the
        running orphans' completeness (`_observe_runtime`) ask it of the same pair."""
        memo = self._unusable
        if memo is not None and memo[0] is view and memo[1] is pods:
            return memo[2]
        why = runtime_unusable(view, pods)
        self._unusable = (view, pods, why)
        return why

    def _cycle(self) -> CycleReport:
        """detect -> mark -> (guards) -> terminate -> clean -> confirm; each step's writes reach the ledger
        before the next step acts on them."""
        report = CycleReport()
        started = self.clock()
        if self._started is not None and started > self._started:
            self._interval = started - self._started
        self._started = started
        detected = self._detect(report)
        if detected is None:
            self._unknown(report)
            return report
        desired, inventory, findings = detected
        now = self.clock()
        proven = False
        if any(f.cls.is_residue for f in findings) or due(self.ledger.items(active_only=True).values(), now):
            # Something to mark or terminate: a watched view must first prove it is current, and the node is
            # judged again on the proven (older) photograph, whose minimum-age horizon protects more.
            self._refresh_ahead(desired)
            judged = self._on_proven(desired, inventory, findings, report)
            if judged is None:
                self._refused(desired, inventory, findings, now, report)
                return report
            desired, inventory, findings = judged
            proven = True
        unchecked = inventory
        inventory = self._checked(inventory, desired, report)
        self._judged(inventory, findings, report)
        self._mark(inventory, findings, now)
        self._observe_runtime(inventory, findings, desired, now, report)
        refusal = blast_radius_refusal(findings, desired, self.settings.blast_radius)
        if refusal:
            self._block(report, "blast_radius", refusal)
            self._report_items()
            return report
        if report.running_orphans and self.settings.stop_running_orphans:
            self._stop_running_orphans(report, desired, inventory=unchecked, findings=findings, proven=proven)
        candidates = due(self.ledger.items(active_only=True).values(), now)
        if candidates:
            verified = self._terminate(candidates, report)
            if verified:
                self._clean(verified, report)
                self._confirm(verified, report)
        self._report_items()
        if not any(b.split(":", 1)[0] in _REFUSALS for b in report.blocked):
            self.metrics.cycle_succeeded(self.clock())
        return report

    def _detect(self, report: CycleReport) -> tuple[DesiredState, Inventory, tuple[Finding, ...]] | None:
        """A fresh desired state joined with one read of the node; None when the desired state is unusable.
        The inventory is not yet checked against the runtime (`_checked`, on the view the cycle acts on)."""
        desired = self._fresh_desired(report)
        if desired is None:
            return None
        inventory, findings = self._scan(desired)
        return desired, inventory, findings

    def _on_proven(self, desired: DesiredState, inventory: Inventory, findings: tuple[Finding, ...],
                   report: CycleReport) -> tuple[DesiredState, Inventory, tuple[Finding, ...]] | None:
        """The judgement to act on: the node judged on the proven photograph, or None (refused). The first
        judgement stands when the proven photograph shows the very pods `desired` shows and is not older
        (`same_judgement`): the same join, on a horizon that protects as much or more."""
        proven = self._proven(desired, report)
        if proven is None:
            return None
        if proven is desired or same_judgement(first=desired, proven=proven):
            return proven, inventory, findings
        inventory, findings = self._judge(inventory, proven)
        return proven, inventory, findings

    def _refused(self, desired: DesiredState, inventory: Inventory, findings: tuple[Finding, ...], now: float,
                 report: CycleReport) -> None:
        """A cycle whose view could not be proven current for acting: reported as any cycle, and folded into
        the ledger only away from reclaim (`planning.phases.refused`): releases and closes are written,
        nothing is begun, and no streak of scans in a row goes on across the refusal."""
        inventory = self._checked(inventory, desired, report)
        self._judged(inventory, findings, report)
        items = self.ledger.items(active_only=True)
        transitions = refused(items, findings, _residue_identities(inventory, findings), now=now,
                              blind=Blind(inventory.problems), scope=Scope.of(inventory))
        self._persist(transitions, now)
        restarted = sum(1 for t in transitions if not t.phase_changed)
        if restarted:
            reason = _refusal(report)
            log.info("view not proven current: scans in a row start again", items=restarted, reason=reason)
            self.metrics.streaks_restarted(reason, restarted)
        self._observe_runtime(inventory, findings, desired, now, report)
        self._report_items()

    def _unknown(self, report: CycleReport) -> None:
        """A cycle refused before its scan, its desired state unreadable (`source_unavailable`) or too old or
        from the future (`stale_source`): nothing was seen, so nothing is released, closed or begun, and no
        detected item's scans in a row go on across a time in which it was not known which pods exist
        (`planning.phases.unknown`), as none goes on across a refused proof. Not before the process's first
        usable desired state (a watch not synced yet after a start): streaks are persisted so that a restart
        does not reset them, and what precedes that first state is the restart's gap, not a gap the process
        saw open between two of its sightings."""
        if not self._had_desired:
            return
        now = self.clock()
        transitions = unknown(self.ledger.items(active_only=True))
        self._persist(transitions, now)
        if transitions:
            reason = _refusal(report)
            log.info("desired state unknown: scans in a row start again", items=len(transitions), reason=reason)
            self.metrics.streaks_restarted(reason, len(transitions))

    def _refresh_ahead(self, fetched: DesiredState) -> None:
        """Ask a watched source for a list (proven by its own node Lease read) when its view (dated by its
        freshness: the last list, event or bookmark that moved it) will be older than --max-desired-age at the
        next cycle. On a quiet cluster, whose bookmarks do not advance, only lists move the view: it is fresh
        and proven for about --max-desired-age after each resync, four 30 s cycles where K=3 scans in a row
        over the 120 s grace need five, and the node would mark nothing. Only cycles with something to act on
        ask; a healthy watch's bookmarks keep its view younger than that."""
        interval, max_age = self._interval, self.settings.max_desired_age_seconds
        if not isinstance(self.source, RefreshableSource) or interval is None or interval >= max_age:
            return  # a list now would be too old at the next cycle all the same
        age = self.clock() - fetched.fetched_at.timestamp()
        if age + interval > max_age:
            self.source.refresh(f"the view is {age:.0f}s old and would be too old at the next cycle")

    def _observe_runtime(self, inventory: Inventory, findings: tuple[Finding, ...], desired: DesiredState,
                         now: float, report: CycleReport) -> None:
        """Running orphans (their first-seen times) and orphan shims: reported every cycle, stopped only on
        opt-in and on a proven view."""
        report.running_orphans = self.orphans.observe(
            findings, now, view=inventory.runtime,
            complete=self._runtime_unusable(inventory.runtime, desired.pods) is None)
        report.orphan_shims = orphan_shims(inventory, findings)
        view = inventory.runtime
        self.metrics.runtime(None if view is None else view.reachable, len(report.running_orphans),
                             orphan_shims=len(report.orphan_shims))
        for f in report.running_orphans:
            log.warning("running orphan", sandbox=f.id, owner=f.owner.label(), owner_uid=f.owner.uid,
                        grace_seconds=self.settings.running_orphan_grace_seconds)
        for f in report.orphan_shims:
            log.warning("orphan shim", process=f.id, id=f.owner.container_id, finding=f.cls.value,
                        stop=self.settings.correlation.stop_orphan_shims)

    def _judged(self, inventory: Inventory, findings: tuple[Finding, ...], report: CycleReport) -> None:
        """The cycle's figures (findings, IP ranges and their forecast, protected resources), taken once
        from the judgement the cycle acts on: the proven photograph's when the node was judged again."""
        report.findings = findings
        report.ranges = self.ip_ranges.observe(range_usage(inventory, findings), self.clock())
        self.metrics.ranges(report.ranges)
        protected: dict[str, int] = {}
        for f in findings:
            if f.cls is FindingClass.PROTECTED:
                # Would be residue, but young or possibly a starting pod's: kept, and not a refusal.
                protected[f.kind.value] = protected.get(f.kind.value, 0) + 1
        self.metrics.protected(protected)

    def _mark(self, inventory: Inventory, findings: tuple[Finding, ...], now: float) -> None:
        """Every finding updates its ledger item: first seen, scans in a row, marked after K scans and grace."""
        blind = Blind(inventory.problems)
        items = self.ledger.items(active_only=True)
        transitions = reconcile(items, findings, _residue_identities(inventory, findings), now=now,
                                policy=self.settings.phases, blind=blind, scope=Scope.of(inventory))
        self._persist(transitions, now)
        marked: dict[str, int] = {}
        for t in transitions:
            if t.phase_changed and t.item.phase is Phase.MARKED:
                marked[t.item.kind.value] = marked.get(t.item.kind.value, 0) + 1
        if marked:
            self.metrics.marked(marked)

    # -- detect ----------------------------------------------------------------------------------

    def _fresh_desired(self, report: CycleReport) -> DesiredState | None:
        try:
            desired = self.source.fetch()
        except SourceError as e:
            self._block(report, "source_unavailable", f"desired state unavailable: {e}")
            return None
        self.node = desired.node
        return self._dated(desired, report)

    def _proven(self, desired: DesiredState, report: CycleReport) -> DesiredState | None:
        """The desired state to act on: `desired` itself, unless the source is a watch whose date is its
        freshness; then its proof of currency (`proven()`), or None (refused: `view_not_current`)."""
        if not isinstance(self.source, ProvableSource):
            return desired
        try:
            proven = self.source.proven(max_age_seconds=self.settings.max_desired_age_seconds)
        except SourceError as e:
            self._block(report, "view_not_current", f"the desired state is not proven current for acting: {e}")
            return None
        return self._dated(proven, report)

    def _dated(self, desired: DesiredState, report: CycleReport) -> DesiredState | None:
        """`desired` when its date allows acting on it; None (refused: `stale_source`) when too old or from
        the future."""
        age = self.clock() - desired.fetched_at.timestamp()
        self.metrics.desired_age(max(age, 0.0))
        if age > self.settings.max_desired_age_seconds:
            self._block(report, "stale_source", f"desired state is {age:.0f}s old")
            return None
        if age < -FUTURE_TOLERANCE_SECONDS:
            # From the future: the wall clock stepped back, so its age says nothing. Wait for fresh data.
            self._block(report, "stale_source", f"desired state is dated {-age:.0f}s in the future")
            return None
        taken = self._own_ledger(desired.node)
        if taken is not None:
            report.ledger_taken_over = taken
        self._own_window(desired.node)
        if not self._had_desired:
            self._had_desired = True
            self._restart_gap()
        return desired

    def _own_ledger(self, node: str) -> LedgerTakeover | None:
        """Before anything is judged on the ledger: its history is `node`'s own, or is made to start again.

        A ledger recorded for another node is taken over (`planning.phases.other_node`): its open items are
        released with a reason naming that node, its running orphans' first-seen times forgotten, and `node`
        recorded, in one transaction; nothing destructive follows from its history, and the scans in a row
        and the graces start again from this node's own scans. A ledger with no node recorded (new, or
        written before the node was) is taken as this node's and gets it recorded.

        Where no node name is known, nothing is folded: `node` is the desired state's (--node, else
        $NODE_NAME, else the node a snapshot file names, else the hostname), and every fold of a scan into
        the ledger follows a usable desired state; a cycle without one only moves detected items away from
        their mark (`_unknown`), which is safe whosever they are, and the readers (history, explain) never
        write. A name is compared exactly as given: any difference, even of spelling (the hostname where
        $NODE_NAME was set before), starts the history again, which delays reclaim and never hastens it.
        Returns the takeover, if this call made one."""
        if node == self._ledger_node:
            return None
        taken = None
        recorded = self.ledger.recorded_node()
        if recorded is None:
            self.ledger.record_node(node)
        elif recorded != node:
            now = self.clock()
            releases = other_node(self.ledger.items(active_only=True), recorded=recorded, node=node)
            self.ledger.take_over(node, releases, now=now)
            self.orphans.forget_all()
            _log_transitions(releases)
            log.warning("ledger of another node taken over: its open items released; scans in a row and graces"
                        " start again from this node's own scans", ledger=self.ledger.path, recorded_node=recorded,
                        node=node, items=len(releases))
            self.metrics.ledger_taken_over()
            taken = LedgerTakeover(recorded=recorded, node=node, released=len(releases), ledger=self.ledger.path)
        self._ledger_node = node
        return taken

    def _own_window(self, node: str) -> None:
        """The IP range forecast's window is `node`'s, as the ledger is (`_own_ledger`): one restored from a copy
        recorded for another node (the agent's `ip-ranges.json`, carried over with the state directory) is
        started afresh before this cycle's scan feeds it, so that node's leaks, peaks and rates say nothing
        of this node's forecast, node condition or order of reclaim. A window with no node recorded is taken
        as this node's."""
        recorded = self.ip_ranges.node
        if recorded == node:
            return
        dropped = self.ip_ranges.own(node)
        if recorded is not None:
            log.warning("IP range window of another node started afresh", recorded_node=recorded, node=node,
                        samples=dropped)

    def _restart_gap(self) -> None:
        """At a process's first usable desired state: the restart's gap spans a persisted streak only while it
        is short. A detected item last seen longer than --max-desired-age ago (a process down for an hour, or
        one that came up into an outage and never synced) goes back to 0, as a process that lived through
        that time would have restarted it (`_unknown`): no streak spans a time in which it was not known which
        pods exist."""
        now = self.clock()
        horizon = now - self.settings.max_desired_age_seconds
        old = {k: i for k, i in self.ledger.items(active_only=True).items() if i.last_seen < horizon}
        transitions = unknown(old)
        if transitions:
            self._persist(transitions, now)
            log.info("restart gap longer than the desired state's maximum age: scans in a row start again",
                     items=len(transitions))
            self.metrics.streaks_restarted("restart_gap", len(transitions))

    def _scan(self, desired: DesiredState) -> tuple[Inventory, tuple[Finding, ...]]:
        """One read of the node, joined with `desired`; not yet checked against the runtime (`_checked`)."""
        started = time.monotonic()
        inventory = self.scanner(self.roots, self.settings.scan)
        policy = self.settings.correlation
        gave_up = self._gave_up = self._runtime_gave_up()
        if gave_up:
            policy = dataclasses.replace(policy, runtime_gave_up=gave_up)
        inventory, findings = detect(inventory, desired, now=inventory.taken_at, policy=policy)
        counts: dict[str, int] = {}
        for p in inventory.problems:
            counts[p.kind.value] = counts.get(p.kind.value, 0) + 1
            log.warning("read problem", kind=p.kind.value, path=p.path, reason=p.reason, cause=p.cause)
        self.metrics.scanned(time.monotonic() - started, sorted(counts.items()))
        self.metrics.scan_problems([(p.kind.value, p.cause) for p in inventory.problems])
        return inventory, findings

    def _judge(self, inventory: Inventory, desired: DesiredState) -> tuple[Inventory, tuple[Finding, ...]]:
        """The same read of the node (as `_scan` left it, before any runtime check) joined with another
        desired state (the proven photograph)."""
        policy = self.settings.correlation
        if self._gave_up:
            policy = dataclasses.replace(policy, runtime_gave_up=self._gave_up)
        return detect(inventory, desired, now=inventory.taken_at, policy=policy)

    def _checked(self, inventory: Inventory, desired: DesiredState, report: CycleReport) -> Inventory:
        """The scan checked against the runtime on the view the cycle acts on, once per scan: a runtime that
        cannot vouch for that view's pods adds its read problems, and `report.problems` counts them all."""
        why = self._runtime_unusable(inventory.runtime, desired.pods)
        if why:
            # Today's rules go on; nothing that needs the runtime's word is concluded this scan, and a
            # sandbox the list does not show is not gone (its item neither closes nor counts as done).
            if f"runtime_unavailable: {why}" not in report.blocked:
                self._block(report, "runtime_unavailable", why)
            if inventory.runtime is not None:
                # Nor are the runtime's leftovers gone when they are not judged.
                seen = {p.kind for p in inventory.problems}
                missing = tuple(ReadProblem(kind, inventory.runtime.endpoint, why)
                                for kind in (Kind.SANDBOX, Kind.RUNTIME_LEFTOVER) if kind not in seen)
                inventory = dataclasses.replace(inventory, problems=(*inventory.problems, *missing))
                # Counted as the scan's own are (`_scan`): nodegc_read_problems_total is report.problems.
                self.metrics.problems([(p.kind.value, 1) for p in missing])
        report.problems += len(inventory.problems)
        return inventory

    # -- terminate -------------------------------------------------------------------------------

    def _terminate(self, candidates: list[Item], report: CycleReport) -> list[tuple[Item, Resource]]:
        """Re-verify right before acting: a fresh desired state, a fresh host read, a live GET per owner."""
        node = self.node
        fresh = self._fresh_desired(report)
        desired = self._proven(fresh, report) if fresh is not None else None
        if desired is None or desired.node != node:
            # A desired state of another node than the cycle's took the ledger over (`_own_ledger`): the
            # candidates were that node's items.
            return []
        inventory, findings = self._scan(desired)
        inventory = self._checked(inventory, desired, report)
        refusal = blast_radius_refusal(findings, desired, self.settings.blast_radius)
        if refusal:
            self._block(report, "blast_radius", refusal)
            return []
        now = self.clock()
        by_key = {f"{f.kind.value}:{f.id}": f for f in findings}
        current = resources(inventory)
        verified: list[tuple[Item, Resource]] = []
        blind = Blind(inventory.problems)
        scope = Scope.of(inventory)
        fetched: dict[tuple[str, str], Pod | None] = {}
        """One live GET per owner pod this pass, not one per item: a sandbox has half a dozen items."""
        settled: list[Transition] = []
        """Items sent back or found done on the way: recorded with the checkpoint, in one transaction."""
        statuses: dict[str, RuntimeSandbox | None] = {}
        """One fresh PodSandboxStatus per sandbox this phase (taken here, never the scan's), not one per item."""
        groups: dict[str, list[Item]] = {}
        for item in sorted(candidates, key=lambda i: (_KIND_ORDER[i.kind], i.key)):
            groups.setdefault(_group(item), []).append(item)
        # When the rate limit holds work back, the ranges closest to exhaustion get their addresses first.
        urgency = reclaim_urgency(report.ranges)
        ordered = sorted(groups.values(), key=lambda g: min(urgency.get(i.resource_id, NOT_URGENT) for i in g))
        for members in ordered:
            passed: list[tuple[Item, Resource]] = []
            for item in members:
                if (item.phase is Phase.TERMINATING and item.key not in current and not blind.hides(item)
                        and scope.outside(item) is None):
                    # A crash came after the side effect and before its record: the step is done.
                    settled.append(after_attempt(item, ok=True, changed=False, lazy=False, now=now,
                                                 detail=INTERRUPTED_STEP_GONE, policy=self.settings.phases))
                    continue
                try:
                    doubt = self._item_doubt(item, by_key.get(item.key), current.get(item.key), statuses, fetched)
                except CRIError as e:
                    self._block(report, "runtime_unavailable", f"fresh sandbox status failed: {e}")
                    return self._checkpoint(_by_kind(verified), now, settled)
                except SourceError as e:
                    self._block(report, "source_unavailable", f"live GET failed, nothing proceeds: {e}")
                    return self._checkpoint(_by_kind(verified), now, settled)
                if doubt:
                    settled.append(back_to_detect(item, f"re-verification: {doubt}", now))
                    report.sent_back.append((item, doubt))
                    self.metrics.blocked("reverification")
                    log.info("sent back to detect", item=item.key, reason=doubt)
                    continue
                passed.append((item, current[item.key]))
            if not passed:
                continue
            # One sandbox (or pod) goes whole or waits whole: a split would remove the evidence (the
            # cache entry) that ties its other leftovers to the dead pod.
            if not self.bucket.take(len(passed)):
                self._block(report, "rate_limit", "global reclaim rate reached; the rest waits")
                break
            verified += passed
        return self._checkpoint(_by_kind(verified), now, settled)

    def _item_doubt(self, item: Item, fresh: Finding | None, resource: Resource | None,
                    statuses: dict[str, RuntimeSandbox | None],
                    fetched: dict[tuple[str, str], Pod | None]) -> str | None:
        """Why the item must not go now, or None. Raises CRIError when the runtime cannot answer for its
        sandbox, SourceError when the live GET of its owner fails."""
        doubt = self._doubt(item, fresh, resource)
        if doubt is None and fresh is not None and fresh.sandbox:
            doubt = self._runtime_doubt(item, fresh.sandbox, statuses)
        owner_matters = fresh is None or not fresh.sandbox or fresh.owner_state is not OwnerState.LIVE
        if doubt is None and owner_matters:
            doubt = self._owner_doubt(item, fetched)
        return doubt

    def _doubt(self, item: Item, finding: Finding | None, resource: Resource | None) -> str | None:
        if resource is None or finding is None:
            return "resource no longer present"
        if not finding.cls.is_residue:
            return f"now classified {finding.cls.value}"
        if identity_of(resource) != item.identity:
            return "identity changed since it was marked"
        if finding.owner.uid != item.owner_uid:
            return "owner changed since it was marked"
        return None

    def _stop_running_orphans(self, report: CycleReport, desired: DesiredState, *, inventory: Inventory,
                              findings: tuple[Finding, ...], proven: bool) -> None:
        """Stop the running orphans that are so on a proven view too: `desired` when the cycle acts on a
        proven one, else the proof is taken here and the node (`inventory`, before its runtime check) judged
        again on it (`_on_proven`); without a proof none is stopped (`view_not_current`)."""
        endpoint = self.settings.scan.runtime_endpoint
        if not endpoint or not self.executor.destructive:
            return
        due_now = report.running_orphans
        if not proven:
            judged = self._on_proven(desired, inventory, findings, report)
            if judged is None:
                return
            still = {(f.id, f.owner.uid) for f in judged[2]
                     if f.kind is Kind.SANDBOX and f.cls is FindingClass.RUNNING_ORPHAN}
            for f in due_now:
                if (f.id, f.owner.uid) not in still:
                    log.info("running orphan kept: not one on the proven view", sandbox=f.id,
                             owner=f.owner.label(), owner_uid=f.owner.uid)
            due_now = [f for f in due_now if (f.id, f.owner.uid) in still]
        for f in due_now:
            try:
                stopped, why = stop_running_orphan(f, endpoint=endpoint, timeout=self.settings.scan.runtime_timeout,
                                                   get_pod=self.source.get_pod, seen=self.orphans.sandboxes.get(f.id))
            except SourceError as e:
                self._block(report, "source_unavailable", f"live GET failed, no running orphan is stopped: {e}")
                return
            report.stopped_orphans.append((f, stopped, why))
            self.metrics.reclaimed(Kind.SANDBOX.value, "stopped" if stopped else "kept")
            log.info("running orphan", sandbox=f.id, stopped=stopped, detail=why)

    def _runtime_gave_up(self) -> frozenset[str]:
        """Sandboxes the runtime failed to stop and remove this many times: its turn is over."""
        return frozenset(
            i.resource_id for i in self.ledger.items(active_only=True).values()
            if i.kind is Kind.SANDBOX and i.attempts >= RUNTIME_ATTEMPTS_BEFORE_DIRECT)

    def _runtime_doubt(self, item: Item, sandbox_id: str, statuses: dict[str, RuntimeSandbox | None]) -> str | None:
        """A fresh PodSandboxStatus: an attachment judged by the runtime's word needs the runtime still not
        to know its sandbox; a sandbox to remove must still exist and still be NotReady. `statuses` holds the
        answers of this terminate phase: the items of one sandbox share one status call."""
        reader = runtime_reader(self.settings.scan)
        if reader is None:
            return "no runtime to ask"
        if sandbox_id not in statuses:
            statuses[sandbox_id] = reader.fresh_status(sandbox_id)
        status = statuses[sandbox_id]
        if item.kind is not Kind.SANDBOX:
            if status is not None and not status.ready and sandbox_id in self._gave_up:
                return None
            if status is not None:
                return f"the runtime knows sandbox {sandbox_id[:12]} ({'READY' if status.ready else 'NotReady'})"
            return None
        if status is None:
            return "the runtime no longer knows the sandbox"
        if status.ready:
            return "the sandbox is READY"
        return None

    def _owner_doubt(self, item: Item, fetched: dict[tuple[str, str], Pod | None]) -> str | None:
        if not (item.owner_namespace and item.owner_name):
            return None
        key = (item.owner_namespace, item.owner_name)
        if key not in fetched:
            fetched[key] = self.source.get_pod(*key)
        pod = fetched[key]
        if pod is None:
            return None
        if item.owner_uid is None:
            if pod.node_name and self.node and pod.node_name != self.node:
                return None  # that name now runs on another node: it cannot be using this node's leftovers
            return f"a pod named {item.owner_namespace}/{item.owner_name} exists and no UID tells it apart"
        if item.owner_uid not in (pod.uid, pod.static_uid):
            return None  # a newer incarnation under the same name: not the owner
        if item.kind in (Kind.POD_DIR, Kind.POD_LOG_DIR):
            return "the owner pod still exists; the kubelet keeps its directories"
        if pod.state is not OwnerState.TERMINAL:
            return f"the owner pod is {pod.state.value}"
        return None

    # -- clean and confirm -----------------------------------------------------------------------

    def _clean(self, verified: list[tuple[Item, Resource]], report: CycleReport) -> None:
        """The executor's outcomes are recorded one transaction per step (outcomes of one kind in a row),
        not one per item: each transaction is an fsync. No side effect waits on an outcome's record (the
        TERMINATING checkpoint guards them all); a crash before a step's record leaves its items
        TERMINATING, and the next terminate finds each one done (gone) or re-verifies and retries it."""
        pending: list[Transition] = []

        def flush() -> None:
            if not pending:
                return
            batch = list(pending)
            pending.clear()
            self._persist(batch, self.clock())
            for t in batch:
                fault_point(f"after_record:{t.item.kind.value}")

        def on_outcome(item: Item, outcome: Outcome) -> None:
            if pending and pending[-1].item.kind is not item.kind:
                flush()
            now = self.clock()
            pending.append(after_attempt(item, ok=outcome.ok, changed=outcome.identity_changed,
                                         detail=outcome.detail, lazy=outcome.lazy, now=now,
                                         policy=self.settings.phases, skipped=outcome.skipped))
            result = "dry_run" if outcome.skipped else "gone" if outcome.already_gone else "ok" if outcome.ok else (
                "changed" if outcome.identity_changed else "failed")
            self.metrics.reclaimed(item.kind.value, result)
            report.outcomes.append((item, outcome))
            log_fn = log.info if outcome.ok else log.warning
            log_fn("reclaim", item=item.key, kind=item.kind.value, result=result, detail=outcome.detail,
                   lazy=outcome.lazy, owner_uid=item.owner_uid, owner=f"{item.owner_namespace}/{item.owner_name}")

        if self.executor.destructive:
            verified = [(dataclasses.replace(i, phase=Phase.TERMINATING), r) for i, r in verified]
        try:
            self.executor.execute(verified, on_outcome=on_outcome)
        finally:
            flush()

    def _confirm(self, verified: list[tuple[Item, Resource]], report: CycleReport) -> None:
        """Only a confirmed absence closes an item; a rescan of the host decides."""
        inventory = self.scanner(self.roots, self.settings.scan)
        present = resources(inventory)
        blind = Blind(inventory.problems)
        now = self.clock()
        closing: list[Transition] = []
        for item, _ in verified:
            latest = self.ledger.get(item.key)
            if latest is None or latest.phase is not Phase.CLEANED or blind.hides(item):
                continue
            if item.key not in present or identity_of(present[item.key]) != item.identity:
                closed = dataclasses.replace(latest, phase=Phase.CLOSED, last_seen=now)
                closing.append(Transition(closed, latest.phase, "confirmed absent"))
                report.closed.append(closed)
        self._persist(closing, now)

    # -- plumbing --------------------------------------------------------------------------------

    def _persist(self, transitions: Sequence[Transition], now: float) -> None:
        if not transitions:
            return
        self.ledger.apply(transitions, now=now)
        _log_transitions(transitions)

    def _checkpoint(self, verified: list[tuple[Item, Resource]], now: float,
                    settled: Sequence[Transition] = ()) -> list[tuple[Item, Resource]]:
        """Every verified item is written TERMINATING before a destructive executor runs, in one transaction
        with the items terminate settled on the way (sent back, or found done): one fsync, not one per item."""
        transitions = list(settled)
        if self.executor.destructive:
            transitions += [
                Transition(dataclasses.replace(item, phase=Phase.TERMINATING), item.phase, "re-verified; reclaiming")
                for item, _ in verified if item.phase is not Phase.TERMINATING]
        self._persist(transitions, now)
        if not self.executor.destructive:
            return verified
        for item, _ in verified:
            fault_point(f"after_checkpoint:{item.kind.value}")
        return verified

    def _block(self, report: CycleReport, reason: str, message: str) -> None:
        report.blocked.append(f"{reason}: {message}")
        self.metrics.blocked(reason)
        log.warning("destructive actions blocked", reason=reason, detail=message)

    def _report_items(self) -> None:
        counts: dict[tuple[str, str], int] = {}
        for item in self.ledger.items(active_only=True).values():
            key = (item.kind.value, item.phase.value)
            counts[key] = counts.get(key, 0) + 1
        self.metrics.items(counts)


def same_judgement(*, first: DesiredState, proven: DesiredState) -> bool:
    """Whether judging the node on `proven` could only conclude what judging it on `first` did, or keep more:
    the same node and the very same pods, field by field (`Pod` is a frozen value holding everything the join
    reads of a pod: UID, name, phase, IPs, creation time, mirror UID; equal as a tuple, in the same order),
    and a proven photograph not older than the first one. The photograph's time only sets minimum-age
    horizons (an older photograph protects more), so a first judgement on an older or equal time stands."""
    return first.node == proven.node and proven.fetched_at >= first.fetched_at and first.pods == proven.pods


def orphan_shims(inventory: Inventory, findings: Sequence[Finding]) -> list[Finding]:
    """The shims of this scan whose id the runtime does not list, old enough to judge."""
    view = inventory.runtime
    shims = {left.path for left in view.leftovers if left.what == "shim" and not left.problem} if view else set()
    return [f for f in findings if f.kind is Kind.RUNTIME_LEFTOVER and f.id in shims
            and f.cls in (FindingClass.RUNTIME_LEFTOVER, FindingClass.ORPHANED_SHIM)]


def _log_transitions(transitions: Sequence[Transition]) -> None:
    for t in transitions:
        if t.phase_changed:
            log.info("transition", item=t.item.key, kind=t.item.kind.value,
                     from_phase=t.previous.value if t.previous else None, to_phase=t.item.phase.value,
                     reason=t.reason)


def _residue_identities(inventory: Inventory, findings: Sequence[Finding]) -> dict[str, Identity]:
    """The identities of the residue findings' resources, by item key: only a residue finding's item takes its
    resource's identity (`reconcile`, `refused`), so on a node of live pods none is made."""
    residue = [f for f in findings if f.cls.is_residue]
    current = resources(inventory) if residue else {}
    return {key: identity_of(current[key]) for f in residue if (key := item_key(f.kind, f.id)) in current}


def _refusal(report: CycleReport) -> str:
    """The reason of the cycle's last whole-cycle refusal (`view_not_current` when none is recorded)."""
    reasons = [reason for b in report.blocked if (reason := b.split(":", 1)[0]) in _REFUSALS]
    return reasons[-1] if reasons else "view_not_current"


def _group(item: Item) -> str:
    return item.container_id or item.owner_uid or item.key


def _by_kind(verified: list[tuple[Item, Resource]]) -> list[tuple[Item, Resource]]:
    return sorted(verified, key=lambda pair: (_KIND_ORDER[pair[0].kind], pair[0].key))


_REFUSALS = frozenset({"source_unavailable", "stale_source", "view_not_current", "blast_radius"})
"""Blocks that refuse the whole cycle: such a cycle is not a successful one."""

RUNTIME_ATTEMPTS_BEFORE_DIRECT = 3
"""Failed StopPodSandbox/RemovePodSandbox attempts of one sandbox before its parts are reclaimed directly."""

# CNI DEL first (Debian's bridge plugin fails DEL when its chain is already gone), then what DEL left:
# rules, the veth, the netns, and the IP last, once nothing can still carry it.
_KIND_ORDER = {kind: i for i, kind in enumerate((
    Kind.SANDBOX, Kind.CNI_CACHE, Kind.HOSTPORT_RULE, Kind.IPTABLES_CHAIN, Kind.FIREWALL_RULE, Kind.VETH, Kind.NETNS,
    Kind.IP_RESERVATION,
    Kind.VOLUME_MOUNT, Kind.POD_DIR, Kind.RUNTIME_LEFTOVER, Kind.POD_LOG_DIR,
))}
