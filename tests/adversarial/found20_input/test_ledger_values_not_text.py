"""A ledger text column holding a BLOB that is not UTF-8 even with surrogatepass (a damaged or foreign
ledger: nodegc itself writes only what it can read back) raised UnicodeDecodeError out of the ledger, past
its LedgerError: `nodegc history` crashed with a traceback, and the engine's first step of every cycle
(`recorded_node`) failed the cycle before it began. Now the readers show such a value with backslash
escapes, an unreadable node row is a node of another name (taken over: open items released, counts begin
again, the right name recorded), and an item or running orphan row that holds one is a LedgerError."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodegc.cli import main
from nodegc.ledger.store import _UPSERT_ITEM, Ledger, LedgerError, _row
from nodegc.model.items import Item, Phase
from nodegc.model.resources import Kind

BAD = b"\xff\xfe-node"


def _ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.db", lock=False)


def test_history_shows_a_node_row_that_is_not_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with _ledger(tmp_path) as ledger:
        ledger.db.execute("INSERT OR REPLACE INTO meta VALUES ('node', ?)", (BAD,))
    assert main(["history", "--state-dir", str(tmp_path)]) == 0
    assert "\\xff\\xfe-node" in capsys.readouterr().out


def test_an_unreadable_node_row_is_another_node(tmp_path: Path) -> None:
    with _ledger(tmp_path) as ledger:
        ledger.db.execute("INSERT OR REPLACE INTO meta VALUES ('node', ?)", (BAD,))
        recorded = ledger.recorded_node()
        assert recorded == "\\xff\\xfe-node"
        ledger.take_over("n1", [], now=0.0)
        assert ledger.recorded_node() == "n1"


def test_an_item_row_that_is_not_text_is_a_ledger_error(tmp_path: Path) -> None:
    item = Item(key="pod_dir:u1", kind=Kind.POD_DIR, resource_id="u1", phase=Phase.DETECTED, identity=(),
                finding_class="residue", owner_uid=None, owner_namespace=None, owner_name=None,
                container_id=None, first_seen=0.0, last_seen=0.0, orphan_count=1)
    with _ledger(tmp_path) as ledger:
        ledger.db.execute(_UPSERT_ITEM, _row(item))
        assert ledger.get("pod_dir:u1") == item
        ledger.db.execute("UPDATE items SET owner_name = ?", (BAD,))
        with pytest.raises(LedgerError):
            ledger.items()
        with pytest.raises(LedgerError):
            ledger.get("pod_dir:u1")


def test_history_shows_rows_that_are_not_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with _ledger(tmp_path) as ledger:
        ledger.db.execute("INSERT INTO history (key, kind, at, from_phase, to_phase, reason, owner)"
                          " VALUES (?, 'pod_dir', 0, NULL, 'detected', ?, ?)", (BAD, BAD, BAD))
    assert main(["history", "--state-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("\\xff\\xfe-node") == 3
