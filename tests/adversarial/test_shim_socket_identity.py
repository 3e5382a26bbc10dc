"""A shim is this runtime's only when its `-address`, resolved in the shim's own root and mount namespace
(`/proc/<pid>/root`), is the endpoint's socket file. The same path can name another containerd's socket
there; an absolute symlink on the way must resolve in the shim's root, not in nodegc's; and when the file
cannot be compared, the shim still protects its directories but is never stopped.

A fake proc root stands in for /proc: `<pid>/cmdline` a shim's, `<pid>/root` a directory tree."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.inventory.cri.leftovers import scan_leftovers, serves_socket, socket_file


def _shim(proc: Path, pid: int, sid: str, address: str) -> None:
    d = proc / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join([b"/usr/bin/containerd-shim-runc-v2", b"-namespace", b"k8s.io",
                                             b"-id", sid.encode(), b"-address", address.encode(), b""]))
    (d / "stat").write_text(f"{pid} (containerd-shim) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n")


@pytest.fixture
def sockets(tmp_path: Path) -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    yield held
    for s in held:
        s.close()


def _bind(path: Path, held: list[socket.socket]) -> None:
    """Bound at a short path (AF_UNIX takes 107 bytes), then moved into place: the same socket file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    short = Path(tempfile.mkdtemp(prefix="s", dir=path.anchor + "tmp")) / "s"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(short))
    held.append(s)
    os.replace(short, path)
    short.parent.rmdir()


def test_the_socket_file_decides_not_the_path(tmp_path: Path, sockets: list[socket.socket]) -> None:
    proc = tmp_path / "proc"
    endpoint = tmp_path / "a" / "run" / "containerd.sock"
    _bind(endpoint, sockets)
    address = str(endpoint)

    def seen(pid: int, path: Path) -> Path:
        return proc / str(pid) / "root" / path.relative_to("/")

    ours, theirs, linked, blind = "a" * 64, "b" * 64, "c" * 64, "d" * 64
    for pid, sid in ((101, ours), (102, theirs), (103, linked), (104, blind)):
        _shim(proc, pid, sid, address)
    # 101: its root shows the endpoint's very socket at the address (a hard link is the same file).
    seen(101, endpoint).parent.mkdir(parents=True)
    os.link(endpoint, seen(101, endpoint))
    # 102: another socket at the same path: another containerd's shim.
    _bind(seen(102, endpoint), sockets)
    # 103: <tmp>/a in its root is an absolute symlink to <tmp>/b, which in its root holds another socket;
    # in this process's root <tmp>/b leads back to <tmp>/a, the endpoint's: resolved in the caller's root,
    # the link would name the endpoint.
    seen(103, tmp_path).mkdir(parents=True)
    seen(103, tmp_path / "a").symlink_to(tmp_path / "b")
    _bind(seen(103, tmp_path / "b" / "run" / "containerd.sock"), sockets)
    (tmp_path / "b").symlink_to(tmp_path / "a")
    # 104: no root to look into.
    want = socket_file(address)
    assert want is not None
    assert [serves_socket(proc, pid, address, want) for pid in (101, 102, 103, 104)] == [True, False, False, None]
    assert os.stat(seen(103, endpoint)).st_ino == endpoint.stat().st_ino  # what a plain stat would conclude
    assert serves_socket(proc, 101, address.lstrip("/"), want) is None  # not absolute

    found = {x.id: x for x in scan_leftovers(tmp_path / "state", mounts=(), proc_root=proc, socket=address)
             if x.what == "shim"}
    assert set(found) == {ours, blind}
    assert found[ours].problem is None
    problem = found[blind].problem
    assert problem is not None and "cannot be told" in problem
