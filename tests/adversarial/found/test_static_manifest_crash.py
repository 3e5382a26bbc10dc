"""Finding: a static pod manifest whose `containers` is not a list crashes the scan, and with it the agent."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from nodegc.agent import Wakeups, run_loop
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.inventory.static_pods import scan_static_pods
from nodegc.ledger.store import Ledger
from nodegc.model.pods import DesiredState
from nodegc.model.resources import Inventory
from nodegc.observe.health import Heartbeat
from nodegc.reclaim.dispatch import DryRunExecutor
from nodegc.settings import Roots, ScanOptions
from tests.unit.factories import NOW, pod

BAD = [
    "kind: Pod\nmetadata: {name: web}\nspec:\n  containers: 5\n",
    "kind: Pod\nmetadata: {name: web}\nspec:\n  containers: true\n",
    '{"kind": "Pod", "metadata": {"name": "web"}, "spec": {"initContainers": 1.5}}',
]


@pytest.mark.parametrize("text", BAD, ids=["int", "bool", "float-init"])
def test_a_manifest_whose_containers_is_not_a_list_is_a_problem_not_a_crash(tmp_path: Path, text: str) -> None:
    (tmp_path / "web.yaml").write_text(text)
    manifests, problems = scan_static_pods(tmp_path)  # TypeError: 'int' object is not iterable
    assert problems and manifests[0].name is None


class Source:
    name = "test"

    def fetch(self) -> DesiredState:
        return DesiredState(node="n1", pods=(pod("web", "u1", ip="10.0.0.2"),), source=self.name, fetched_at=NOW)

    def get_pod(self, namespace: str, name: str) -> None:
        return None


def test_the_agent_keeps_running_on_such_a_manifest(tmp_path: Path) -> None:
    (tmp_path / "web.yaml").write_text(BAD[0])

    def scanner(_roots: Roots, _opts: ScanOptions) -> Inventory:
        manifests, problems = scan_static_pods(tmp_path)  # what scan_node does (inventory/scanning.py)
        return Inventory(taken_at=NOW, static_pods=manifests, problems=problems)

    with Ledger(":memory:") as ledger:
        engine = Engine(roots=Roots(), source=Source(), ledger=ledger, executor=DryRunExecutor(),
                        settings=EngineSettings(), clock=NOW.timestamp, scanner=scanner)
        run_loop(engine, interval=0.0, stop=threading.Event(), wakeups=Wakeups(), heartbeat=Heartbeat(60.0),
                 max_cycles=2)
