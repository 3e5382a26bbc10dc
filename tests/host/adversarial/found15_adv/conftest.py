"""Fixtures shared by this round's reclaim-path attacks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.sandbox.node import SandboxNode


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SandboxNode]:
    """A sandbox node whose pods are attached by the real bridge, portmap and firewall plugins (a module's own
    `node` fixture wins over this one)."""
    made = SandboxNode.create(tmp_path, plugins=("bridge", "portmap", "firewall"))
    try:
        yield made
    finally:
        made.close()
