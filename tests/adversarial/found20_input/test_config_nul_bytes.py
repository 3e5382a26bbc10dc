"""A command line cannot carry a NUL byte, but a YAML double-quoted string can ("\\0"), and the flag types
took it: a kubeletRoot holding one failed every agent cycle with "embedded null byte" (the agent ran and
never scanned), a procRoot one crashed the start with a traceback, and a stateDir one was reported as a
metrics address that cannot be served. The file refuses what the command line cannot give, naming the key.
(Checked at the file's reading, never by running an agent: one that took the value would start for real.)"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from nodegc.config import ConfigError, apply, keys, subcommand_parser
from nodegc.flags import build_parser

ACTIONS = keys(subcommand_parser(build_parser(), "agent"))


@pytest.mark.parametrize("key", sorted(k for k, a in ACTIONS.items() if a.nargs != 0))
def test_a_nul_byte_in_any_value_is_refused(tmp_path: Path, key: str) -> None:
    cfg = tmp_path / "agent.yaml"
    value = '"/tmp/a\\0b"'
    listed = isinstance(ACTIONS[key], argparse._AppendAction)
    cfg.write_text(f"{key}: [{value}]\n" if listed else f"{key}: {value}\n")
    parser = build_parser()
    argv = ["agent", "--config", str(cfg)]
    with pytest.raises(ConfigError) as exc:
        apply(parser, "agent", argv, parser.parse_args(argv), cfg)
    assert key in str(exc.value)
    assert "NUL" in str(exc.value) or "expected one of" in str(exc.value), str(exc.value)
