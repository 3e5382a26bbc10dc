"""Two fail-safe keeps a pod can hold open on purpose: a process holding its mmap lock makes the shim scan
"cannot tell" (no runtime leftover is judged while it lasts), and a namespace flooded with addresses past the
netlink dump bound stays unread (what it would have shown is kept). Both verdicts are right, and both were
invisible but for a line of the cycle report: the locked process was no read problem at all, and the flood
was counted as any unreadable namespace. Each is now a read problem of its own cause: logged with the pid or
the namespace and the cause, and exported as `nodegc_scan_read_problems{kind, cause}` (the dashboard's
*Read problems by cause* panel). Real parts: the FUSE-locked process, a flooded namespace, the engine's cycle
fed the real readers' problems, the metrics registry."""

from __future__ import annotations

import logging
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from nodegc.hostio import netlink
from nodegc.inventory.links import scan_veths
from nodegc.inventory.scanning import _read_addresses
from nodegc.ledger.store import Ledger
from nodegc.model.resources import DUMP_BOUND, UNTOLD_PROCESS_CAUSE, Inventory, Kind, NetnsEntry, ReadProblem
from nodegc.observe.metrics import Metrics
from nodegc.settings import Roots
from tests.host.adversarial.found14_safe.test_cmdline_of_a_locked_process import _scan, locked  # noqa: F401
from tests.host.adversarial.found14_safe.test_netlink_dump_bound import _flood
from tests.host.test_netns_addresses_by_netnsid import Node
from tests.unit.factories import NOW
from tests.unit.test_proven_judgement import Scripted, engine

pytestmark = pytest.mark.host


@pytest.fixture(autouse=True)
def _warnings_pass() -> Iterator[None]:
    """The warnings reach the capture whatever level an earlier test left configured: a one-shot command run
    in this process (`nodegc scan`) logs from error up, and `capture_logs` keeps the level's filter."""
    old = structlog.get_config()["wrapper_class"]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    yield
    structlog.configure(wrapper_class=old)


def _gauge(metrics: Metrics) -> dict[tuple[str, str], float]:
    return {(s.labels["kind"], s.labels["cause"]): s.value for family in metrics.registry.collect()
            if family.name == "nodegc_scan_read_problems" for s in family.samples}


def _cycle(problems: tuple[ReadProblem, ...], metrics: Metrics) -> list[MutableMapping[str, Any]]:
    def scanner(_roots: Roots, _opts: object) -> Inventory:
        return Inventory(taken_at=NOW, problems=problems)

    with Ledger(":memory:") as ledger, capture_logs() as logs:
        e = engine(Scripted((), ()), ledger, scanner)
        e.metrics = metrics
        e.cycle()
    return [entry for entry in logs if entry["event"] == "read problem"]


def test_a_locked_process_is_a_read_problem_of_its_own_cause_logged_with_its_pid(tmp_path: Path,
                                                                                  locked: int) -> None:  # noqa: F811
    state = tmp_path / "state"
    state.mkdir()
    got = _scan(state)
    assert got is not None
    untold = [p for p in got[1] if p.cause == UNTOLD_PROCESS_CAUSE]
    assert [p.path for p in untold] == [f"/proc/{locked}"], got[1]
    assert untold[0].kind is Kind.RUNTIME_LEFTOVER and f"pid {locked}" in untold[0].reason
    metrics = Metrics()
    assert _gauge(metrics)[("runtime_leftover", UNTOLD_PROCESS_CAUSE)] == 0  # exported before it happens
    logged = _cycle(got[1], metrics)
    assert [(e["path"], e["cause"]) for e in logged] == [(f"/proc/{locked}", UNTOLD_PROCESS_CAUSE)]
    assert f"pid {locked}" in str(logged[0]["reason"])
    assert _gauge(metrics)[("runtime_leftover", UNTOLD_PROCESS_CAUSE)] == 1
    _cycle((), metrics)  # gone at the next scan: back to 0
    assert _gauge(metrics)[("runtime_leftover", UNTOLD_PROCESS_CAUSE)] == 0


def test_a_flooded_namespace_is_a_read_problem_of_its_own_cause_logged_with_its_path(node: Node) -> None:
    flooded = node.pod("flooded", "10.9.0.3/24")
    fine = node.pod("fine", "10.9.0.4/24")
    _flood(flooded, netlink.DUMP_MAX_MESSAGES + 1)
    entries = tuple(NetnsEntry(path=str(p), name=p.name, mounted=True) for p in (flooded, fine))
    read, problems = _read_addresses(entries, [0, 1], str(node.ns))
    assert read[1].addresses == ("10.9.0.4",)
    assert [(p.path, p.cause) for p in problems] == [(str(flooded), DUMP_BOUND)], problems
    metrics = Metrics()
    assert _gauge(metrics)[("netns", DUMP_BOUND)] == 0
    logged = _cycle(tuple(problems), metrics)
    assert [(e["kind"], e["path"], e["cause"]) for e in logged] == [("netns", str(flooded), DUMP_BOUND)]
    assert "more than" in str(logged[0]["reason"])
    assert _gauge(metrics)[("netns", DUMP_BOUND)] == 1


def test_a_link_dump_past_the_bound_is_of_the_same_cause(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(6):
        node.pod(f"p{i}", f"10.9.0.{10 + i}/24")
    monkeypatch.setattr(netlink, "DUMP_MAX_MESSAGES", 5)
    _, problems = scan_veths(netns_entries=(), net_ns=node.ns)
    assert [p.cause for p in problems] == [DUMP_BOUND], problems


def test_any_other_unreadable_namespace_keeps_the_general_cause(node: Node) -> None:
    gone = node.dir / "not-a-namespace"
    gone.write_text("")
    entries = (NetnsEntry(path=str(gone), name=gone.name, mounted=True),)
    _, problems = _read_addresses(entries, [0], str(node.ns))
    assert [p.cause for p in problems] == ["unreadable"], problems
