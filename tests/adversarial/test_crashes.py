"""Hostile input that used to crash nodegc: each now ends in the documented error or a skip with a reason,
never a traceback, never a hang, and the agent keeps running."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nodegc.agent import Wakeups, run_loop
from nodegc.desired.snapshot import SnapshotSource
from nodegc.desired.source import SourceError
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.inventory.cni_cache import scan_cni_cache
from nodegc.ledger.store import Ledger, LedgerError
from nodegc.model.findings import FindingClass
from nodegc.model.items import Item, Phase
from nodegc.model.resources import Inventory, Kind
from nodegc.observe.health import Heartbeat
from nodegc.observe.metrics import Metrics
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy, Transition, reconcile
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.render import Report, render_json, render_table
from nodegc.settings import Roots, ScanOptions
from tests.unit.factories import NOW

POD = {"kind": "Pod", "metadata": {"name": "a", "namespace": "d", "uid": "u0"}, "spec": {"nodeName": "n1"},
       "status": {"phase": "Running"}}


# -- pods files ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    json.dumps({"kind": ["List"], "items": []}),
    json.dumps({"kind": {"a": 1}, "items": []}),
    "kind: [List]\nitems: []\n",
    "kind: {a: 1}\n",
])
def test_a_kind_that_is_a_list_or_an_object(tmp_path: Path, text: str) -> None:
    f = tmp_path / "pods"
    f.write_text(text)
    with pytest.raises(SourceError, match="kind is a"):
        SnapshotSource(f, "n1").fetch()


@pytest.mark.parametrize("text", [
    '{"kind": "List", "items": [], "metadata": {"resourceVersion": ' + "9" * 5000 + "}}",
    "kind: List\nitems: []\nx: " + "9" * 5000 + "\n",
])
def test_an_integer_of_five_thousand_digits(tmp_path: Path, text: str) -> None:
    f = tmp_path / "pods"
    f.write_text(text)
    with pytest.raises(SourceError, match="not a pod list"):
        SnapshotSource(f, "n1").fetch()


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "a: " + "[" * 100_000 + "]" * 100_000,
                                  "".join("  " * i + "- \n" for i in range(3000))])
def test_nesting_a_hundred_thousand_deep(tmp_path: Path, text: str) -> None:
    f = tmp_path / "pods"
    f.write_text(text)
    with pytest.raises(SourceError):
        SnapshotSource(f, "n1").fetch()


def test_pods_from_a_fifo_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "pods.json"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def fetch() -> None:
        try:
            SnapshotSource(fifo, "n1").fetch()
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    worker = threading.Thread(target=fetch, daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():
        with open(fifo, "w"):  # unblock the reader so the test process can end
            pass
        worker.join(5)
        pytest.fail("--pods-from on a FIFO blocked")
    assert isinstance(outcome[0], SourceError) and "not a regular file" in str(outcome[0])


@pytest.mark.parametrize("target", ["dir", "/dev/zero"])
def test_pods_from_a_directory_or_a_device(tmp_path: Path, target: str) -> None:
    path = tmp_path if target == "dir" else Path(target)
    with pytest.raises(SourceError, match="not a regular file"):
        SnapshotSource(path, "n1").fetch()


def test_a_pods_file_above_the_size_bound_is_not_read(tmp_path: Path) -> None:
    f = tmp_path / "pods.json"
    with open(f, "wb") as out:
        out.truncate(200 * 1024 * 1024)  # sparse: no disk used
    with pytest.raises(SourceError, match="byte limit"):
        SnapshotSource(f, "n1").fetch()


def test_an_endless_stdin_is_read_with_a_bound(tmp_path: Path) -> None:
    """`--pods-from -` read all of stdin into memory: /dev/zero there grew nodegc without limit."""
    with open("/dev/zero", "rb") as zero:
        done = subprocess.run([sys.executable, "-m", "nodegc", "scan", "--pods-from", "-", "--node", "n1",
                               "--kubelet-root", str(tmp_path / "k")], stdin=zero, capture_output=True, text=True,
                              timeout=120, check=False)
    assert done.returncode == 4, done.stderr[-2000:]
    assert "byte limit" in done.stderr and "Traceback" not in done.stderr


# -- cache entries no ledger, log or terminal can carry --------------------------------------------


def _cache(cid: str, name: str) -> str:
    return json.dumps({"kind": "cniCacheV1", "containerId": cid, "networkName": "net", "ifName": "eth0",
                       "netns": f"/run/netns/{cid}",
                       "cniArgs": [["K8S_POD_NAMESPACE", "d"], ["K8S_POD_NAME", name], ["K8S_POD_UID", f"u-{cid}"]]})


def _odd_cache_dir(tmp_path: Path) -> Path:
    results = tmp_path / "cni" / "results"
    results.mkdir(parents=True)
    (results / "net-c1-eth0").write_text(_cache("c1", "p\ud800"))  # json.dumps writes the escape "\\ud800"
    with open(os.fsencode(results) + b"/net-c2-eth0\xff", "w") as f:
        f.write(_cache("c2", "q"))
    return tmp_path / "cni"


def test_cache_entries_with_a_lone_surrogate_or_a_non_utf8_name_are_skipped(tmp_path: Path) -> None:
    entries, problems = scan_cni_cache(_odd_cache_dir(tmp_path))
    assert entries == ()
    reasons = sorted(p.reason for p in problems)
    assert len(reasons) == 2 and any("UTF-8" in r for r in reasons) and any("Unicode" in r for r in reasons)


def test_the_engine_and_scan_json_survive_odd_cache_entries(tmp_path: Path) -> None:
    """Before: the ledger write raised UnicodeEncodeError (an agent crash loop) and `scan -o json` failed."""
    cni = _odd_cache_dir(tmp_path)

    def scanner(_roots: Roots, _options: ScanOptions) -> Inventory:
        entries, problems = scan_cni_cache(cni)
        return Inventory(taken_at=datetime.now(UTC), cni_cache=entries, problems=problems)

    f = tmp_path / "pods.json"
    f.write_text(json.dumps({"kind": "List", "items": [POD]}))
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0))
    with Ledger(tmp_path / "ledger.db") as ledger:
        report = Engine(roots=Roots(), source=SnapshotSource(f, "n1"), ledger=ledger, executor=DryRunExecutor(),
                        settings=settings, scanner=scanner).cycle()
    inventory = scanner(Roots(), ScanOptions())
    doc = Report(node="n1", source="test", taken_at=NOW, findings=report.findings, problems=inventory.problems)
    render_json(doc).encode("utf-8")
    render_table(doc, show_all=True).encode("utf-8")


def test_the_ledger_keeps_strings_that_are_not_valid_unicode(tmp_path: Path) -> None:
    """Whatever reaches it (an iptables comment, a file name in the os.fsdecode convention), the ledger
    stores and returns it exactly: an item that cannot be stored would crash every cycle."""
    odd = "net-\udcff-\ud800"
    item = Item(key=f"cni_cache:/r/{odd}", kind=Kind.CNI_CACHE, resource_id=f"/r/{odd}", phase=Phase.DETECTED,
                identity=(("container_id", odd),), finding_class="stale_cni_cache", owner_uid=None,
                owner_namespace="d", owner_name=odd, container_id=odd, first_seen=1.0, last_seen=1.0,
                orphan_count=1)
    with Ledger(tmp_path / "ledger.db") as ledger:
        ledger.apply([Transition(item, None, f"seen orphaned: {odd}")], now=1.0)
        assert ledger.items() == {item.key: item}
        assert ledger.get(item.key) == item
        rows = ledger.history(key=item.key)
        assert len(rows) == 1
        f"{rows[0].key} {rows[0].reason} {rows[0].owner}".encode()  # printable


# -- the ledger and its directory -----------------------------------------------------------------


def _garbage(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not a database\n" * 400)


def test_a_corrupt_ledger_is_a_ledger_error(tmp_path: Path) -> None:
    _garbage(tmp_path / "ledger.db")
    with pytest.raises(LedgerError, match="ledger"):
        Ledger(tmp_path / "ledger.db")


def test_a_ledger_lock_that_is_a_symlink_or_a_directory(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "ledger.db.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(LedgerError, match="symlink"):
        Ledger(tmp_path / "a" / "ledger.db")
    (tmp_path / "b" / "ledger.db.lock").mkdir(parents=True)
    with pytest.raises(LedgerError, match="not a regular file"):
        Ledger(tmp_path / "b" / "ledger.db")


@pytest.mark.parametrize("shape", ["dir", "fifo"])
def test_a_ledger_file_that_is_a_directory_or_a_fifo(tmp_path: Path, shape: str) -> None:
    path = tmp_path / "ledger.db"
    if shape == "dir":
        path.mkdir()
    else:
        os.mkfifo(path)
    with pytest.raises(LedgerError, match="not a regular file"):
        Ledger(path)


def test_a_state_dir_that_is_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("")
    with pytest.raises(LedgerError, match="state"):
        Ledger(tmp_path / "state" / "ledger.db")


def test_errors_of_reads_are_ledger_errors(tmp_path: Path) -> None:
    """get and history raised sqlite3 errors straight through the agent loop."""
    ledger = Ledger(tmp_path / "ledger.db")
    ledger.db.execute("DROP TABLE history")
    ledger.db.execute("DROP TABLE items")
    try:
        for read in (lambda: ledger.get("x"), ledger.history, ledger.items):
            with pytest.raises(LedgerError):
                read()
    finally:
        ledger.close()
    assert not isinstance(LedgerError("x"), sqlite3.Error)


def test_a_ledger_error_in_a_cycle_is_counted_and_the_cycle_ends_cleanly(tmp_path: Path) -> None:
    f = tmp_path / "pods.json"
    f.write_text(json.dumps({"kind": "List", "items": [POD]}))
    metrics = Metrics()
    ledger = Ledger(tmp_path / "ledger.db")
    ledger.db.execute("DROP TABLE items")
    engine = Engine(roots=Roots(), source=SnapshotSource(f, "n1"), ledger=ledger, executor=DryRunExecutor(),
                    metrics=metrics, scanner=lambda _r, _o: Inventory(taken_at=datetime.now(UTC)))
    try:
        with pytest.raises(LedgerError):
            engine.cycle()
    finally:
        ledger.close()
    assert "nodegc_ledger_errors_total 1.0" in metrics.render().decode()


def test_the_agent_loop_goes_on_after_ledger_errors(tmp_path: Path) -> None:
    """A ledger that breaks under a running agent (here: its tables dropped) costs cycles, not the agent."""
    f = tmp_path / "pods.json"
    f.write_text(json.dumps({"kind": "List", "items": [POD]}))
    metrics = Metrics()
    ledger = Ledger(tmp_path / "ledger.db")
    ledger.db.execute("DROP TABLE items")
    engine = Engine(roots=Roots(), source=SnapshotSource(f, "n1"), ledger=ledger, executor=DryRunExecutor(),
                    metrics=metrics, scanner=lambda _r, _o: Inventory(taken_at=datetime.now(UTC)))
    heartbeat = Heartbeat(0.01)
    try:
        run_loop(engine, interval=0.0, stop=threading.Event(), wakeups=Wakeups(), heartbeat=heartbeat,
                 max_cycles=3)
    finally:
        ledger.close()
    assert "nodegc_ledger_errors_total 3.0" in metrics.render().decode()
    ready, why = heartbeat.ready()
    assert not ready and "ledger" in why


def _agent(state_dir: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"kind": "List", "items": [POD]}))
    roots = tmp_path / "roots"
    argv = [sys.executable, "-m", "nodegc", "agent", "--dry-run", "--max-cycles", "1", "--metrics-address", "",
            "--pods-from", str(pods), "--state-dir", str(state_dir), "--kubelet-root", str(roots / "kubelet"),
            "--cni-data-dir", str(roots / "cni"), "--netns-dir", str(roots / "netns"),
            "--proc-root", str(roots / "proc")]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("damage", ["corrupt", "lock_symlink", "lock_dir", "state_file"])
def test_the_agent_exits_with_a_message_on_a_broken_ledger(tmp_path: Path, damage: str) -> None:
    state = tmp_path / "state"
    if damage == "corrupt":
        _garbage(state / "ledger.db")
    elif damage == "lock_symlink":
        state.mkdir()
        (state / "ledger.db.lock").symlink_to("/nonexistent")
    elif damage == "lock_dir":
        (state / "ledger.db.lock").mkdir(parents=True)
    else:
        state.write_text("")
    done = _agent(state, tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "nodegc: cannot open ledger" in done.stderr


# -- the audit trail after a SIGKILL between a step and its record --------------------------------


def test_an_interrupted_step_whose_resource_is_gone_is_recorded_as_removed_by_nodegc() -> None:
    """The item was written TERMINATING right before its step; a SIGKILL came before the step's record.
    On restart the resource is absent: nodegc removed it, it was not "gone before it was reclaimed"."""
    item = Item(key="pod_dir:/k/pods/u1", kind=Kind.POD_DIR, resource_id="/k/pods/u1", phase=Phase.TERMINATING,
                identity=(("inode", "3"),), finding_class=FindingClass.ORPHANED_POD_DIR.value, owner_uid="u1",
                owner_namespace=None, owner_name=None, container_id=None, first_seen=1.0, last_seen=1.0,
                orphan_count=1)
    [t] = reconcile({item.key: item}, [], {}, now=2.0, policy=PhasePolicy())
    assert t.item.phase is Phase.CLOSED
    assert "gone before it was reclaimed" not in t.reason
    assert "removed by nodegc" in t.reason and "restart" in t.reason
