"""`nodegc scan`, `clean`, `history` and `explain`: typed settings in (from nodegc.wiring), a report out."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodegc.desired.source import SourceError
from nodegc.engine.cycle import CycleReport, Engine
from nodegc.exitcodes import EXIT_BLOCKED, EXIT_CLEAN, EXIT_ERROR, EXIT_RESIDUE, EXIT_SOURCE, EXIT_USAGE
from nodegc.ledger.store import LedgerError, LedgerLocked
from nodegc.model.findings import Owner
from nodegc.model.items import Item, Phase
from nodegc.observe.logs import get_logger
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.wiring import (
    ONE_SHOT_PHASES,
    CleanSettings,
    ExplainSettings,
    HistorySettings,
    ScanSettings,
    make_engine_settings,
    make_executor,
    make_source,
    open_ledger,
)

log = get_logger("nodegc.commands")


# -- scan ----------------------------------------------------------------------------------------


def cmd_scan(settings: ScanSettings) -> int:
    from nodegc.engine.detecting import detect
    from nodegc.inventory.scanning import scan_node
    from nodegc.planning.ipranges import range_usage
    from nodegc.render import Report, render_json, render_table, render_yaml

    source = make_source(settings.source, prove_current=False)  # read only: no destructive step follows
    try:
        desired = source.fetch()
    except SourceError as e:
        log.error("desired state unavailable", source=source.name, error=str(e))
        print(f"nodegc: cannot read the pods bound to this node: {e}", file=sys.stderr)
        return EXIT_SOURCE
    inventory, findings = detect(scan_node(settings.roots, settings.options), desired, now=datetime.now(UTC),
                                 policy=CorrelationPolicy(min_age_seconds=settings.options.min_age_seconds))
    report = Report(node=desired.node, source=desired.source, taken_at=inventory.taken_at,
                    findings=findings, problems=inventory.problems, ranges=range_usage(inventory, findings),
                    range_problems=inventory.ip_range_problems, runtime=inventory.runtime)
    for p in inventory.problems:
        log.warning("read problem", kind=p.kind.value, path=p.path, reason=p.reason)
    log.info("scan done", node=desired.node, findings=len(findings), residue=len(report.residue),
             conflicts=len(report.conflicts), problems=len(inventory.problems))
    out = {"json": render_json, "yaml": render_yaml}.get(settings.output)
    sys.stdout.write(out(report) if out else render_table(report, show_all=settings.show_all))
    return EXIT_RESIDUE if report.residue or report.conflicts else EXIT_CLEAN


# -- clean ---------------------------------------------------------------------------------------


def cmd_clean(settings: CleanSettings) -> int:
    """One shot. Without --apply: an in-memory ledger and the dry-run executor, so nothing on the node
    or on disk changes. With --apply: the node's ledger (locked against a running agent)."""
    executor = make_executor(settings.roots, dry_run=not settings.apply, timeout=settings.safety.command_timeout,
                             runtime_endpoint=settings.safety.runtime_endpoint,
                             runtime_timeout=settings.safety.runtime_timeout)
    engine_settings = make_engine_settings(settings.safety, ONE_SHOT_PHASES)
    where: Path | str = settings.safety.ledger_path if settings.apply else ":memory:"
    try:
        with open_ledger(where) as ledger:
            engine = Engine(roots=settings.roots, source=make_source(settings.source), ledger=ledger,
                            executor=executor, settings=engine_settings)
            report = engine.cycle()
    except LedgerLocked as e:
        print(f"nodegc: {e}: is the agent running on this node?", file=sys.stderr)
        return EXIT_BLOCKED
    except LedgerError as e:
        print(f"nodegc: {e}", file=sys.stderr)
        return EXIT_ERROR
    doc = _clean_doc(report, applied=settings.apply)
    if settings.output == "json":
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(_clean_table(doc))
    if any(b.startswith("source_unavailable") for b in report.blocked):
        return EXIT_SOURCE
    if report.blocked:
        return EXIT_BLOCKED
    if not settings.apply:
        return EXIT_RESIDUE if doc["plan"] else EXIT_CLEAN
    failed = [o for o in doc["results"] if not o["ok"]]
    return EXIT_RESIDUE if failed else EXIT_CLEAN


def _clean_doc(report: CycleReport, *, applied: bool) -> dict[str, Any]:
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
        "applied": applied,
        "blocked": report.blocked,
        "plan": plan,
        "results": results,
        "sent_back": [{"item": i.key, "reason": why} for i, why in report.sent_back],
        "confirmed_closed": [i.key for i in report.closed],
        "residue_found": sum(1 for f in report.findings if f.cls.is_residue),
        "problems": report.problems,
    }


def _clean_table(doc: dict[str, Any]) -> str:
    lines: list[str] = []
    for reason in doc["blocked"]:
        lines.append(f"BLOCKED {reason}")
    if not doc["applied"]:
        for step in doc["plan"]:
            lines.append(f"{step['owner']:<40} {step['action']}")
        lines.append(f"{len(doc['plan'])} reclaim steps planned; nothing was changed (add --apply to reclaim)")
    else:
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


def cmd_history(settings: HistorySettings) -> int:
    path = settings.ledger_path
    if not path.exists():
        print(f"nodegc: no ledger at {path}", file=sys.stderr)
        return EXIT_USAGE
    since = time.time() - settings.since_seconds if settings.since_seconds else None
    with open_ledger(path, lock=False) as ledger:
        rows = ledger.history(key=settings.item, kind=settings.kind, owner=settings.owner, since=since,
                              limit=settings.limit)
    if settings.output == "json":
        sys.stdout.write(json.dumps([{
            "at": _ts(r.at), "item": r.key, "kind": r.kind, "from": r.from_phase, "to": r.to_phase,
            "reason": r.reason, "owner": r.owner} for r in rows], indent=2) + "\n")
        return EXIT_CLEAN
    for r in rows:
        print(f"{_ts(r.at)}  {(r.from_phase or '-'):>11} -> {r.to_phase:<11}  {r.key}  {r.owner or ''}  {r.reason}")
    return EXIT_CLEAN


def cmd_explain(settings: ExplainSettings) -> int:
    wanted = settings.item
    path = settings.ledger_path
    if not path.exists():
        print(f"nodegc: no ledger at {path}", file=sys.stderr)
        return EXIT_USAGE
    with open_ledger(path, lock=False) as ledger:
        matches = [i for k, i in ledger.items().items() if k == wanted or wanted in i.resource_id]
        if len(matches) != 1:
            what = "no item matches" if not matches else f"{len(matches)} items match"
            print(f"nodegc: {what} {wanted!r}" + "".join(f"\n  {i.key}" for i in matches[:20]), file=sys.stderr)
            return EXIT_USAGE
        item = matches[0]
        rows = ledger.history(key=item.key)
    print(f"item      {item.key}")
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

