"""A real Prometheus (Debian's `prometheus`) on loopback scrapes a real `nodegc agent` on a sandbox node with
residue and a real `nodegc controller`, both against the HTTP-level test API server. Every dashboard query
and every alert expression is evaluated through Prometheus' HTTP API: each returns data, names only
metrics and labels the targets export, and every loaded rule evaluates without error."""

from __future__ import annotations

import json
import os
import re
import runpy
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodegc.sandbox.node import SandboxNode
from tests.api.fakeapi import FakeKubeAPI

REPO = Path(__file__).resolve().parents[2]
GEN: dict[str, Any] = runpy.run_path(str(REPO / "scripts" / "monitoring.py"))
RULES = REPO / "deploy" / "monitoring" / "rules" / "nodegc.rules.yaml"
TARGET_LABELS = {"job", "instance", "node", "cluster"}
"""Labels the scrape configuration adds (the ServiceMonitor's relabeling and Prometheus' own)."""
HISTORY_SECONDS = 40.0
"""Scraped history before the queries run: alert windows are scaled down to 30 s (see `scaled`)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prometheus() -> str:
    path = os.environ.get("PROMETHEUS") or shutil.which("prometheus")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("prometheus not found (Debian package prometheus; make deps installs it)", pytrace=False)
        pytest.skip("prometheus not found (Debian package prometheus)")
    return path


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - a loopback URL built here
        return json.loads(r.read())


class Prom:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def api(self, path: str, **params: str) -> Any:
        doc = _get(f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params)}")
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"] if data["resultType"] == "vector" else [data["result"]]
        return result

    def series_labels(self, metric: str) -> set[str]:
        labels: set[str] = set()
        for s in self.api("series", **{"match[]": metric}):
            labels |= set(s)
        return labels


@contextmanager
def _process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _wait(predicate: Any, timeout: float, what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.5)
    tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in logs if p.exists())
    pytest.fail(f"timed out waiting for {what}\n{tails}")


def scaled(expr: str) -> str:
    """The alert's expression with its windows scaled to the test's minute of history (structure, metrics
    and labels unchanged; the real windows are unit-tested by promtool)."""
    expr = re.sub(r"\[\d+[smhd]:\d+[smhd]\]", "[30s:5s]", expr)
    expr = re.sub(r"\[\d+[smhd]\]", "[30s]", expr)
    return re.sub(r"offset \d+[smhd]", "offset 30s", expr)


def signal(expr: str) -> str:
    """What an alert measures: `absent(x)` measures x; a comparison's left side is kept by the generator."""
    m = re.fullmatch(r"absent\((.*)\)", expr)
    return m.group(1) if m else expr


def metrics_in(expr: str) -> set[str]:
    names = set(re.findall(r"\b(nodegc_[a-z0-9_]+)\b", expr))
    if re.search(r"\bup\{", expr):
        names.add("up")
    return names


def labels_in(expr: str) -> set[str]:
    found = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", expr))
    for group in re.findall(r"\bby \(([^)]*)\)", expr):
        found |= {x.strip() for x in group.split(",") if x.strip()}
    return found


def _stale_slices(api: FakeKubeAPI) -> None:
    ns = "default"
    gone = {"addresses": ["10.99.0.7"], "conditions": {"ready": True},
            "targetRef": {"kind": "Pod", "namespace": ns, "name": "gone-pod", "uid": "uid-gone"}}
    api.add("services", {"metadata": {"name": "api", "namespace": ns}, "spec": {"ports": [{"port": 80}]}})
    for name, labels in (("api-managed", {"kubernetes.io/service-name": "api",
                                          "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}),
                         ("api-manual", {"kubernetes.io/service-name": "api"})):
        api.add("endpointslices", {"metadata": {"name": name, "namespace": ns, "labels": labels},
                                   "addressType": "IPv4", "endpoints": [gone],
                                   "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})


def test_dashboard_queries_and_alert_expressions_on_a_real_prometheus(  # noqa: PLR0915 - one scenario
        sandbox_node: SandboxNode, tmp_path: Path) -> None:
    prometheus = _prometheus()
    node = sandbox_node
    live = node.add_pod("web")
    leaky = node.add_pod("leaky", host_port=8090)
    stuck = node.add_pod("stuck")
    node.delete_without_cni_del(leaky)   # network residue: reclaimed (reclaims by result)
    node.delete_leaving_mounts(stuck)    # mounts and the pod directory: kept detected (residue by kind)
    agent_port, controller_port, prom_port = _free_port(), _free_port(), _free_port()
    logs = [tmp_path / "agent.log", tmp_path / "controller.log", tmp_path / "prometheus.log"]
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": GEN["AGENT_JOB"], "static_configs": [
                {"targets": [f"127.0.0.1:{agent_port}"], "labels": {"node": node.node_name, "cluster": "test"}}]},
            {"job_name": GEN["CONTROLLER_JOB"], "static_configs": [
                {"targets": [f"127.0.0.1:{controller_port}"], "labels": {"cluster": "test"}}]},
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    r = node.roots
    with ExitStack() as stack:
        api = stack.enter_context(FakeKubeAPI(bookmark_interval=0.5, kubelets=(node.node_name,)))
        api.add("nodes", {"metadata": {"name": node.node_name}, "status": {"conditions": []}})
        api.add_pod(node.pod_record(live))
        _stale_slices(api)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        nodegc = [sys.executable, "-m", "nodegc"]
        stack.enter_context(_process([
            *nodegc, "agent", "--kubeconfig", str(kubeconfig), "--node", node.node_name,
            "--kubelet-root", str(r.kubelet_root), "--cni-conf-dir", str(r.cni_conf_dir),
            "--cni-data-dir", str(r.cni_data_dir), "--netns-dir", str(r.netns_dir), "--net-ns", str(r.net_ns),
            "--cni-bin-dir", "/usr/lib/cni", "--state-dir", str(tmp_path / "state"), "--min-age", "0",
            "--interval", "1", "--consecutive-scans", "2", "--grace", "0",
            "--mark-rule", "volume_mount=100000,86400", "--mark-rule", "pod_dir=100000,86400",
            "--metrics-address", f"127.0.0.1:{agent_port}", "--log-format", "json"], logs[0]))
        stack.enter_context(_process([
            *nodegc, "controller", "--kubeconfig", str(kubeconfig), "--lease-namespace", "default",
            "--identity", "controller-0", "--interval", "1", "--metrics-address", f"127.0.0.1:{controller_port}",
            "--log-format", "json"], logs[1]))
        stack.enter_context(_process([
            prometheus, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"], logs[2]))
        prom = Prom(prom_port)
        _wait(lambda: _get(f"{prom.base}/api/v1/targets")["data"]["activeTargets"] and all(
            t["health"] == "up" for t in _get(f"{prom.base}/api/v1/targets")["data"]["activeTargets"]),
            90, "both targets up", logs)
        started = time.monotonic()
        _wait(lambda: prom.query('nodegc_reclaims_total{result="ok"}')
              and prom.query("nodegc_stale_endpoints_total") and prom.query("nodegc_controller_leader == 1"),
              90, "reclaims, stale endpoints and a leader", logs)
        time.sleep(max(0.0, HISTORY_SECONDS - (time.monotonic() - started)))

        exported = {m: prom.series_labels(m) for m in set(prom.api("label/__name__/values"))}
        problems: list[str] = []

        def check(kind: str, name: str, expr: str) -> None:
            for metric in metrics_in(expr):
                if metric not in exported:
                    problems.append(f"{kind} {name}: no series of {metric}")
            have = set().union(*(exported.get(m, set()) for m in metrics_in(expr))) | TARGET_LABELS
            missing = labels_in(expr) - have - {"__name__"}
            if missing:
                problems.append(f"{kind} {name}: labels {sorted(missing)} not exported with {sorted(metrics_in(expr))}")
            result = prom.query(expr)
            if not result:
                problems.append(f"{kind} {name}: no data for {expr}")

        for query in GEN["dashboard_queries"]():
            check("panel", query[:60], query.replace("$__rate_interval", "10s").replace("$cluster", ".*")
                  .replace("$node", node.node_name))
        for alert in GEN["ALERTS"]:
            check("alert", alert.name, scaled(signal(alert.signal)))
            if alert.unless:
                check("alert", f"{alert.name} (unless)", scaled(alert.unless))
            prom.query(alert.expr)  # the real expression is valid PromQL on this server too
        assert not problems, "\n".join(problems)

        # Every rule of the shipped rules file loaded and evaluates without error.
        groups = prom.api("rules")["groups"]
        rules = [rule for g in groups for rule in g["rules"]]
        assert {rule["name"] for rule in rules} == {a.name for a in GEN["ALERTS"]}
        assert all(rule["health"] == "ok" for rule in rules), [(x["name"], x.get("lastError")) for x in rules]

        # Both processes say what they are: the dashboard's variables come from nodegc_build_info.
        jobs = {x["metric"]["job"] for x in prom.query("nodegc_build_info")}
        assert jobs == {GEN["AGENT_JOB"], GEN["CONTROLLER_JOB"]}
        # The residue is there and labelled as the dashboard expects.
        kinds = {s["metric"]["kind"] for s in prom.query(f'nodegc_items{{node="{node.node_name}"}} > 0')}
        assert {"volume_mount", "pod_dir"} <= kinds
        ranges = prom.query("nodegc_ip_range_capacity")
        assert [(s["metric"]["range"], s["value"][1]) for s in ranges] == [("10.244.0.0/16", "65533")]
        # The agent set its node conditions through the same API.
        conditions = {c["type"]: c for c in (api.get("nodes", "default", node.node_name) or {})
                      .get("status", {}).get("conditions", [])}
        assert conditions["ResidueReclaimBlocked"]["status"] == "False"
        assert conditions["PodIPRangePressure"]["status"] == "False"
    # The agent stopped (SIGTERM) and kept its forecast window for the next start.
    window = json.loads((tmp_path / "state" / "ip-ranges.json").read_text())
    (series,) = window["series"]
    assert series["range"] == node.subnet and len(series["samples"]) >= 10
