"""`nodegc history` and `nodegc explain` say which node the ledger they read belongs to (schema 5's meta row),
in the table and in the documents, beside the fields they had: a ledger carried from another node, or taken
over from one, reads as what it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from nodegc.cli import main
from nodegc.ledger.store import Ledger
from nodegc.model.items import Phase
from nodegc.planning.phases import Transition
from tests.unit.test_ledger import item

KEY = "pod_dir:/k/pods/u1"


def _ledger(state: Path, node: str | None) -> None:
    state.mkdir()
    with Ledger(state / "ledger.db") as ledger:
        ledger.apply([Transition(item(KEY, Phase.DETECTED, last_seen=100.0), None, "seen orphaned")], now=100.0)
        if node is not None:
            ledger.record_node(node)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_history_names_the_ledgers_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    _ledger(state, "node-a")
    doc = json.loads(_run(capsys, "history", "--state-dir", str(state), "-o", "json"))
    assert doc["node"] == "node-a"
    assert set(doc) == {"apiVersion", "kind", "ledger", "node", "items"} and doc["ledger"] == str(state / "ledger.db")
    assert [(r["item"], r["to"]) for r in doc["items"]] == [(KEY, "detected")]
    table = _run(capsys, "history", "--state-dir", str(state)).splitlines()
    assert table[0] == f"node node-a  ledger {state / 'ledger.db'}"
    assert len(table) == 2 and KEY in table[1] and "seen orphaned" in table[1]


def test_explain_names_the_ledgers_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    _ledger(state, "node-a")
    doc = json.loads(_run(capsys, "explain", KEY, "--state-dir", str(state), "-o", "json"))
    assert (doc["kind"], doc["item"], doc["node"], doc["phase"]) == ("Explanation", KEY, "node-a", "detected")
    assert {"resourceKind", "resourceId", "owner", "class", "why", "history"} <= set(doc)
    table = _run(capsys, "explain", KEY, "--state-dir", str(state)).splitlines()
    assert table[:2] == [f"item      {KEY}", "node      node-a"]


def test_a_ledger_with_no_node_recorded_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ledger written before the node was recorded (schema 4), or before any cycle had a desired state."""
    state = tmp_path / "state"
    _ledger(state, None)
    assert json.loads(_run(capsys, "history", "--state-dir", str(state), "-o", "json"))["node"] is None
    assert yaml.safe_load(_run(capsys, "explain", KEY, "--state-dir", str(state), "-o", "yaml"))["node"] is None
    assert _run(capsys, "history", "--state-dir", str(state)).startswith("node - (none recorded yet)  ledger ")
    assert "node      - (none recorded yet)\n" in _run(capsys, "explain", KEY, "--state-dir", str(state))


def test_a_node_name_with_control_characters_is_shown_escaped(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The recorded node may come from a snapshot file's nodeName: the table does not pass a terminal escape
    sequence through; the documents keep the name as it is (JSON escapes it)."""
    state = tmp_path / "state"
    _ledger(state, "node-\x1b[2Jb\n")
    table = _run(capsys, "history", "--state-dir", str(state)).splitlines()
    assert table[0] == f"node node-\\x1b[2Jb\\n  ledger {state / 'ledger.db'}"
    doc = json.loads(_run(capsys, "history", "--state-dir", str(state), "-o", "json"))
    assert doc["node"] == "node-\x1b[2Jb\n"
