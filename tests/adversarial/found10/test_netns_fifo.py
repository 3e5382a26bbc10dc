"""A netns file swapped for a FIFO (or a symlink to one) after the scan listed it: the address read opened the
path in the caller's thread, blocking until a writer came (the agent's cycle hung for good; entering each
namespace instead timed out after 10 s and left its thread blocked), and the veth reader's open of the file
blocked the same way. A FIFO opened without blocking is no namespace: its read fails at once, with a reason."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

from nodegc.inventory import links
from nodegc.inventory.netns import NetnsReadError, read_netns_addresses_many
from nodegc.model.resources import NetnsEntry, ReadProblem


def _unblocked(path: Path, fn: Callable[[], object]) -> object:
    """fn() in a thread, which must be done within a few seconds; a reader blocked on the FIFO is let go."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(5)
    hung = thread.is_alive()
    for _ in range(50):  # let every blocked open of the FIFO go, so no thread stays behind
        if not thread.is_alive():
            break
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(0.1)
    assert not hung, f"{fn} blocked on the FIFO {path}"
    return out[0]


def test_a_fifo_at_a_netns_path_fails_the_address_read_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "cni-0000"
    os.mkfifo(fifo)
    link = tmp_path / "cni-0001"
    link.symlink_to(fifo)
    for by_netnsid in (True, False):
        read = _unblocked(fifo, lambda: read_netns_addresses_many([fifo, link], by_netnsid=by_netnsid))  # noqa: B023
        assert isinstance(read, list) and len(read) == 2
        assert all(isinstance(r, NetnsReadError) for r in read), read


def test_a_fifo_at_a_netns_path_is_no_namespace_for_the_veth_reader(tmp_path: Path) -> None:
    fifo = tmp_path / "cni-0000"
    os.mkfifo(fifo)
    entry = NetnsEntry(name=fifo.name, path=str(fifo), mounted=True, ns_inode=4026531840)
    got = _unblocked(fifo, lambda: links._open_netns(entry))
    assert isinstance(got, ReadProblem) and "changed" in got.reason
