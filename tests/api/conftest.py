"""Fixtures shared by the API tests: the HTTP-level test API server and a lightkube client of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lightkube
import pytest

from nodegc.api.client import make_client
from tests.api.fakeapi import FakeKubeAPI


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as server:
        yield server


@pytest.fixture
def client(api: FakeKubeAPI, tmp_path: Path) -> Iterator[lightkube.Client]:
    c = make_client(api.write_kubeconfig(tmp_path / "kubeconfig"))
    yield c
    c.close()
