"""Fixtures shared by the host attacks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.host.test_netns_addresses_by_netnsid import Node


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    """Pod namespaces with one address each, made by `ip` (a module's own `node` fixture wins over this one)."""
    made = Node(tmp_path)
    yield made
    made.close()
