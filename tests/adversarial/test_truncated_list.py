"""A list that silently leaves a live pod out: the pod's directory and volumes must survive, because the
owner gets a name from its cache entry or log directory and terminate's live GET finds it alive."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory, PodLogDir
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import Batch, OnOutcome
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import Roots, ScanOptions
from tests.unit.factories import NOW, cache, pod, pod_dir

MISSING = pod("db-0", "u-missing", ip="10.0.0.7")
"""Live, on this node, and left out of the list (a truncated page, a proxy, a lagging cache)."""


class Source:
    name = "truncated"

    def fetch(self) -> DesiredState:
        return DesiredState(node="n1", pods=(pod("web", "u-web", ip="10.0.0.2"),), source=self.name, fetched_at=NOW)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return MISSING if (namespace, name) == (MISSING.namespace, MISSING.name) else None


@dataclasses.dataclass
class Recorder:
    actions: list[str] = dataclasses.field(default_factory=list)
    destructive: bool = True

    def execute(self, batch: Batch, *, on_outcome: OnOutcome) -> None:
        for item, _ in batch:
            self.actions.append(item.key)
            on_outcome(item, Outcome.done("ok"))


def _named_by_cache(_roots: Roots, _opts: ScanOptions) -> Inventory:
    return Inventory(taken_at=NOW, pod_dirs=(pod_dir("u-web"), pod_dir("u-missing", mounted=True)),
                     cni_cache=(cache("cweb", uid="u-web", name="web", ip="10.0.0.2"),
                                cache("cdb", uid="u-missing", name="db-0", ip="10.0.0.7")))


def _named_by_log_dir(_roots: Roots, _opts: ScanOptions) -> Inventory:
    log_dir = PodLogDir(namespace="default", name="db-0", uid="u-missing", path="/logs/default_db-0_u-missing",
                        inode=9, mtime=0.0)
    return Inventory(taken_at=NOW, pod_dirs=(pod_dir("u-web"), pod_dir("u-missing", mounted=True)),
                     pod_logs=(log_dir,))


@pytest.mark.parametrize("scanner", [_named_by_cache, _named_by_log_dir], ids=["cache-entry", "log-dir"])
def test_a_live_pod_left_out_of_the_list_keeps_its_directory(
    scanner: Callable[[Roots, ScanOptions], Inventory],
) -> None:
    recorder = Recorder()
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0))
    with Ledger(":memory:") as ledger:
        engine = Engine(roots=Roots(), source=Source(), ledger=ledger, executor=recorder, settings=settings,
                        clock=NOW.timestamp, scanner=scanner)
        report = engine.cycle()
    assert not [a for a in recorder.actions if "u-missing" in a], recorder.actions
    assert {item.owner_uid for item, _ in report.sent_back} == {"u-missing"}
