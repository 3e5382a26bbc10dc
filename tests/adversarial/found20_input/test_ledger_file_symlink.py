"""The ledger's lock refused a symlink, but the ledger file itself was checked with stat(), which follows
one: a symlink planted at `ledger.db` made SQLite create (dangling) or write (a file there) the database
outside the state directory. A ledger file that is a symlink is refused like one that is not a regular file,
for the agent and for the readers (history, explain) alike. The -shm and -wal names held: SQLite refuses a
symlinked -shm and replaces a symlinked -wal without writing through it (checked here too)."""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path

import pytest

from nodegc.ledger.store import Ledger, LedgerError


@pytest.mark.parametrize("lock", [True, False])
@pytest.mark.parametrize("target", ["dangling", "existing"])
def test_a_ledger_file_that_is_a_symlink_is_refused(tmp_path: Path, lock: bool, target: str) -> None:
    state, outside = tmp_path / "state", tmp_path / "outside"
    state.mkdir()
    outside.mkdir()
    if target == "existing":
        Ledger(outside / "ledger.db").close()
    (state / "ledger.db").symlink_to(outside / "ledger.db")
    before = sorted(p.name for p in outside.iterdir())
    with pytest.raises(LedgerError, match="symlink"):
        Ledger(state / "ledger.db", lock=lock)
    assert sorted(p.name for p in outside.iterdir()) == before


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_symlink_beside_it_is_not_written_through(tmp_path: Path, suffix: str) -> None:
    state, victim = tmp_path / "state", tmp_path / "victim"
    state.mkdir()
    victim.write_text("precious\n")
    (state / f"ledger.db{suffix}").symlink_to(victim)
    with suppress(LedgerError):  # refused: as good
        Ledger(state / "ledger.db").close()
    assert victim.read_text() == "precious\n"
