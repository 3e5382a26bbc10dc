"""The runtime check (`_checked`) and the running orphans' completeness (`_observe_runtime`) ask
`runtime_unusable` of the same runtime view and photograph: it is worked out once a scan, and the same
answer serves both."""

from __future__ import annotations

from typing import Any

import pytest

from nodegc.engine import cycle
from nodegc.ledger.store import Ledger
from nodegc.model.pods import Pod
from nodegc.model.runtime import RuntimeView
from nodegc.planning.runtime import runtime_unusable
from tests.unit.test_proven_judgement import DB, GHOST, SANDBOX_DB, Scripted, engine, node


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []

    def counting(view: RuntimeView | None, pods: Any) -> str | None:
        seen.append(len(tuple(pods)))
        return runtime_unusable(view, pods)

    monkeypatch.setattr(cycle, "runtime_unusable", counting)
    return seen


@pytest.mark.parametrize(("pods", "reason"), [((DB,), None), ((DB, GHOST), "ghost")])
def test_one_question_a_scan(calls: list[int], pods: tuple[Pod, ...], reason: str | None) -> None:
    with Ledger(":memory:") as ledger:
        e = engine(Scripted(pods, pods), ledger, node(SANDBOX_DB, dirs=("u-db",)))
        report = e.cycle()
        assert calls == [len(pods)]
        assert e._unusable is None  # nothing kept to the next cycle
        assert (reason in report.blocked[0]) if reason else report.blocked == []
        e.cycle()
        assert calls == [len(pods)] * 2
