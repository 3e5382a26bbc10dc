"""READY sandboxes of pods the API no longer shows (`running_orphan`): counted from when nodegc first saw
each one so, reported once absent longer than the long grace, and stopped only on opt-in.

The first-seen time of each is kept in the ledger by sandbox id, with the pod UID and the creation time the
sandbox had then, so an agent that restarts (or crash-loops) goes on counting instead of starting over. It
is forgotten when the sandbox is no longer a running orphan in a complete runtime list (its pod is in the
API again, it stopped, or it is gone), and whenever it is READY with its pod in the API (`in_use`, even on
an incomplete list: the absence ended); a runtime that cannot be read, or whose list misses a running pod's
sandbox, changes nothing.

A wall clock can step (NTP, an operator, a bad RTC at boot), so each record also keeps the boot id and
CLOCK_BOOTTIME of its first sight: in the same boot the absence is measured on that clock, which no step
moves, and a forward step of the wall clock does not end the grace early. In another boot, or without a
boot clock reading (a row an older nodegc wrote, an unreadable boot id), the wall clock measures it, and a
first-seen time after now (the clock stepped back, a ledger copied from elsewhere) counts as now: it never
makes an orphan older. A ledger that cannot be read or written leaves
the count in this process's memory, and the log says so; once it answers again, what memory learnt meanwhile
wins over its older rows (a record forgotten in the outage stays forgotten) and is written back.

Stopping is destructive and the workload is still running, so it takes every check a reclaim takes and
more: the cycle's guards passed, a live GET finds no pod with that UID, and a fresh PodSandboxStatus still
shows the same sandbox READY, for the same pod UID and with the creation time seen at detect (a sandbox
the runtime made anew is not the one that was judged). Only StopPodSandbox is called: the sandbox then
turns NotReady and, one grace later, is an `orphaned_sandbox` removed through the usual phases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from nodegc import defaults
from nodegc.hostio.clock import BootTime, read_boot_time
from nodegc.inventory.cri.client import CRIError, RuntimeClient
from nodegc.ledger.store import LedgerError, OrphanSeen
from nodegc.model.findings import Finding, FindingClass
from nodegc.model.pods import Pod
from nodegc.model.resources import Kind
from nodegc.model.runtime import RuntimeSandbox, RuntimeView
from nodegc.observe.logs import get_logger

log = get_logger("nodegc.engine")


class OrphanStore(Protocol):
    """Where first-seen times persist (`ledger.store.Ledger`)."""

    def running_orphans(self) -> dict[str, OrphanSeen]: ...
    def save_running_orphans(self, *, seen: dict[str, OrphanSeen], forget: Iterable[str] = ()) -> None: ...


def _created(sb: RuntimeSandbox | None) -> str:
    return sb.created_at.isoformat() if sb is not None and sb.created_at is not None else ""


@dataclass
class RunningOrphans:
    grace_seconds: float = defaults.RUNNING_ORPHAN_GRACE_SECONDS
    store: OrphanStore | None = None
    """None: counted in memory only (a process's life)."""
    on_store_error: Callable[[], None] | None = None
    boot_clock: Callable[[], BootTime | None] = read_boot_time
    """The boot id and CLOCK_BOOTTIME, read once an observation; None when unreadable (the wall clock then)."""
    first_seen: dict[str, OrphanSeen] = field(default_factory=dict)
    """The records as last read or written (the store's when it answers, this process's when it does not)."""
    sandboxes: dict[str, RuntimeSandbox] = field(default_factory=dict)
    """The running orphans of the last observation, as the runtime listed them (what a stop must find again)."""
    _store_down: bool = False
    _resync: bool = False
    """The ledger answered again after an outage: the next save writes every record back."""
    _unsaved_forgets: set[str] = field(default_factory=set)
    """Records forgotten while the ledger could not be written."""

    def observe(self, findings: Iterable[Finding], now: float, *, view: RuntimeView | None = None,
                complete: bool = True) -> list[Finding]:
        """The running orphans absent longer than the grace. Only a complete, reachable runtime list (and
        `view` given) forgets the sandboxes that are running orphans no more."""
        findings = list(findings)
        records = self._load()
        current = {f.id: f for f in findings if f.kind is Kind.SANDBOX and f.cls is FindingClass.RUNNING_ORPHAN}
        listed = view.by_id() if view is not None and view.reachable else {}
        decisive = view is not None and view.reachable and complete
        # A READY sandbox whose pod the API shows (`in_use`) is no orphan now, whatever the list's completeness:
        # its earlier absence ended, and a later one counts from scratch.
        back = {f.id for f in findings if f.kind is Kind.SANDBOX and f.cls is FindingClass.IN_USE}
        forget = [sid for sid in records if sid not in current and (decisive or sid in back)]
        changed: dict[str, OrphanSeen] = {}
        due: list[Finding] = []
        self.sandboxes = {}
        boot = self.boot_clock() if current else None
        for sid, f in current.items():
            sb = listed.get(sid)
            uid, created = (sb.pod_uid if sb is not None else f.owner.uid or ""), _created(sb)
            rec = records.get(sid)
            if rec is None or rec.pod_uid != uid or rec.created_at != created:
                rec = changed[sid] = _first_sight(now, uid, created, boot)
            absent = _absent_for(rec, now, boot)
            if absent < 0:
                log.warning("running orphan first seen in the future (clock stepped back, or a ledger from"
                            " elsewhere): counted from now", sandbox=sid, first_seen=rec.first_seen, now=now,
                            clock="boot" if _same_boot(rec, boot) else "wall")
                rec = changed[sid] = _first_sight(now, uid, created, boot)
                absent = 0.0
            if sb is not None:
                self.sandboxes[sid] = sb
            if absent >= self.grace_seconds:
                due.append(f)
        records = {sid: r for sid, r in records.items() if sid not in forget} | changed
        self.first_seen = records
        if changed or forget or self._resync:
            self._save(changed, forget)
        return due

    def forget_all(self) -> None:
        """Forget every first-seen time this process holds (the ledger's were dropped with it: a ledger of
        another node taken over, `Ledger.take_over`): the graces start again from this node's own sightings."""
        self.first_seen = {}
        self.sandboxes = {}
        self._unsaved_forgets.clear()

    def _load(self) -> dict[str, OrphanSeen]:
        if self.store is None:
            return dict(self.first_seen)
        try:
            records = self.store.running_orphans()
        except LedgerError as e:
            self._store_failed("read", e)
            return dict(self.first_seen)
        if self._store_down:
            # What this process learnt meanwhile wins over the ledger's rows from before the outage: the
            # records it forgot stay forgotten, those it began or kept stand; written back on the next save.
            self._store_down = False
            self._resync = True
            log.info("running orphans' first-seen times read from the ledger again")
            return {sid: r for sid, r in records.items() if sid not in self._unsaved_forgets} | self.first_seen
        return records

    def _save(self, changed: dict[str, OrphanSeen], forget: list[str]) -> None:
        if self.store is None:
            return
        whole = self._store_down or self._resync
        forget = [*forget, *sorted(self._unsaved_forgets - set(forget))]
        try:
            # The in-memory records are the whole truth while the store failed: write them all back.
            self.store.save_running_orphans(seen=self.first_seen if whole else changed, forget=forget)
        except LedgerError as e:
            self._unsaved_forgets.update(forget)
            self._store_failed("written", e)
        else:
            self._resync = False
            self._unsaved_forgets.clear()

    def _store_failed(self, what: str, e: LedgerError) -> None:
        if self.on_store_error is not None:
            self.on_store_error()
        if not self._store_down:
            log.warning("running orphans' first-seen times unavailable in the ledger: counted in this process's"
                        " memory until it answers (a restart then starts their grace over)", operation=what,
                        error=str(e))
        self._store_down = True


def _first_sight(now: float, uid: str, created: str, boot: BootTime | None) -> OrphanSeen:
    return OrphanSeen(first_seen=now, pod_uid=uid, created_at=created, boot_id=boot.boot_id if boot else "",
                      boottime=boot.seconds if boot else None)


def _same_boot(rec: OrphanSeen, boot: BootTime | None) -> bool:
    return boot is not None and rec.boottime is not None and rec.boot_id != "" and rec.boot_id == boot.boot_id


def _absent_for(rec: OrphanSeen, now: float, boot: BootTime | None) -> float:
    """Seconds since the first sight: on the boot clock in the boot it was taken in, else on the wall clock.
    Negative: a first sight after now (the caller starts it over)."""
    if boot is not None and rec.boottime is not None and _same_boot(rec, boot):
        return boot.seconds - rec.boottime
    return now - rec.first_seen


def stop_running_orphan(
    finding: Finding,
    *,
    endpoint: str,
    timeout: float,
    get_pod: Callable[[str, str], Pod | None],
    seen: RuntimeSandbox | None = None,
) -> tuple[bool, str]:
    """(stopped, why). Any doubt, or any failure to ask, keeps the sandbox running. `seen`: the sandbox as
    the scan that judged it listed it; its creation time must be the fresh status's."""
    from nodegc.inventory.cri.reading import sandbox_from_status

    ns, name, uid = finding.owner.namespace, finding.owner.name, finding.owner.uid
    if not (ns and name and uid):
        return False, "the sandbox names no pod namespace, name and uid"
    if seen is None or seen.created_at is None:
        return False, "the creation time the sandbox was judged with is unknown"
    pod = get_pod(ns, name)
    if pod is not None and uid in (pod.uid, pod.static_uid):
        return False, f"pod {ns}/{name} with that uid exists again"
    try:
        with RuntimeClient(endpoint, timeout=timeout) as client:
            reply = client.sandbox_status(finding.id)
            if reply is None:
                return False, "the runtime no longer knows the sandbox"
            if reply.status.state != 0:
                return False, "the sandbox is no longer READY"
            if reply.status.metadata.uid != uid:
                return False, "the sandbox id now names another pod's sandbox"
            created = sandbox_from_status(reply).created_at
            if created != seen.created_at:
                return False, (f"the sandbox's creation time is now {created.isoformat() if created else 'unknown'},"
                               f" not {seen.created_at.isoformat()}: not the sandbox that was judged")
            client.stop_sandbox(finding.id)
    except CRIError as e:
        return False, f"runtime: {e}"
    log.warning("running orphan stopped", sandbox=finding.id, owner=f"{ns}/{name}", owner_uid=uid)
    return True, "stopped through CRI StopPodSandbox"
