"""Findings as a table for people and as JSON/YAML documents for machines."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

import yaml

from nodegc.model.findings import Finding, FindingClass
from nodegc.model.ipranges import RangeUsage
from nodegc.model.resources import ReadProblem
from nodegc.model.runtime import RuntimeView


class OwnerDoc(TypedDict):
    uid: str | None
    namespace: str | None
    name: str | None
    container_id: str | None


# The wire form of one finding; "class" is a keyword, hence the functional TypedDict form.
FindingWire = TypedDict(
    "FindingWire",
    {
        "class": str,
        "kind": str,
        "id": str,
        "owner": OwnerDoc,
        "owner_state": str,
        "evidence": list[str],
        "netns": str | None,
        "ip": str | None,
        "residue": bool,
    },
)


@dataclass(frozen=True)
class Report:
    node: str
    source: str
    taken_at: datetime
    findings: Sequence[Finding]
    problems: Sequence[ReadProblem]
    unseen: Sequence[str] = ()
    """Why the scan cannot see the node (a missing root, no pod directory while pods run): not a clean node."""
    ranges: Sequence[RangeUsage] = ()
    range_problems: Sequence[str] = ()
    runtime: RuntimeView | None = None
    warnings: Sequence[str] = ()
    """What the desired state could not vouch for (stale, dated by its content, ...): the report still stands."""

    @property
    def residue(self) -> list[Finding]:
        return [f for f in self.findings if f.cls.is_residue]

    @property
    def conflicts(self) -> list[Finding]:
        return [f for f in self.findings if f.cls is FindingClass.CONFLICT]


def finding_doc(f: Finding) -> FindingWire:
    return {
        "class": f.cls.value,
        "kind": f.kind.value,
        "id": f.id,
        "owner": {
            "uid": f.owner.uid,
            "namespace": f.owner.namespace,
            "name": f.owner.name,
            "container_id": f.owner.container_id,
        },
        "owner_state": f.owner_state.value,
        "evidence": list(f.evidence),
        "netns": f.netns,
        "ip": f.ip,
        "residue": f.cls.is_residue,
    }


def report_doc(report: Report) -> dict[str, Any]:
    return {
        "apiVersion": "nodegc.io/v1alpha1",
        "kind": "ScanReport",
        "node": report.node,
        "source": report.source,
        "takenAt": report.taken_at.isoformat(),
        "summary": summary(report),
        "runtime": runtime_doc(report.runtime),
        "findings": [finding_doc(f) for f in report.findings],
        "problems": [{"kind": p.kind.value, "path": p.path, "reason": p.reason} for p in report.problems],
        "unseen": list(report.unseen),
        "warnings": list(report.warnings),
        "ipRanges": [range_doc(u) for u in report.ranges],
        "ipRangeProblems": list(report.range_problems),
    }


def runtime_doc(view: RuntimeView | None) -> dict[str, Any] | None:
    """Which runtime answered (name, version, API version), or why it did not; None: none was read."""
    if view is None:
        return None
    return {
        "endpoint": view.endpoint,
        "reachable": view.reachable,
        "name": view.runtime_name,
        "version": view.runtime_version,
        "apiVersion": view.api_version,
        "sandboxes": len(view.sandboxes),
        "ready": sum(1 for sb in view.sandboxes if sb.ready),
        "containers": len(view.containers),
        "error": view.error,
    }


def runtime_line(view: RuntimeView | None) -> str:
    if view is None:
        return "runtime  none read (the API alone decides)"
    if not view.reachable:
        return f"runtime  {view.endpoint} unreachable: nothing that needs its word is acted on ({view.error})"
    ready = sum(1 for sb in view.sandboxes if sb.ready)
    return (f"runtime  {view.runtime_name} {view.runtime_version} (CRI {view.api_version})"
            f"  sandboxes {len(view.sandboxes)} ({ready} ready)  containers {len(view.containers)}")


def range_doc(u: RangeUsage) -> dict[str, Any]:
    return {"network": u.network, "range": u.range, "capacity": u.capacity, "reserved": u.reserved,
            "live": u.live, "leaked": u.leaked, "held": u.held - u.live,
            "free": None if u.capacity is None else max(u.capacity - u.reserved, 0)}


def render_ranges(ranges: Sequence[RangeUsage]) -> list[str]:
    """One line per host-local range set: capacity, reserved (live, leaked, other), free."""
    if not ranges:
        return []
    header = ("NETWORK", "RANGE", "CAPACITY", "RESERVED", "LIVE", "LEAKED", "OTHER", "FREE", "USED")
    rows = [header]
    for u in ranges:
        cap = "?" if u.capacity is None else str(u.capacity)
        free = "?" if u.capacity is None else str(max(u.capacity - u.reserved, 0))
        used = "?" if not u.capacity else f"{u.reserved / u.capacity:.1%}"
        rows.append((u.network, u.range, cap, str(u.reserved), str(u.live), str(u.leaked),
                     str(u.held - u.live), free, used))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def summary(report: Report) -> dict[str, Any]:
    by_class = Counter(f.cls.value for f in report.findings)
    return {
        "findings": len(report.findings),
        "residue": len(report.residue),
        "conflicts": len(report.conflicts),
        "problems": len(report.problems),
        "byClass": dict(sorted(by_class.items())),
    }


def render_json(report: Report) -> str:
    return json.dumps(report_doc(report), indent=2, ensure_ascii=False) + "\n"


def render_yaml(report: Report) -> str:
    return yaml.safe_dump(report_doc(report), sort_keys=False, allow_unicode=True)


_ORDER = {cls: i for i, cls in enumerate(FindingClass)}


def render_table(report: Report, *, show_all: bool = False) -> str:
    """Grouped by owner so one dead pod's leftovers read as one block; in-use items only on request."""
    shown = [f for f in report.findings if show_all or f.cls is not FindingClass.IN_USE]
    groups: dict[str, list[Finding]] = defaultdict(list)
    for f in shown:
        groups[f.group_key].append(f)
    rows: list[tuple[str, str, str, str, str]] = []
    for key in sorted(groups, key=lambda k: (_group_rank(groups[k]), groups[k][0].owner.label(), k)):
        items = sorted(groups[key], key=lambda f: (_ORDER[f.cls], f.kind.value, f.id))
        first = items[0]
        owner = first.owner.label()
        if first.owner.uid and first.owner.name:
            owner += f" ({first.owner.uid[:8]})"
        for i, f in enumerate(items):
            rows.append((owner if i == 0 else "", first.owner_state.value if i == 0 else "",
                         f.cls.value, f.kind.value, f.id))
    lines = [f"node {report.node}  source {report.source}  at {report.taken_at.isoformat(timespec='seconds')}",
             runtime_line(report.runtime)]
    lines += [f"WARNING  {text}" for text in report.warnings]
    if rows:
        header = ("OWNER", "STATE", "CLASS", "KIND", "RESOURCE")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
        for row in [header, *rows]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4])
    s = summary(report)
    in_use = s["byClass"].get("in_use", 0)
    lines.append(
        f"{s['residue']} residue, {s['conflicts']} conflicts, {s['byClass'].get('unknown', 0)} unknown, "
        f"{s['byClass'].get('protected', 0)} protected, {in_use} in use"
        + ("" if show_all or not in_use else " (shown with --all)")
    )
    for p in report.problems:
        lines.append(f"problem: {p.kind.value} {p.path}: {p.reason}")
    for reason in report.unseen:
        lines.append(f"UNSEEN  {reason}")
    if report.ranges:
        lines.append("")
        lines += render_ranges(report.ranges)
    for text in report.range_problems:
        lines.append(f"range problem: {text}")
    return "\n".join(lines) + "\n"


def _group_rank(items: list[Finding]) -> int:
    """Conflicts first, then residue, then what is only reported."""
    if any(f.cls is FindingClass.CONFLICT for f in items):
        return -1
    residue = [_ORDER[f.cls] for f in items if f.cls.is_residue]
    return min(residue) if residue else 100
