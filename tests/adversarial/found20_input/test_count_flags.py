"""A count flag took any whole number: `history --limit 99999999999999999999999` reached SQLite as a LIMIT it
cannot hold and was reported as a ledger failure (exit 1, "ledger read failed: Python int too large to
convert to SQLite INTEGER"), a usage error dressed as a broken ledger. A count is at most 2**63 - 1, refused
by the flag like any other bad value (exit 2), on the command line and in the agent's config file alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodegc.cli import main
from nodegc.config import ConfigError, apply
from nodegc.flags import build_parser
from nodegc.ledger.store import Ledger


def test_a_history_limit_beyond_sqlite_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Ledger(tmp_path / "ledger.db").close()
    with pytest.raises(SystemExit) as exc:
        main(["history", "--state-dir", str(tmp_path), "--limit", "9" * 23])
    assert exc.value.code == 2
    assert "--limit" in capsys.readouterr().err


def test_the_largest_limit_still_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Ledger(tmp_path / "ledger.db").close()
    assert main(["history", "--state-dir", str(tmp_path), "--limit", str(2**63 - 1)]) == 0


def test_the_config_file_refuses_it_too(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("consecutiveScans: " + "9" * 23 + "\n")
    parser = build_parser()
    argv = ["agent", "--config", str(cfg)]
    with pytest.raises(ConfigError, match="consecutiveScans"):
        apply(parser, "agent", argv, parser.parse_args(argv), cfg)
