"""The Grafana dashboard and the Prometheus alerts of nodegc, generated from one definition.

    python scripts/monitoring.py            # write every file below
    python scripts/monitoring.py --check    # exit 1 when a file differs from what this script writes

Writes:
- deploy/monitoring/dashboards/nodegc.json        the dashboard (Grafana JSON model)
- deploy/monitoring/rules/nodegc.rules.yaml       the alerts as a plain Prometheus rules file
- deploy/monitoring/prometheusrule.yaml           the same groups as a PrometheusRule (kustomize)
- deploy/chart/nodegc/files/                      copies the chart templates read (.Files.Get)

Every query and alert is defined here once; tests/deploy checks the files are current, promtool checks
and unit-tests the rules, and tests/host evaluates every query and alert expression against a real
Prometheus scraping a real agent and controller.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
MONITORING = REPO / "deploy" / "monitoring"
CHART_FILES = REPO / "deploy" / "chart" / "nodegc" / "files"
DASHBOARD_FILE = MONITORING / "dashboards" / "nodegc.json"
RULES_FILE = MONITORING / "rules" / "nodegc.rules.yaml"
PROMETHEUS_RULE_FILE = MONITORING / "prometheusrule.yaml"
RUNBOOK = "https://github.com/nodegc/nodegc/blob/main/docs/runbook.md"

AGENT_JOB = "nodegc-agent-metrics"
CONTROLLER_JOB = "nodegc-controller-metrics"
"""Job names as the ServiceMonitors produce them (the Service names); the chart rewrites the prefix."""
AGENT = 'cluster=~"$cluster", node=~"$node"'
CLUSTER = 'cluster=~"$cluster"'


# -- dashboard ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    targets: tuple[Target, ...]
    unit: str = "short"
    kind: str = "timeseries"
    width: int = 12
    stack: bool = False


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    ("Residue", (
        Panel("Residue by node and kind",
              "Active ledger items (detected, marked, terminating, cleaned, failed) per node and kind: residue "
              "nodegc has found and not yet confirmed gone. A line that keeps rising is residue nodegc cannot "
              "reclaim; see the blocked and failed panels.",
              (Target(f"sum by (node, kind) (nodegc_items{{{AGENT}}})", "{{node}} {{kind}}"),), stack=True),
        Panel("Phases over time",
              "The same items by phase. Items pile up in detected during the grace period, in failed when a "
              "reclaim step keeps failing, in marked when terminate is refused.",
              (Target(f"sum by (phase) (nodegc_items{{{AGENT}}})", "{{phase}}"),), stack=True),
        Panel("Reclaims by result",
              "Reclaim steps per second by result: ok and gone are success, changed means the resource was "
              "replaced between the check and the step (kept), failed is retried with backoff.",
              (Target(f"sum by (result) (rate(nodegc_reclaims_total{{{AGENT}}}[$__rate_interval]))",
                      "{{result}}"),), unit="ops"),
        Panel("Actions blocked by reason",
              "Cycles whose destructive steps were refused, by reason. stale_source, source_unavailable and "
              "blast_radius stop every reclaim on the node; view_not_current (the pod watch not proven current "
              "against the node Lease) stops that cycle's marking and reclaiming: now and then it is routine, on "
              "most cycles a lagging watch cache; runtime_unavailable holds back what needs the container "
              "runtime; rate_limit and reverification are routine.",
              (Target(f"sum by (node, reason) (increase(nodegc_actions_blocked_total{{{AGENT}}}"
                      "[$__rate_interval]))", "{{node}} {{reason}}"),)),
        Panel("Streaks restarted and items marked",
              "Detected items whose scans in a row went back to 0 because a cycle could not act on its desired "
              "state (view_not_current: the pod watch not proven current; stale_source, source_unavailable: the "
              "desired state too old, from the future or unreadable), by node and reason, and the items marked "
              "for reclaim. Restarts without marks, hour after hour: refusals come at least once every K cycles "
              "and no streak completes.",
              (Target(f"sum by (node, reason) (increase(nodegc_streaks_restarted_total{{{AGENT}}}"
                      "[$__rate_interval]))", "{{node}} restarted ({{reason}})"),
               Target(f"sum by (node) (increase(nodegc_items_marked_total{{{AGENT}}}[$__rate_interval]))",
                      "{{node}} marked"))),
        Panel("Protected resources",
              "Resources kept because they are younger than the minimum age or may belong to a pod still "
              "starting (the creation race). Not a refusal.",
              (Target(f"sum by (node, kind) (nodegc_protected_resources{{{AGENT}}})", "{{node}} {{kind}}"),)),
        Panel("Read problems by cause",
              "What the last scan could not read, by node, kind and cause; what each hides is kept unjudged. "
              "dump_bound: a network namespace filled past the netlink dump bound (kept unread); untold_process:"
              " a process whose command line could not be read in time (its memory map held locked), so no "
              "runtime leftover is judged. A pod can hold either on purpose: the agent's log names the "
              "namespace or the pid (`read problem`, with its cause).",
              (Target(f"sum by (node, kind, cause) (nodegc_scan_read_problems{{{AGENT}}})",
                      "{{node}} {{kind}} {{cause}}"),)),
    )),
    ("Agent health", (
        Panel("Scan duration (p95)",
              "95th percentile of one scan (inventory and correlation). It grows with the pods and residue on "
              "the node; seconds mean the node's kernel objects are slow to read.",
              (Target("histogram_quantile(0.95, sum by (node, le) (rate(nodegc_scan_duration_seconds_bucket"
                      f"{{{AGENT}}}[$__rate_interval])))", "{{node}}"),), unit="s"),
        Panel("Desired-state age",
              "Age of the pod list the last cycle acted on. Above --max-desired-age (120 s by default) the "
              "agent refuses to reclaim (stale_source).",
              (Target(f"max by (node) (nodegc_desired_state_age_seconds{{{AGENT}}})", "{{node}}"),), unit="s"),
        Panel("Since the last successful cycle",
              "Seconds since the last cycle that was not refused and had no ledger error.",
              (Target(f"time() - max by (node) (nodegc_last_successful_cycle_timestamp_seconds{{{AGENT}}})",
                      "{{node}}"),), unit="s"),
        Panel("Agents ready",
              "Agents whose /readyz answers ok, out of the agents scraped.",
              (Target(f"sum(nodegc_ready{{{AGENT}}})", "ready"),
               Target(f'count(up{{job="{AGENT_JOB}", {AGENT}}})', "scraped")), kind="stat", width=6),
        Panel("Pod watch",
              "The agent's pod watch: relists by cause, watch events, and its proofs of currency (taken by cycles "
              "with something to act on: proven, or refused as view_not_current) per second. Relists on gone or "
              "error at a steady rate point at the API server or the network; refused proofs and no proven ones "
              "at a watch cache that lags the node Lease.",
              (Target(f"sum by (reason) (rate(nodegc_reflector_relists_total{{{AGENT}}}[$__rate_interval]))",
                      "relist {{reason}}"),
               Target(f"sum by (type) (rate(nodegc_reflector_events_total{{{AGENT}}}[$__rate_interval]))",
                      "event {{type}}"),
               Target(f"sum by (result) (rate(nodegc_reflector_proofs_total{{{AGENT}}}[$__rate_interval]))",
                      "proof {{result}}")), unit="ops", width=18),
        Panel("Pod directory watches",
              "Agents whose last scan watched the pod directories with inotify, out of those exporting it, and the "
              "fallbacks to walking every directory in the last hour. Fewer watched than agents: "
              "--no-watch-pod-dirs, or a fallback (watch_limit: fs.inotify.max_user_watches hit, walks for an hour).",
              (Target(f"sum(nodegc_pod_dir_watch_active{{{AGENT}}})", "watched"),
               Target(f"count(nodegc_pod_dir_watch_active{{{AGENT}}})", "agents"),
               Target(f"sum(increase(nodegc_pod_dir_watch_fallbacks_total{{{AGENT}}}[1h]))", "fallbacks (1h)")),
              kind="stat", width=6),
    )),
    ("Pod IP ranges", (
        Panel("IP ranges used / leaked / capacity",
              "Per host-local range set: reserved addresses, those leaked (their pod is gone), and the "
              "capacity (the addresses host-local can hand out, the gateway excluded).",
              (Target(f"sum by (node, network, range) (nodegc_ip_range_reserved{{{AGENT}}})",
                      "{{node}} {{range}} reserved"),
               Target(f"sum by (node, network, range) (nodegc_ip_range_leaked{{{AGENT}}})",
                      "{{node}} {{range}} leaked"),
               Target(f"sum by (node, network, range) (nodegc_ip_range_capacity{{{AGENT}}})",
                      "{{node}} {{range}} capacity"))),
        Panel("Time to exhaustion",
              "Forecast time until the range set is full, from the net leak rate over the last hour and the "
              "peak of addresses in use (docs/monitoring.md). Shown capped at 7 days; no growth is 'never'.",
              (Target(f"clamp_max(min by (node, network, range) (nodegc_ip_range_exhaustion_seconds{{{AGENT}}}),"
                      " 604800)", "{{node}} {{range}}"),), unit="s"),
        Panel("Leak and allocation rates",
              "Addresses leaked (net) and allocated per hour, over the forecast window.",
              (Target(f"3600 * sum by (node, range) (nodegc_ip_range_leak_rate{{{AGENT}}})",
                      "{{node}} {{range}} leaked/h"),
               Target(f"3600 * sum by (node, range) (nodegc_ip_range_allocation_rate{{{AGENT}}})",
                      "{{node}} {{range}} allocated/h"))),
    )),
    ("Controller", (
        Panel("Controller leader",
              "Replicas of nodegc controller holding the Lease: exactly 1 is right; 0 means no stale "
              "endpoint is removed anywhere.",
              (Target(f'sum(nodegc_controller_leader{{job="{CONTROLLER_JOB}", {CLUSTER}}})', "leaders"),),
              kind="stat", width=6),
        Panel("Stale endpoints",
              "Stale EndpointSlice endpoints found per second, by reason and action (report: the slice's "
              "manager owns it; remove: nodegc removed it).",
              (Target(f"sum by (reason, action) (rate(nodegc_stale_endpoints_total{{{CLUSTER}}}"
                      "[$__rate_interval]))", "{{reason}} {{action}}"),), unit="ops", width=9),
        Panel("Endpoint removals",
              "Stale endpoints by outcome (removed, dry_run, kept, failed).",
              (Target(f"sum by (result) (rate(nodegc_endpoint_removals_total{{{CLUSTER}}}[$__rate_interval]))",
                      "{{result}}"),), unit="ops", width=9),
    )),
)


def _variables() -> list[dict[str, Any]]:
    def query(name: str, label: str, expr: str) -> dict[str, Any]:
        return {"name": name, "label": label, "type": "query",
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "query": {"query": expr, "refId": f"{name}-values"}, "definition": expr, "refresh": 2,
                "includeAll": True, "multi": True, "allValue": ".*", "sort": 1,
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]}}

    return [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "refresh": 1, "current": {}},
        query("cluster", "Cluster", "label_values(nodegc_build_info, cluster)"),
        query("node", "Node", 'label_values(nodegc_build_info{cluster=~"$cluster"}, node)'),
    ]


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    pid = 1
    for row_title, row in ROWS:
        panels.append({"type": "row", "title": row_title, "id": pid, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        pid += 1
        y += 1
        x = 0
        for p in row:
            if x + p.width > 24:
                x, y = 0, y + 8
            panels.append(_panel(p, pid, x, y))
            pid += 1
            x += p.width
        y += 8
    return {
        "title": "nodegc",
        "uid": "nodegc-overview",
        "description": "Node residue, reclaim, IP range exhaustion and the EndpointSlice controller "
                       "(generated by scripts/monitoring.py; docs/monitoring.md explains every panel).",
        "tags": ["nodegc", "kubernetes"],
        "editable": False,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "timezone": "browser",
        "templating": {"list": _variables()},
        "annotations": {"list": []},
        "panels": panels,
    }


def _panel(p: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    ds = {"type": "prometheus", "uid": "${datasource}"}
    targets = [{"refId": chr(ord("A") + i), "datasource": ds, "expr": t.expr, "legendFormat": t.legend,
                "range": p.kind == "timeseries", "instant": p.kind != "timeseries"}
               for i, t in enumerate(p.targets)]
    custom: dict[str, Any] = {}
    if p.kind == "timeseries":
        custom = {"drawStyle": "line", "fillOpacity": 10 if p.stack else 0,
                  "stacking": {"mode": "normal" if p.stack else "none", "group": "A"}}
    return {"id": pid, "type": p.kind, "title": p.title, "description": p.description, "datasource": ds,
            "gridPos": {"h": 8, "w": p.width, "x": x, "y": y}, "targets": targets,
            "fieldConfig": {"defaults": {"unit": p.unit, "custom": custom}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}} if p.kind == "timeseries" else
                       {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "value", "graphMode": "none"}}


def dashboard_queries() -> list[str]:
    return [t.expr for _, row in ROWS for p in row for t in p.targets]


# -- alerts ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alert:
    name: str
    signal: str
    """The measured quantity; the alert fires when `signal op threshold` holds for `for_`."""
    op: str
    threshold: str
    for_: str
    severity: str
    summary: str
    description: str
    group: str = "nodegc-agent"
    labels: dict[str, str] = field(default_factory=dict)
    unless: str = ""
    """A second measured quantity, by (cluster, node): where it is above 0, the alert does not fire."""

    @property
    def expr(self) -> str:
        expr = f"{self.signal} {self.op} {self.threshold}" if self.op else self.signal
        return f"{expr} unless on (cluster, node) {self.unless} > 0" if self.unless else expr

    @property
    def anchor(self) -> str:
        return self.name.lower()


AGENT_SEL = f'job="{AGENT_JOB}"'
CONTROLLER_SEL = f'job="{CONTROLLER_JOB}"'

ALERTS: tuple[Alert, ...] = (
    Alert("NodegcResidueGrowing",
          f"min_over_time(sum by (cluster, node) (nodegc_items{{{AGENT_SEL}}})[1h:5m])"
          f" - min_over_time(sum by (cluster, node) (nodegc_items{{{AGENT_SEL}}} offset 1h)[1h:5m])",
          ">", "0", "2h", "warning",
          "Residue keeps growing on node {{ $labels.node }}",
          "The residue nodegc tracks on {{ $labels.node }} has grown for more than 2 hours without going "
          "back down (+{{ $value | printf \"%.0f\" }} items, low to low, over the last hour): nodegc finds "
          "residue faster than it can reclaim it, or cannot reclaim it at all."),
    Alert("NodegcReclaimFailing",
          f'sum by (cluster, node, kind) (increase(nodegc_reclaims_total{{{AGENT_SEL}, result="failed"}}[30m]))',
          ">=", "3", "15m", "warning",
          "Reclaim of {{ $labels.kind }} keeps failing on node {{ $labels.node }}",
          "{{ $value | printf \"%.0f\" }} reclaim steps of kind {{ $labels.kind }} failed on {{ $labels.node }} "
          "in the last 30 minutes. Failed items are retried with backoff and stay on the node meanwhile."),
    Alert("NodegcReclaimBlockedStaleSource",
          f'sum by (cluster, node) (increase(nodegc_actions_blocked_total{{{AGENT_SEL}, '
          f'reason=~"stale_source|source_unavailable"}}[10m]))',
          ">", "0", "30m", "warning",
          "nodegc on {{ $labels.node }} refuses to reclaim: its pod list is stale or unavailable",
          "For 30 minutes every cycle on {{ $labels.node }} was refused because the desired state (the "
          "node's pods from the API) was older than --max-desired-age or could not be read. Nothing is "
          "reclaimed on that node until the pod watch recovers."),
    Alert("NodegcReclaimBlockedBlastRadius",
          f'sum by (cluster, node) (increase(nodegc_actions_blocked_total{{{AGENT_SEL}, '
          f'reason="blast_radius"}}[10m]))',
          ">", "0", "30m", "warning",
          "nodegc on {{ $labels.node }} refuses to reclaim: the blast-radius guard tripped",
          "For 30 minutes the blast-radius guard refused every reclaim on {{ $labels.node }}: too many of "
          "the node's owners look orphaned, or the pod list is empty or names no pod found on the node."),
    Alert("NodegcWatchNotCurrent",
          f'sum by (cluster, node) (increase(nodegc_reflector_proofs_total{{{AGENT_SEL}, result="refused"}}[10m]))',
          ">", "0", "15m", "warning",
          "nodegc on {{ $labels.node }} cannot prove its pod watch current: residue waits",
          "For 15 minutes the pod watch of the agent on {{ $labels.node }} has not been proven current against "
          "the node Lease while residue was waiting ({{ $value | printf \"%.0f\" }} proofs refused in the last "
          "10 minutes, none succeeded): nothing is marked nor reclaimed on that node (view_not_current).",
          unless=f'sum by (cluster, node) (increase(nodegc_reflector_proofs_total{{{AGENT_SEL}, '
                 f'result="proven"}}[10m]))'),
    Alert("NodegcWatchReplaying",
          f'sum by (cluster, node) (increase(nodegc_reflector_relists_total{{{AGENT_SEL}, reason="replayed"}}[15m]))',
          ">", "0", "30m", "warning",
          "nodegc on {{ $labels.node }}: its pod watch keeps replaying history",
          "For 30 minutes the pod watch of the agent on {{ $labels.node }} has sent events at or behind the "
          "resourceVersion its view already holds ({{ $value | printf \"%.0f\" }} in the last 15 minutes): a "
          "lagging watch cache or a proxy replaying history. None is applied; each makes the agent list the "
          "node's pods again, with backoff, so the watch never settles and the API server serves a list instead."),
    Alert("NodegcMarkingStarved",
          f'sum by (cluster, node) (increase(nodegc_streaks_restarted_total{{{AGENT_SEL}}}[1h]))',
          ">", "0", "1h", "warning",
          "nodegc on {{ $labels.node }} marks nothing: refusals keep restarting its residue's scans in a row",
          "For an hour, cycles on {{ $labels.node }} that could not act on their desired state (a refused proof "
          "of the pod watch, a stale or unreadable pod list) restarted the scans in a row of its detected residue "
          "({{ $value | printf \"%.0f\" }} restarts in the last hour) and no item was marked: a refusal comes at "
          "least once every K cycles, so no streak completes and nothing is reclaimed, though other cycles act.",
          unless=f'sum by (cluster, node) (increase(nodegc_items_marked_total{{{AGENT_SEL}}}[1h]))'),
    Alert("NodegcAgentDown",
          f"up{{{AGENT_SEL}}}", "==", "0", "10m", "warning",
          "nodegc agent on {{ $labels.node }} cannot be scraped",
          "Prometheus has not scraped the nodegc agent on {{ $labels.node }} ({{ $labels.instance }}) for 10 "
          "minutes: the agent is down, crash-looping or unreachable. Residue on that node is not collected."),
    Alert("NodegcAgentNotReady",
          f"nodegc_ready{{{AGENT_SEL}}}", "==", "0", "15m", "warning",
          "nodegc agent on {{ $labels.node }} is not ready",
          "The agent on {{ $labels.node }} has answered /readyz with an error for 15 minutes: its last cycle "
          "is too old, hit a ledger error, or was refused for a stale or unavailable desired state."),
    Alert("NodegcPodIPRangeExhaustion",
          f"min by (cluster, node, network, range) (nodegc_ip_range_exhaustion_seconds{{{AGENT_SEL}}})",
          "<", "4 * 3600", "15m", "critical",
          "Pod IP range {{ $labels.range }} on {{ $labels.node }} runs out within hours",
          "nodegc forecasts that host-local range {{ $labels.range }} ({{ $labels.network }}) on "
          "{{ $labels.node }} is full in {{ $value | humanizeDuration }}: leaked addresses keep growing. New "
          "pods on the node will fail with \"no IP addresses available in range set\"."),
    Alert("NodegcControllerNoLeader",
          f"max by (cluster) (nodegc_controller_leader{{{CONTROLLER_SEL}}})", "<", "1", "10m", "warning",
          "No nodegc controller replica holds the Lease",
          "For 10 minutes no replica of nodegc controller has held the Lease nodegc-controller: stale "
          "EndpointSlice endpoints are neither reported nor removed.", group="nodegc-controller"),
    Alert("NodegcControllerAbsent",
          f"absent(nodegc_controller_leader{{{CONTROLLER_SEL}}})", "", "", "10m", "warning",
          "No nodegc controller is scraped",
          "Prometheus has no nodegc_controller_leader series: no controller replica runs or none is "
          "scraped, so nobody can hold the Lease.", group="nodegc-controller"),
)


def rule_groups(agent_job: str = AGENT_JOB, controller_job: str = CONTROLLER_JOB) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for a in ALERTS:
        expr = a.expr.replace(AGENT_JOB, agent_job).replace(CONTROLLER_JOB, controller_job)
        groups.setdefault(a.group, []).append({
            "alert": a.name, "expr": expr, "for": a.for_,
            "labels": {"severity": a.severity, **a.labels},
            "annotations": {"summary": a.summary, "description": a.description,
                            "runbook_url": f"{RUNBOOK}#{a.anchor}"},
        })
    return {"groups": [{"name": name, "rules": rules} for name, rules in groups.items()]}


def prometheus_rule() -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "nodegc", "namespace": "nodegc-system",
                     "labels": {"app.kubernetes.io/name": "nodegc", "app.kubernetes.io/component": "monitoring"}},
        "spec": rule_groups(),
    }


# -- files -------------------------------------------------------------------------------------------

HEADER = "# Generated by scripts/monitoring.py; edit that script, not this file.\n"


def _yaml(doc: Any) -> str:
    return HEADER + yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True)


def outputs() -> dict[Path, str]:
    dash = json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"
    rules = _yaml(rule_groups())
    return {
        DASHBOARD_FILE: dash,
        RULES_FILE: rules,
        PROMETHEUS_RULE_FILE: _yaml(prometheus_rule()),
        CHART_FILES / "dashboards" / "nodegc.json": dash,
        CHART_FILES / "rules" / "nodegc.rules.yaml": rules,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a file is not what this script writes")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for path in stale:
        print(f"{path.relative_to(REPO)} is out of date: run python scripts/monitoring.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
