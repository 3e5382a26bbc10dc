"""The pure layers (model, planning) import no I/O: no host access, no network, no clock."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "nodegc"
PURE = ("model", "planning")
FORBIDDEN = {
    "os", "io", "subprocess", "socket", "shutil", "pathlib", "glob", "tempfile", "time", "sqlite3", "fcntl",
    "ctypes", "select", "signal", "http", "urllib", "ssl", "asyncio", "threading", "multiprocessing",
    "pyroute2", "lightkube", "httpx", "httpx2", "msgspec", "h2", "structlog", "yaml", "prometheus_client",
    "nodegc.inventory", "nodegc.desired", "nodegc.sandbox", "nodegc.observe", "nodegc.cli", "nodegc.render",
    "nodegc.settings",
}


def _imports(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def _pure_files() -> list[Path]:
    return sorted(p for layer in PURE for p in (SRC / layer).rglob("*.py"))


@pytest.mark.parametrize("path", _pure_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_pure_layer_imports_no_io(path: Path) -> None:
    bad = [
        name for name in _imports(ast.parse(path.read_text()))
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    ]
    assert not bad, f"{path.relative_to(SRC)} imports {bad}"


def test_model_does_not_import_planning() -> None:
    for path in (SRC / "model").rglob("*.py"):
        assert not [n for n in _imports(ast.parse(path.read_text())) if n.startswith("nodegc.planning")]


def _lint_imports(src: Path, config: Path) -> subprocess.CompletedProcess[str]:
    lint = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([str(lint), "--config", str(config), "--no-cache"], capture_output=True, text=True,
                          timeout=300, check=False, env=env, cwd=src)


def test_layer_contracts_hold() -> None:
    result = _lint_imports(SRC.parent, SRC.parents[1] / "pyproject.toml")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


@pytest.mark.parametrize(("where", "planted"), [
    ("planning/planted.py", "import sqlite3\n"),
    ("model/planted.py", "import subprocess\n"),
    ("planning/planted.py", "from nodegc.inventory import scanning\n"),
    ("ledger/planted.py", "from nodegc.planning import phases\n"),
    ("inventory/planted.py", "from nodegc.engine import cycle\n"),
], ids=["planning-sqlite3", "model-subprocess", "planning-inventory", "ledger-planning", "inventory-engine"])
def test_a_planted_forbidden_import_breaks_a_contract(tmp_path: Path, where: str, planted: str) -> None:
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy / "nodegc", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "nodegc" / where).write_text(planted)
    result = _lint_imports(copy, SRC.parents[1] / "pyproject.toml")
    assert result.returncode != 0, result.stdout[-2000:]
    assert "BROKEN" in result.stdout or "broken" in result.stdout
