"""`nodegc_read_problems_total` said less than the cycle's report: the runtime check adds read problems (the
sandboxes and the runtime's leftovers unseen when the runtime cannot vouch for the view's pods), which
`report.problems` counted and the metric left out. A dashboard saw a clean scan where nothing that needs
the runtime's word was concluded."""

from __future__ import annotations

from nodegc.ledger.store import Ledger
from nodegc.model.resources import Kind
from nodegc.observe.metrics import Metrics
from tests.unit.test_proven_judgement import DB, SANDBOX_DB, Scripted, engine, node


def _problems(metrics: Metrics) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in metrics.registry.collect():
        if family.name == "nodegc_read_problems":
            for s in family.samples:
                if s.name == "nodegc_read_problems_total":
                    out[s.labels["kind"]] = s.value
    return out


def test_the_runtime_checks_problems_are_counted_in_the_metric() -> None:
    metrics = Metrics()
    with Ledger(":memory:") as ledger:
        e = engine(Scripted((DB,), (DB,)), ledger, node(reachable=False, dirs=("u-db",)))
        e.metrics = metrics
        report = e.cycle()
    assert report.problems == 2
    assert _problems(metrics) == {Kind.SANDBOX.value: 1, Kind.RUNTIME_LEFTOVER.value: 1}
    assert sum(_problems(metrics).values()) == report.problems


def test_a_runtime_that_vouches_adds_nothing() -> None:
    metrics = Metrics()
    with Ledger(":memory:") as ledger:
        e = engine(Scripted((DB,), (DB,)), ledger, node(SANDBOX_DB, dirs=("u-db",)))
        e.metrics = metrics
        report = e.cycle()
    assert report.problems == 0 and _problems(metrics) == {}
