"""Every failure of the ledger is raised as LedgerError, so the agent counts it (nodegc_ledger_errors) and
the readers say it in one line. A row whose text is bytes that are not UTF-8 (written by hand, a damaged
copy: nodegc itself stores only the surrogatepass encoding of what it was given) raised UnicodeDecodeError
instead, from the items (every agent cycle failed uncounted), the running orphans and the history (`nodegc
history` died with a traceback)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodegc.ledger.store import Ledger, LedgerError

BAD = b"pod_dir:/kubelet/pods/\xff"


def _ledger(tmp_path: Path, sql: str, values: tuple[Any, ...]) -> Path:
    db = tmp_path / "ledger.db"
    with Ledger(db):
        pass
    with sqlite3.connect(db) as raw:
        raw.execute(sql, values)
    raw.close()
    return db


ITEM = ("INSERT INTO items (key, kind, resource_id, phase, identity, finding_class, first_seen, last_seen,"
        " orphan_count, attempts, lazy) VALUES (?, 'pod_dir', 'x', 'detected', '[]', 'orphaned_pod_dir', 1, 1, 1, 0,"
        " 0)", (BAD,))
HISTORY = ("INSERT INTO history (key, kind, at, from_phase, to_phase, reason) VALUES (?, 'pod_dir', 1, NULL,"
           " 'detected', 'seen')", (BAD,))
ORPHAN = ("INSERT INTO running_orphans (sandbox_id, pod_uid, created_at, first_seen) VALUES (?, 'u', 'now', 1)",
          (BAD,))


@pytest.mark.parametrize(("row", "read"), [
    (ITEM, lambda ledger: ledger.items(active_only=True)),
    (ORPHAN, lambda ledger: ledger.running_orphans()),
], ids=["item", "running_orphan"])
def test_a_row_that_is_not_utf8_is_a_ledger_error(
        tmp_path: Path, row: tuple[str, tuple[Any, ...]], read: Callable[[Ledger], object]) -> None:
    db = _ledger(tmp_path, *row)
    with Ledger(db) as ledger, pytest.raises(LedgerError, match=r"\\xff"):
        read(ledger)


def test_history_shows_a_key_that_is_not_utf8_escaped(tmp_path: Path) -> None:
    """The history is read to be shown: its text is shown as `_shown` shows any, bad bytes escaped."""
    db = _ledger(tmp_path, *HISTORY)
    with Ledger(db) as ledger:
        assert [r.key for r in ledger.history()] == ["pod_dir:/kubelet/pods/\\xff"]
