"""The ledger's node is a row of meta, read back through the decoding of names that are not valid Unicode
(`_dec`, surrogatepass). A value that is no such encoding (a meta row written by hand, a copied or damaged
file: bytes that are not UTF-8) raised UnicodeDecodeError from `recorded_node`, which is no LedgerError:
the agent's every cycle failed before anything was judged (logged as 'cycle failed', never counted in
nodegc_ledger_errors, and never progressing), and clean, history and explain died with a traceback. A node
that cannot be read is not this node: the ledger is taken over, its open items released."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nodegc import defaults
from nodegc.commands import cmd_history
from nodegc.ledger.store import Ledger
from nodegc.model.items import Phase
from nodegc.wiring import HistorySettings
from tests.adversarial.found11.test_streaks_across_unknown import Clock
from tests.adversarial.found20_safe.test_ledger_of_another_node import Node, _dead

UNREADABLE = b"node-\xff"


def _spoil(db: Path) -> None:
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE meta SET value = ? WHERE key = 'node'", (UNREADABLE,))
    raw.close()


def test_an_unreadable_node_is_another_nodes_and_taken_over(tmp_path: Path) -> None:
    clock, db = Clock(), tmp_path / "ledger.db"
    assert [i.orphan_count for i in Node(clock, db, "node-a").cycles(2) if i] == [1, 2]
    _spoil(db)
    again = Node(clock, db, "node-a")
    seen = again.cycles(1)  # raised UnicodeDecodeError
    assert again.taken_over() == 1
    assert seen[0] is not None and seen[0].phase is Phase.DETECTED and seen[0].orphan_count == 1
    with Ledger(db) as ledger:
        assert ledger.recorded_node() == "node-a"
        assert _dead(ledger) is not None


def test_history_reads_a_ledger_whose_node_is_unreadable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clock, db = Clock(), tmp_path / defaults.LEDGER_FILE
    Node(clock, db, "node-a").cycles(1)
    _spoil(db)
    assert cmd_history(HistorySettings(state_dir=tmp_path)) == 0  # raised UnicodeDecodeError
    assert "node node-\\xff" in capsys.readouterr().out
