"""Reservation files taken again by their settled stamp (`FileMemo`): whatever a CNI plugin does to a file
between two scans (a rewrite within one clock tick at the same size, a file renamed over it, a write seen
half done), the next scan finds what a reader that remembers nothing finds. A reservation read with an old
container id while a new sandbox holds the address would release a live pod's address."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.hostio import files
from nodegc.inventory import cni_ipam

OLD, NEW = "a" * 64, "b" * 64


def _held(root: Path) -> dict[str, str | None]:
    found, _ = cni_ipam.scan_ip_reservations(root)
    return {r.ip: r.container_id for r in found}


def _fresh(root: Path) -> dict[str, str | None]:
    cni_ipam.forget_parsed_reservations()
    try:
        return _held(root)
    finally:
        cni_ipam.forget_parsed_reservations()


@pytest.fixture
def net(tmp_path: Path) -> Iterator[Path]:
    cni_ipam.forget_parsed_reservations()
    path = tmp_path / "networks" / "net"
    path.mkdir(parents=True)
    yield path
    cni_ipam.forget_parsed_reservations()


def test_a_rewrite_in_the_same_tick_at_the_same_size_is_seen(net: Path) -> None:
    """With the real settle time: the read right after a write is never remembered, so a second write in
    the same clock tick (same inode, size, mtime and ctime) cannot hide behind the first's stamp."""
    held = net / "10.0.0.5"
    for _ in range(20):
        held.write_bytes(OLD.encode() + b"\r\neth0")
        assert _held(net.parent.parent) == {"10.0.0.5": OLD}
        held.write_bytes(NEW.encode() + b"\r\neth0")
        assert _held(net.parent.parent) == {"10.0.0.5": NEW}


def test_a_settled_file_renamed_over_is_read_again(net: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "SETTLED_NS", 0)
    root = net.parent.parent
    held, staged = net / "10.0.0.6", net.parent / "staged"
    held.write_bytes(OLD.encode() + b"\r\neth0")
    staged.write_bytes(NEW.encode() + b"\r\neth0")  # as old as the other: the same settled age
    assert _held(root) == {"10.0.0.6": OLD}
    assert _held(root) == {"10.0.0.6": OLD}  # taken again
    os.replace(staged, held)
    assert _held(root) == _fresh(root) == {"10.0.0.6": NEW}


def test_a_write_seen_half_done_is_never_remembered(net: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "SETTLED_NS", 0)
    root = net.parent.parent
    held = net / "10.0.0.7"
    held.write_bytes(OLD.encode() + b"\r\neth0")
    assert _held(root) == {"10.0.0.7": OLD}
    time.sleep(0.02)
    with open(held, "r+b") as f:
        f.truncate(0)  # the plugin's O_TRUNC, its write not yet done
        found, problems = cni_ipam.scan_ip_reservations(root)
        assert found == () and any("10.0.0.7" in p.path for p in problems)
        f.write(NEW[:20].encode())  # half the id
        f.flush()
        half = _held(root)
        assert half == _fresh(root)
        f.write(NEW[20:].encode() + b"\r\neth0")
    assert _held(root) == _fresh(root) == {"10.0.0.7": NEW}
