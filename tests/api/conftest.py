"""Fixtures shared by the API tests: a lightkube client of the test API server (`api`, in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lightkube
import pytest

from nodegc.api.client import make_client
from tests.api.fakeapi import FakeKubeAPI


@pytest.fixture
def client(api: FakeKubeAPI, tmp_path: Path) -> Iterator[lightkube.Client]:
    c = make_client(api.write_kubeconfig(tmp_path / "kubeconfig"))
    yield c
    c.close()
