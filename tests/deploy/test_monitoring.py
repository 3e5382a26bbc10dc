"""The dashboard and the alerts: generated files current, promtool checks and unit tests, the same objects
in the chart and in deploy/monitoring/, and a runbook section for every alert."""

from __future__ import annotations

import json
import os
import re
import runpy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import CHART, DEPLOY, REPO, missing, run

MONITORING = DEPLOY / "monitoring"
RULES = MONITORING / "rules" / "nodegc.rules.yaml"
RULE_TESTS = MONITORING / "rules" / "nodegc.rules.test.yaml"
DASHBOARD = MONITORING / "dashboards" / "nodegc.json"
RUNBOOK = REPO / "docs" / "runbook.md"
GEN: dict[str, Any] = runpy.run_path(str(REPO / "scripts" / "monitoring.py"))


@pytest.fixture(scope="session")
def promtool() -> str:
    path = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if path is None:
        missing("promtool not found (Debian package prometheus; make deps installs it)")
    assert path is not None
    return path


def test_generated_files_are_current() -> None:
    assert GEN["main"](["--check"]) == 0, "run: python scripts/monitoring.py"


def test_promtool_checks_the_rules(promtool: str) -> None:
    out = run([promtool, "check", "rules", str(RULES)])
    assert f"SUCCESS: {len(GEN['ALERTS'])} rules found" in out


def test_promtool_unit_tests_every_alert_both_ways(promtool: str) -> None:
    result = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fires: set[str] = set()
    silent: set[str] = set()
    for t in tests:
        for case in t.get("alert_rule_test", []):
            (fires if case["exp_alerts"] else silent).add(case["alertname"])
    names = {a.name for a in GEN["ALERTS"]}
    assert fires == names, f"no test that fires: {names - fires}"
    assert silent == names, f"no test that stays silent: {names - silent}"


def test_every_dashboard_query_parses(promtool: str, tmp_path: Path) -> None:
    """promtool parses PromQL in rule files: each query (Grafana variables substituted) as a recording rule."""
    rules = [{"record": f"nodegc:dashboard_query_{i}", "expr": substitute(q)}
             for i, q in enumerate(GEN["dashboard_queries"]())]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    run([promtool, "check", "rules", str(path)])


def substitute(query: str, *, node: str = ".*", rate_interval: str = "5m") -> str:
    return (query.replace("$__rate_interval", rate_interval).replace("$cluster", ".*").replace("$node", node))


def test_dashboard_is_templated_by_datasource_cluster_and_node() -> None:
    doc = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert {"cluster", "node"} <= set(variables)
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    titles = {p["title"] for p in panels}
    assert {"Residue by node and kind", "Phases over time", "Reclaims by result", "Actions blocked by reason",
            "Scan duration (p95)", "Desired-state age", "IP ranges used / leaked / capacity",
            "Time to exhaustion", "Controller leader", "Stale endpoints"} <= titles
    for p in panels:
        assert p["datasource"]["uid"] == "${datasource}" and p["description"]
        for t in p["targets"]:
            assert 'cluster=~"$cluster"' in t["expr"], (p["title"], t["expr"])
            if "controller" not in t["expr"] and "endpoint" not in t["expr"]:
                assert 'node=~"$node"' in t["expr"], (p["title"], t["expr"])
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))


def test_every_alert_has_summary_description_and_a_runbook_section() -> None:
    text = RUNBOOK.read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            ann = rule["annotations"]
            assert ann["summary"] and ann["description"] and rule["labels"]["severity"]
            anchor = ann["runbook_url"].rsplit("#", 1)[1]
            assert anchor in anchors, f"docs/runbook.md has no section for {rule['alert']}"


def _objects(docs: list[Any], kind: str) -> list[Any]:
    return [o for o in docs if o and o.get("kind") == kind]


def test_kustomize_and_chart_ship_the_same_rules_and_dashboard(kubectl: str, helm: str) -> None:
    kust = list(yaml.safe_load_all(run([kubectl, "kustomize", str(MONITORING)])))
    (rule,) = _objects(kust, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    (cm,) = _objects(kust, "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["nodegc.json"]) == json.loads(DASHBOARD.read_text())
    chart = list(yaml.safe_load_all(run([helm, "template", "gc", str(CHART), "--namespace", "mon",
                                         "--set", "prometheusRule.enabled=true", "--set", "fullnameOverride=gc",
                                         "--set", "grafanaDashboard.enabled=true",
                                         "--set", "prometheusRule.runbookURL=https://wiki.example/nodegc"])))
    (crule,) = _objects(chart, "PrometheusRule")
    exprs = [r["expr"] for g in crule["spec"]["groups"] for r in g["rules"]]
    assert any('job="gc-agent-metrics"' in e for e in exprs) and any('job="gc-controller-metrics"' in e for e in exprs)
    assert not any("nodegc-agent-metrics" in e or "nodegc-controller-metrics" in e for e in exprs)
    urls = [r["annotations"]["runbook_url"] for g in crule["spec"]["groups"] for r in g["rules"]]
    assert all(u.startswith("https://wiki.example/nodegc#nodegc") for u in urls), urls
    (ccm,) = [o for o in _objects(chart, "ConfigMap") if "grafana_dashboard" in o["metadata"].get("labels", {})]
    assert ccm["metadata"]["labels"]["grafana_dashboard"] == "1" and ccm["metadata"]["namespace"] == "mon"
    assert json.loads(ccm["data"]["nodegc.json"]) == json.loads(DASHBOARD.read_text())


def test_alert_job_selectors_name_the_scraped_services(kubectl: str, helm: str) -> None:
    """A ServiceMonitor's job label is its Service's name: the alerts' job selectors must be those names."""
    objs = list(yaml.safe_load_all(run([kubectl, "kustomize", str(DEPLOY)])))
    objs += list(yaml.safe_load_all(run([kubectl, "kustomize", str(MONITORING)])))
    services = {o["metadata"]["name"]: o for o in _objects(objs, "Service")}
    monitored = set()
    for sm in _objects(objs, "ServiceMonitor"):
        wanted = sm["spec"]["selector"]["matchLabels"].items()
        monitored |= {name for name, svc in services.items() if wanted <= svc["metadata"]["labels"].items()}
    exprs = " ".join(r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"])
    jobs = set(re.findall(r'job="([^"]+)"', exprs))
    assert jobs == {GEN["AGENT_JOB"], GEN["CONTROLLER_JOB"]}
    assert jobs <= monitored, f"alerts select jobs {jobs}, ServiceMonitors scrape {monitored}"
