"""The entry points are a thin layer over nodegc.wiring: no import loop between them, one place per default."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from nodegc import defaults
from nodegc.engine.cycle import EngineSettings
from nodegc.flags import build_parser
from nodegc.planning.guards import BlastRadius
from nodegc.planning.phases import PhasePolicy
from nodegc.settings import Roots, ScanOptions
from nodegc.wiring import agent_from_args, clean_from_args

SRC = Path(__file__).resolve().parents[2] / "src" / "nodegc"
# module -> the nodegc modules it must never import (at any depth of a function body)
NOT_BELOW = {
    "flags": {"nodegc.cli", "nodegc.wiring", "nodegc.commands", "nodegc.agent", "nodegc.controller"},
    "wiring": {"nodegc.cli", "nodegc.flags", "nodegc.commands", "nodegc.agent", "nodegc.controller"},
    "commands": {"nodegc.cli", "nodegc.agent", "nodegc.controller"},
    "agent": {"nodegc.cli", "nodegc.commands", "nodegc.controller"},
    "controller": {"nodegc.cli", "nodegc.commands", "nodegc.agent"},
    "defaults": {"nodegc"},
    "exitcodes": {"nodegc"},
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


@pytest.mark.parametrize("module", sorted(NOT_BELOW))
def test_entry_point_modules_import_downward_only(module: str) -> None:
    imported = _imports(SRC / f"{module}.py")
    bad = sorted(n for n in imported for f in NOT_BELOW[module] if n == f or n.startswith(f + "."))
    assert not bad, f"nodegc.{module} imports {bad}"


def test_defaults_imports_nothing() -> None:
    assert _imports(SRC / "defaults.py") <= {"__future__", "__future__.annotations"}


def test_settings_classes_and_flags_share_their_defaults() -> None:
    parser = build_parser()
    agent = parser.parse_args(["agent"])
    clean = parser.parse_args(["clean"])
    a, c = agent_from_args(agent), clean_from_args(clean)
    assert a.phases == PhasePolicy()
    assert a.roots == Roots() == c.roots
    assert a.interval == defaults.AGENT_INTERVAL_SECONDS
    s = a.safety
    assert (s.min_age_seconds, s.command_timeout) == (ScanOptions().min_age_seconds, ScanOptions().command_timeout)
    assert s.max_share == BlastRadius().max_share
    assert s.max_desired_age_seconds == EngineSettings().max_desired_age_seconds
    assert s.reclaims_per_minute == EngineSettings().reclaims_per_minute
    assert str(s.state_dir) == defaults.STATE_DIR


def test_version_imports_only_the_flags() -> None:
    """`--version` and `--help` must not pull in the engine, the API client or the readers."""
    code = ("import sys\nfrom nodegc.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('lightkube', 'httpx2', 'prometheus_client', 'structlog', 'pyroute2', 'yaml',"
            " 'nodegc.engine', 'nodegc.wiring', 'nodegc.inventory') if m in sys.modules]\nprint(heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
