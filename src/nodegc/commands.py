"""`nodegc clean`, `agent`, `history` and `explain`: flags become engine settings and a ledger."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodegc.cli import (
    EXIT_BLOCKED,
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_RESIDUE,
    EXIT_SOURCE,
    EXIT_USAGE,
    roots_from_args,
    source_from_args,
)
from nodegc.engine.cycle import CycleReport, Engine, EngineSettings
from nodegc.ledger.store import Ledger, LedgerError, LedgerLocked
from nodegc.model.findings import Owner
from nodegc.model.items import Item, Phase
from nodegc.observe.logs import get_logger
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.guards import BlastRadius
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor, Executor, HostExecutor
from nodegc.settings import ScanOptions

log = get_logger("nodegc.commands")
LEDGER_FILE = "ledger.db"


def engine_settings(args: argparse.Namespace, phases: PhasePolicy) -> EngineSettings:
    return EngineSettings(
        phases=phases,
        correlation=CorrelationPolicy(min_age_seconds=args.min_age),
        blast_radius=BlastRadius(max_share=args.max_share, allow_empty_desired=args.allow_empty_desired),
        scan=ScanOptions(command_timeout=args.command_timeout, min_age_seconds=args.min_age),
        max_desired_age_seconds=args.max_desired_age,
        reclaims_per_minute=args.reclaims_per_minute,
    )


@contextmanager
def open_ledger(path: Path | str, *, lock: bool = True, retention_seconds: float | None = None) -> Iterator[Ledger]:
    ledger = Ledger(path, lock=lock, retention_seconds=retention_seconds)
    try:
        yield ledger
    finally:
        ledger.close()


# -- clean ---------------------------------------------------------------------------------------


def cmd_clean(args: argparse.Namespace) -> int:
    """One shot. Without --apply: an in-memory ledger and the dry-run executor, so nothing on the node
    or on disk changes. With --apply: the node's ledger (locked against a running agent)."""
    roots = roots_from_args(args)
    executor: Executor = HostExecutor(roots, timeout=args.command_timeout) if args.apply else DryRunExecutor()
    # One shot: no earlier scans to count, so K=1 and no grace; the minimum age still protects.
    settings = engine_settings(args, PhasePolicy(consecutive_scans=1, grace_seconds=0))
    where: Path | str = args.state_dir / LEDGER_FILE if args.apply else ":memory:"
    try:
        with open_ledger(where) as ledger:
            engine = Engine(roots=roots, source=source_from_args(args), ledger=ledger, executor=executor,
                            settings=settings)
            report = engine.cycle()
    except LedgerLocked as e:
        print(f"nodegc: {e}: is the agent running on this node?", file=sys.stderr)
        return EXIT_BLOCKED
    except LedgerError as e:
        print(f"nodegc: {e}", file=sys.stderr)
        return EXIT_ERROR
    doc = _clean_doc(report, applied=args.apply)
    if args.output == "json":
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(_clean_table(doc))
    if any(b.startswith("source_unavailable") for b in report.blocked):
        return EXIT_SOURCE
    if report.blocked:
        return EXIT_BLOCKED
    if not args.apply:
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


def cmd_history(args: argparse.Namespace) -> int:
    path = args.state_dir / LEDGER_FILE
    if not path.exists():
        print(f"nodegc: no ledger at {path}", file=sys.stderr)
        return EXIT_USAGE
    since = time.time() - args.since if args.since else None
    with open_ledger(path, lock=False) as ledger:
        rows = ledger.history(key=args.item, kind=args.kind, owner=args.owner, since=since, limit=args.limit)
    if args.output == "json":
        sys.stdout.write(json.dumps([{
            "at": _ts(r.at), "item": r.key, "kind": r.kind, "from": r.from_phase, "to": r.to_phase,
            "reason": r.reason, "owner": r.owner} for r in rows], indent=2) + "\n")
        return EXIT_CLEAN
    for r in rows:
        print(f"{_ts(r.at)}  {(r.from_phase or '-'):>11} -> {r.to_phase:<11}  {r.key}  {r.owner or ''}  {r.reason}")
    return EXIT_CLEAN


def cmd_explain(args: argparse.Namespace) -> int:
    path = args.state_dir / LEDGER_FILE
    if not path.exists():
        print(f"nodegc: no ledger at {path}", file=sys.stderr)
        return EXIT_USAGE
    with open_ledger(path, lock=False) as ledger:
        matches = [i for k, i in ledger.items().items() if k == args.item or args.item in i.resource_id]
        if len(matches) != 1:
            what = "no item matches" if not matches else f"{len(matches)} items match"
            print(f"nodegc: {what} {args.item!r}" + "".join(f"\n  {i.key}" for i in matches[:20]), file=sys.stderr)
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

