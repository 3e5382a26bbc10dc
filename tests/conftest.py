"""Fixtures shared across the test tree: the HTTP-level test API server and a kubeconfig pointing at it.

A module that needs another server (or none) defines its own `api` or `kubeconfig`, which takes precedence.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.fakeapi import FakeKubeAPI


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as server:
        yield server


@pytest.fixture
def kubeconfig(api: FakeKubeAPI, tmp_path: Path) -> Path:
    return api.write_kubeconfig(tmp_path / "kubeconfig")
