"""`nodegc scan`, `clean`, `history` and `explain`: typed settings in (from nodegc.wiring), a report out.

Every error is printed once, on stderr, as one `nodegc: ...` line, with a `hint:` line where one helps.
Data goes to stdout: a table for people, or one document (apiVersion, kind) for machines.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from nodegc import defaults
from nodegc.console import fail, require_root
from nodegc.desired.source import SourceError, staleness
from nodegc.engine.cycle import CycleReport, Engine, EngineSettings, LedgerTakeover
from nodegc.exitcodes import (
    EXIT_BLOCKED,
    EXIT_CLEAN,
    EXIT_NODE_UNSEEN,
    EXIT_RESIDUE,
    EXIT_SOURCE,
    EXIT_USAGE,
)
from nodegc.ledger.store import LedgerError, LedgerLocked
from nodegc.model.findings import Owner
from nodegc.model.items import Item, Phase
from nodegc.model.pods import DesiredState, OwnerState
from nodegc.model.resources import Inventory
from nodegc.observe.logs import get_logger
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.reclaim.dispatch import Batch, Executor, OnOutcome
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import Roots
from nodegc.wiring import (
    ONE_SHOT_PHASES,
    CleanSettings,
    ExplainSettings,
    HistorySettings,
    ScanSettings,
    SourceSettings,
    make_engine_settings,
    make_executor,
    make_source,
    open_ledger,
    reads_stdin,
)

log = get_logger("nodegc.commands")
API_VERSION = "nodegc.io/v1alpha1"


# -- shared --------------------------------------------------------------------------------------


def source_hint(source: SourceSettings, error: str) -> str | None:
    """What to try next, for the errors people hit first."""
    if source.pods_from is None and ("configuration" in error or "API client" in error):
        return ("nodegc reads the pods bound to this node from the API: give --kubeconfig FILE (and --context), "
                "set $KUBECONFIG, or give a snapshot with --pods-from FILE (kubectl get pods -A -o json)")
    return None


def stale_hint(source: SourceSettings, max_age: float) -> str:
    if source.pods_from is not None and str(source.pods_from) == "-":
        return ("a snapshot read from stdin has no age, so it never counts as fresh: save it to a file "
                "right before the run (kubectl get pods -A -o json > pods.json; --pods-from pods.json)")
    if source.pods_from is not None:
        try:
            written = datetime.fromtimestamp(source.pods_from.stat().st_mtime, UTC).isoformat(timespec="seconds")
        except OSError:
            written = "at an unknown time"
        return (f"{source.pods_from} was written {written}; nodegc acts only on a desired state younger than "
                f"--max-desired-age ({max_age:g}s): refresh it (kubectl get pods -A -o json > "
                f"{source.pods_from}) or raise --max-desired-age")
    return (f"the API's answer was older than --max-desired-age ({max_age:g}s) or dated in the future: "
            "check the node's clock and the API server's latency")


def emit(doc: dict[str, Any], output: str, out: TextIO | None = None) -> None:
    stream = out or sys.stdout
    if output == "yaml":
        import yaml

        stream.write(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    else:
        stream.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def unseen(roots: Roots, inventory: Inventory, desired: DesiredState) -> list[str]:
    """Why this scan cannot see the node; empty when it can. A scan that sees nothing is not a clean node."""
    reasons = []
    for flag, path in (("--kubelet-root", roots.kubelet_root), ("--cni-data-dir", roots.cni_data_dir)):
        if not path.is_dir():
            reasons.append(f"{path} ({flag}) does not exist or is not a directory")
    running = [p for p in desired.pods if p.node_name == desired.node and p.state is OwnerState.LIVE]
    if running and not inventory.pod_dirs and roots.kubelet_root.is_dir():
        reasons.append(f"the desired state lists {len(running)} running pods on node {desired.node}, but "
                       f"{roots.kubelet_root}/pods holds no pod directory")
    return reasons


# -- scan ----------------------------------------------------------------------------------------


def cmd_scan(settings: ScanSettings) -> int:
    from nodegc.engine.detecting import detect
    from nodegc.inventory.scanning import scan_node
    from nodegc.planning.ipranges import range_usage
    from nodegc.render import Report, render_json, render_table, render_yaml

    denied = require_root("nodegc scan")
    if denied is not None:
        return denied
    try:
        source = make_source(settings.source, prove_current=False)  # read only: no destructive step follows
        desired = source.fetch()
    except SourceError as e:
        return fail(f"cannot read the pods bound to this node: {e}", hint=source_hint(settings.source, str(e)),
                    code=EXIT_SOURCE)
    inventory, findings = detect(scan_node(settings.roots, settings.options), desired, now=datetime.now(UTC),
                                 policy=CorrelationPolicy(min_age_seconds=settings.options.min_age_seconds))
    blind = unseen(settings.roots, inventory, desired)
    # A scan plans on any photo (it changes nothing), but says when clean --apply would refuse it.
    stale = staleness(desired, now=datetime.now(UTC), max_age_seconds=defaults.MAX_DESIRED_AGE_SECONDS)
    warnings = (*desired.warnings, *([stale] if stale else []))
    for text in warnings:
        log.warning("desired state", detail=text)
        print(f"nodegc: warning: {text}", file=sys.stderr)
    report = Report(node=desired.node, source=desired.source, taken_at=inventory.taken_at,
                    findings=findings, problems=inventory.problems, unseen=tuple(blind),
                    ranges=range_usage(inventory, findings), range_problems=inventory.ip_range_problems,
                    runtime=inventory.runtime, warnings=warnings)
    for p in inventory.problems:
        log.info("read problem", kind=p.kind.value, path=p.path, reason=p.reason)
    log.info("scan done", node=desired.node, findings=len(findings), residue=len(report.residue),
             conflicts=len(report.conflicts), problems=len(inventory.problems))
    out = {"json": render_json, "yaml": render_yaml}.get(settings.output)
    sys.stdout.write(out(report) if out else render_table(report, show_all=settings.show_all))
    if blind:
        return fail("this scan cannot see the node: " + "; ".join(blind),
                    hint="point --kubelet-root and --cni-data-dir at the node's directories (in a container, "
                         "mount them from the host, as the DaemonSet does)", code=EXIT_NODE_UNSEEN)
    return EXIT_RESIDUE if report.residue or report.conflicts else EXIT_CLEAN


# -- clean ---------------------------------------------------------------------------------------


class Progress:
    """`clean --apply` output as it happens: each step on stdout (table), a progress line on a terminal."""

    def __init__(self, *, table: bool, out: TextIO, err: TextIO) -> None:
        self.table = table
        self.out = out
        self.err = err
        self.tty = err.isatty()
        self.done = 0
        self.total = 0

    def batch(self, size: int) -> None:
        self.total += size

    def step(self, item: Item, outcome: Outcome) -> None:
        self.done += 1
        if self.table:
            self._clear()
            self.out.write(f"{_state(outcome):<8} {item.key}  {outcome.detail}\n")
            self.out.flush()
        if self.tty:
            self.err.write(f"\r[{self.done}/{self.total}] {item.key[:60]:<60}")
            self.err.flush()

    def waiting(self, seconds: float, rate: float) -> None:
        self._clear()
        self.err.write(f"nodegc: waiting {seconds:.0f}s for the rate limiter (--reclaims-per-minute {rate:g})\n")
        self.err.flush()

    def finish(self) -> None:
        self._clear()

    def _clear(self) -> None:
        if self.tty:
            self.err.write("\r\033[K")


@dataclasses.dataclass
class StreamingExecutor:
    """The host executor, with every outcome handed to Progress the moment the engine has it (the ledger
    records a step's outcomes together)."""

    inner: Executor
    progress: Progress
    destructive: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.destructive = self.inner.destructive

    def execute(self, batch: Batch, *, on_outcome: OnOutcome) -> None:
        self.progress.batch(len(batch))

        def both(item: Item, outcome: Outcome) -> None:
            on_outcome(item, outcome)
            self.progress.step(item, outcome)

        self.inner.execute(batch, on_outcome=both)


def _state(outcome: Outcome) -> str:
    return ("gone" if outcome.already_gone else "ok" if outcome.ok
            else "changed" if outcome.identity_changed else "FAILED")


def cmd_clean(settings: CleanSettings, *, sleep: Callable[[float], None] = time.sleep) -> int:
    """One shot. Without --apply: an in-memory ledger and the dry-run executor, so nothing on the node
    or on disk changes. With --apply: the node's ledger (locked against a running agent)."""
    if settings.apply and reads_stdin(settings.source):
        return fail("clean --apply does not act on a list read from stdin", hint=stale_hint(
            settings.source, settings.safety.max_desired_age_seconds), code=EXIT_USAGE)
    denied = require_root("nodegc clean")
    if denied is not None:
        return denied
    progress = Progress(table=settings.output == "table", out=sys.stdout, err=sys.stderr)
    executor = make_executor(settings.roots, dry_run=not settings.apply, timeout=settings.safety.command_timeout,
                             runtime_endpoint=settings.safety.runtime_endpoint,
                             runtime_timeout=settings.safety.runtime_timeout,
                             iptables_backend=settings.safety.iptables_backend,
                             runtime_state_dir=settings.safety.runtime_state_dir,
                             runc_root=settings.safety.runc_root, cgroup_root=settings.safety.cgroup_root)
    if settings.apply:
        executor = StreamingExecutor(executor, progress)
    engine_settings = make_engine_settings(settings.safety, ONE_SHOT_PHASES)
    if not settings.apply:
        # A plan waits for nothing: the rate limit bounds reclaims, not what a dry run shows.
        engine_settings = dataclasses.replace(engine_settings, reclaim_burst=2**31)
    try:
        report, stale = _run_clean(settings, executor, engine_settings, progress, sleep)
    except LedgerLocked as e:
        progress.finish()
        return fail(f"{e}", hint="is the agent running on this node? Stop it, or let it do the work "
                    "(nodegc history shows what it did)", code=EXIT_BLOCKED)
    except LedgerError as e:
        progress.finish()
        return fail(f"{e}")
    progress.finish()
    _taken_over(report.ledger_taken_over)
    doc = _clean_doc(report, applied=settings.apply, stale=stale)
    if settings.output == "table":
        sys.stdout.write(_clean_table(doc, streamed=settings.apply))
    else:
        emit(doc, settings.output)
    _blocked_hint(settings, report)
    if stale and reads_stdin(settings.source):
        print(f"hint: {stale_hint(settings.source, settings.safety.max_desired_age_seconds)}", file=sys.stderr)
    if any(b.startswith("source_unavailable") for b in report.blocked):
        return EXIT_SOURCE
    if report.blocked:
        return EXIT_BLOCKED
    if not settings.apply:
        return EXIT_RESIDUE if doc["plan"] else EXIT_CLEAN
    failed = [o for o in doc["results"] if not o["ok"]]
    return EXIT_RESIDUE if failed else EXIT_CLEAN


def _taken_over(taken: LedgerTakeover | None) -> None:
    """A ledger of another node taken over: said on stderr, as the agent's log says it (this command logs only
    errors by default), before the report."""
    if taken is None:
        return
    print(f"nodegc: warning: the ledger {taken.ledger} was kept on node {taken.recorded!r}, not on this one"
          f" ({taken.node!r}): taken over, its open items released ({taken.released}) and not acted on; scans in"
          " a row and graces start again from this node's own scans", file=sys.stderr)
    print("hint: `nodegc history` shows the released items; once after a node was made from another's disk this"
          " is expected, else give each node its own --state-dir and a stable --node", file=sys.stderr)


def _blocked_hint(settings: CleanSettings, report: CycleReport) -> None:
    for reason in report.blocked:
        hint = (stale_hint(settings.source, settings.safety.max_desired_age_seconds)
                if reason.startswith("stale_source") else
                source_hint(settings.source, reason) if reason.startswith("source_unavailable") else None)
        if hint:
            print(f"hint: {hint}", file=sys.stderr)
            return


def _run_clean(settings: CleanSettings, executor: Executor, engine_settings: EngineSettings, progress: Progress,
               sleep: Callable[[float], None]) -> tuple[CycleReport, bool]:
    where: Path | str = settings.safety.ledger_path if settings.apply else ":memory:"
    stale = reads_stdin(settings.source)  # a piped list has no age: its plan is a preview only
    try:
        source = make_source(settings.source)  # once: `--pods-from -` reads stdin once
    except SourceError as e:
        return CycleReport(blocked=[f"source_unavailable: desired state unavailable: {e}"]), False
    with open_ledger(where) as ledger:
        engine = Engine(roots=settings.roots, source=source, ledger=ledger,
                        executor=executor, settings=engine_settings)
        report = engine.cycle()
        if not settings.apply and _only_stale(report):
            # The plan changes nothing, so it is shown on a stale desired state too, marked as such.
            stale = True
            relaxed = dataclasses.replace(engine_settings, max_desired_age_seconds=math.inf)
            with open_ledger(":memory:") as scratch:
                again = Engine(roots=settings.roots, source=source, ledger=scratch,
                               executor=executor, settings=relaxed).cycle()
            if not any(b.startswith("stale_source") for b in again.blocked):
                report = dataclasses.replace(again, blocked=report.blocked + again.blocked)
        # One shot waits for the rate limiter (visibly) instead of stopping after its burst.
        while settings.apply and any(b.startswith("rate_limit") for b in report.blocked):
            wait = _bucket_wait(engine)
            progress.waiting(wait, engine_settings.reclaims_per_minute)
            sleep(wait)
            report = _merge(report, engine.cycle())
    return report, stale


def _only_stale(report: CycleReport) -> bool:
    return bool(report.blocked) and all(b.startswith("stale_source") for b in report.blocked)


def _bucket_wait(engine: Engine) -> float:
    """Until the bucket is full again: the next group (a whole sandbox) may need all of it."""
    bucket = engine.bucket
    missing = max(0.0, bucket.burst - bucket.tokens)
    return max(1.0, missing / bucket.rate) if bucket.rate > 0 else 60.0


def _merge(first: CycleReport, more: CycleReport) -> CycleReport:
    return CycleReport(
        blocked=[b for b in first.blocked if not b.startswith("rate_limit")] + more.blocked,
        findings=first.findings,
        verified=first.verified + more.verified,
        outcomes=first.outcomes + more.outcomes,
        sent_back=first.sent_back + more.sent_back,
        closed=first.closed + more.closed,
        problems=max(first.problems, more.problems),
        ledger_taken_over=first.ledger_taken_over or more.ledger_taken_over,
    )


def _clean_doc(report: CycleReport, *, applied: bool, stale: bool = False) -> dict[str, Any]:
    """Dry run: the plan (what the host executor would do, in order). Applied: what each step did."""
    steps = report.outcomes
    plan = [] if applied else [
        {"item": i.key, "kind": i.kind.value, "owner": _owner(i), "action": o.detail.removeprefix("dry-run: ")}
        for i, o in steps]
    results = [] if not applied else [
        {"item": i.key, "kind": i.kind.value, "owner": _owner(i), "ok": o.ok, "already_gone": o.already_gone,
         "lazy": o.lazy, "identity_changed": o.identity_changed, "detail": o.detail}
        for i, o in steps]
    return {
        "apiVersion": API_VERSION,
        "kind": "CleanReport",
        "applied": applied,
        "stale": stale,
        "blocked": report.blocked,
        "plan": plan,
        "results": results,
        "sent_back": [{"item": i.key, "reason": why} for i, why in report.sent_back],
        "confirmed_closed": [i.key for i in report.closed],
        "residue_found": sum(1 for f in report.findings if f.cls.is_residue),
        "problems": report.problems,
    }


def _clean_table(doc: dict[str, Any], *, streamed: bool = False) -> str:
    lines: list[str] = []
    if doc["stale"]:
        lines.append("STALE   the desired state is not fresh (older than --max-desired-age, or read from stdin): "
                     "this plan is a preview; --apply would not act on it")
    for reason in doc["blocked"]:
        lines.append(f"BLOCKED {reason}")
    if not doc["applied"]:
        for step in doc["plan"]:
            lines.append(f"{step['owner']:<40} {step['action']}")
        lines.append(f"{len(doc['plan'])} reclaim steps planned; nothing was changed (add --apply to reclaim)")
    else:
        if not streamed:
            for r in doc["results"]:
                state = ("gone" if r["already_gone"] else "ok" if r["ok"]
                         else "changed" if r["identity_changed"] else "FAILED")
                lines.append(f"{state:<8} {r['item']}  {r['detail']}")
        lines.append(f"{sum(1 for r in doc['results'] if r['ok'])} of {len(doc['results'])} reclaimed,"
                     f" {len(doc['confirmed_closed'])} confirmed absent")
    for s in doc["sent_back"]:
        lines.append(f"kept    {s['item']}  {s['reason']}")
    return "\n".join(lines) + "\n"


def _owner(item: Item) -> str:
    return Owner(uid=item.owner_uid, namespace=item.owner_namespace, name=item.owner_name,
                 container_id=item.container_id).label()


# -- history and explain -------------------------------------------------------------------------


def _no_ledger(path: Path) -> int:
    return fail(f"no ledger at {path}",
                hint=f"the ledger is written by `nodegc clean --apply` and `nodegc agent`; give --state-dir DIR "
                     f"if they used another one (default {defaults.STATE_DIR})", code=EXIT_USAGE)


def cmd_history(settings: HistorySettings) -> int:
    path = settings.ledger_path
    if not path.exists():
        return _no_ledger(path)
    since = time.time() - settings.since_seconds if settings.since_seconds else None
    try:
        with open_ledger(path, lock=False) as ledger:
            node = ledger.recorded_node()
            rows = ledger.history(key=settings.item, kind=settings.kind, owner=settings.owner, since=since,
                                  limit=settings.limit)
    except LedgerError as e:
        return fail(f"{e}")
    if settings.output != "table":
        emit({"apiVersion": API_VERSION, "kind": "History", "ledger": str(path), "node": node, "items": [{
            "at": _ts(r.at), "item": r.key, "kind": r.kind, "from": r.from_phase, "to": r.to_phase,
            "reason": r.reason, "owner": r.owner} for r in rows]}, settings.output)
        return EXIT_CLEAN
    print(f"node {_node(node)}  ledger {path}")
    for r in rows:
        print(f"{_ts(r.at)}  {(r.from_phase or '-'):>11} -> {r.to_phase:<11}  {r.key}  {r.owner or ''}  {r.reason}")
    return EXIT_CLEAN


def cmd_explain(settings: ExplainSettings) -> int:
    wanted = settings.item
    path = settings.ledger_path
    if not path.exists():
        return _no_ledger(path)
    try:
        with open_ledger(path, lock=False) as ledger:
            matches = [i for k, i in ledger.items().items() if k == wanted or wanted in i.resource_id]
            if len(matches) != 1:
                what = "no item matches" if not matches else f"{len(matches)} items match"
                return fail(f"{what} {wanted!r}" + "".join(f"\n  {i.key}" for i in matches[:20]),
                            hint="`nodegc history` lists the items; give a full key (kind:id)" if not matches
                            else "give a longer part of the id, or the full key (kind:id)", code=EXIT_USAGE)
            item = matches[0]
            rows = ledger.history(key=item.key)
            node = ledger.recorded_node()
    except LedgerError as e:
        return fail(f"{e}")
    if settings.output != "table":
        emit({"apiVersion": API_VERSION, "kind": "Explanation", "item": item.key, "node": node,
              "resourceKind": item.kind.value,
              "resourceId": item.resource_id, "owner": {
                  "uid": item.owner_uid, "namespace": item.owner_namespace, "name": item.owner_name,
                  "container_id": item.container_id},
              "class": item.finding_class, "phase": item.phase.value, "why": _why(item),
              "firstSeen": _ts(item.first_seen), "lastSeen": _ts(item.last_seen), "scansOrphaned": item.orphan_count,
              "identity": dict(item.identity), "attempts": item.attempts, "lastError": item.last_error,
              "history": [{"at": _ts(r.at), "from": r.from_phase, "to": r.to_phase, "reason": r.reason}
                          for r in rows]}, settings.output)
        return EXIT_CLEAN
    print(f"item      {item.key}")
    print(f"node      {_node(node)}")
    print(f"owner     {_owner(item)}  uid {item.owner_uid or '?'}  container {item.container_id or '?'}")
    print(f"class     {item.finding_class}")
    print(f"phase     {item.phase.value}: {_why(item)}")
    print(f"seen      first {_ts(item.first_seen)}, last {_ts(item.last_seen)}, {item.orphan_count} scans orphaned")
    print(f"identity  {', '.join(f'{k}={v}' for k, v in item.identity)}")
    if item.attempts or item.last_error:
        print(f"attempts  {item.attempts}, last error: {item.last_error or '-'}")
    print("history")
    for r in rows:
        print(f"  {_ts(r.at)}  {(r.from_phase or '-'):>11} -> {r.to_phase:<11}  {r.reason}")
    return EXIT_CLEAN


def _node(node: str | None) -> str:
    """The node the ledger belongs to, as the readers print it (`Ledger.recorded_node`): a name may come from
    a snapshot file's nodeName, so what a terminal would take for a control sequence is shown escaped."""
    if node is None:
        return "- (none recorded yet)"
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in node)


def _why(item: Item) -> str:
    return {
        Phase.DETECTED: "seen orphaned; waiting for K consecutive scans and the grace period before marking",
        Phase.MARKED: "a reclaim candidate; re-verified against a fresh API read and the host before acting",
        Phase.TERMINATING: "re-verified; the reclaim step is running (or was interrupted and will be re-run)",
        Phase.CLEANED: "the reclaim step succeeded; the next rescan confirms the absence",
        Phase.CLOSED: "confirmed absent",
        Phase.FAILED: f"the reclaim step failed; retried after {_ts(item.next_attempt or 0)}",
        Phase.RELEASED: "no longer residue (in use, protected, unknown or a conflict): kept",
    }[item.phase]


def _ts(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")
