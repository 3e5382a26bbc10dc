"""The pure layers (model, planning) import no I/O: no host access, no network, no clock."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "nodegc"
PURE = ("model", "planning")
FORBIDDEN = {
    "os", "io", "subprocess", "socket", "shutil", "pathlib", "glob", "tempfile", "time", "sqlite3", "fcntl",
    "ctypes", "select", "signal", "http", "urllib", "ssl", "asyncio", "threading", "multiprocessing",
    "pyroute2", "lightkube", "httpx", "structlog", "yaml", "prometheus_client",
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
