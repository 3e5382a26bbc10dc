"""Durations too large for the kernel's and Python's timeouts: `--runtime-timeout 1e10` (or 100000000000s in
the config file) passed every check (finite, > 0), and then every CRI call raised OverflowError from
socket.settimeout (not a CRIError: the runtime read, and with it the scan, failed with a traceback); an
`--interval` that large overflowed the agent's wait between cycles. A duration is bounded at parse time
(`flags.MAX_DURATION_SECONDS`, ten years): the flag or the setting is refused with a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodegc.cli import main
from nodegc.config import ConfigError
from nodegc.flags import MAX_DURATION_SECONDS, build_parser, parse_duration
from nodegc.wiring import agent_from_args

HUGE = ("1e10", "99999999999", "200000d", "3000000000m")


@pytest.mark.parametrize("text", HUGE)
def test_a_duration_beyond_the_bound_is_no_duration(text: str) -> None:
    with pytest.raises(ValueError, match="at most"):
        parse_duration(text)


def test_the_bound_itself_is_a_duration_and_fits_every_timeout() -> None:
    import socket
    import threading

    assert parse_duration(str(MAX_DURATION_SECONDS)) == MAX_DURATION_SECONDS
    assert MAX_DURATION_SECONDS < threading.TIMEOUT_MAX
    with socket.socket() as s:
        s.settimeout(MAX_DURATION_SECONDS)  # no OverflowError


@pytest.mark.parametrize(("command", "flag"), [
    ("agent", "--interval"), ("agent", "--runtime-timeout"), ("scan", "--runtime-timeout"),
    ("agent", "--request-timeout"), ("agent", "--command-timeout"), ("agent", "--grace"),
    ("controller", "--interval"),
])
def test_a_huge_duration_flag_exits_2_naming_it(command: str, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, f"{flag}=1e10"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and "at most" in err, err


def test_a_huge_duration_in_the_config_file_is_refused(tmp_path: Path) -> None:
    from nodegc.config import apply

    cfg = tmp_path / "agent.yaml"
    cfg.write_text("kind: AgentConfig\ninterval: 100000000000s\n")
    parser = build_parser()
    full = ["agent", "--config", str(cfg)]
    args = parser.parse_args(full)
    with pytest.raises(ConfigError, match="at most"):
        apply(parser, "agent", full, args, cfg)
        agent_from_args(args)
