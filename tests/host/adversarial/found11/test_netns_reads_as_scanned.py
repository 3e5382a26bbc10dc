"""Adversarial, with real namespaces: the address read of a namespace (the last link of a namespace without a
cache entry to a pod, and the check before anything acts inside one) opened whatever its path named at
read time, following symlinks: a container able to write the netns dir could point the read at another
pod's namespace (a planted symlink, a namespace bind-mounted again at the path, a folder of the runtime's
state dir swapped for a symlink), and the namespace the scan recorded would be judged by that one's
addresses. Now the path is opened below its configured directory without following a symlink, and what
it opens must be the namespace inode and device the scan recorded; anything else is a read problem with a
reason (the namespace is then "unreadable": nothing acts inside it), never a crash and never the other
namespace's addresses. Both reads: through netnsids from the node's namespace, and by entering."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from nodegc.hostio.mountinfo import read_mounts
from nodegc.hostio.netlink import NetnsFile, NetnsFileChanged, open_netns
from nodegc.inventory.netns import (
    NetnsReadError,
    netns_file,
    read_netns_addresses_many,
    scan_netns,
    scan_runtime_netns,
)
from nodegc.inventory.scanning import _read_addresses
from nodegc.model.resources import NetnsEntry
from nodegc.planning.owners import CRI_NETNS_SUBDIR
from tests.host.test_netns_addresses_by_netnsid import Node, _new_ns, node

__all__ = ["node"]


def _scanned(directory: Path) -> dict[str, NetnsEntry]:
    mounts, _ = read_mounts(Path("/proc"))
    entries, _ = scan_netns(directory, mounts)
    return {e.name: e for e in entries}


def _reads(node: Node, entry: NetnsEntry) -> list[tuple[str, ...] | NetnsReadError]:
    """The read through netnsids and the read by entering, of the file as scanned."""
    return [read_netns_addresses_many([netns_file(entry)], node_ns=node.ns)[0],
            read_netns_addresses_many([netns_file(entry)], by_netnsid=False)[0]]


def _refused(reads: list[tuple[str, ...] | NetnsReadError], why: str) -> None:
    for read in reads:
        assert isinstance(read, NetnsReadError), read
        assert why in str(read), str(read)


def test_the_namespace_as_scanned_is_read(node: Node) -> None:
    node.pod("orphan", "10.73.0.2/24")
    entry = _scanned(node.dir)["orphan"]
    assert entry.mounted and entry.ns_inode is not None and entry.ns_dev is not None
    assert _reads(node, entry) == [("10.73.0.2",), ("10.73.0.2",)]


def test_a_symlink_planted_at_the_path_is_not_followed(node: Node) -> None:
    orphan = node.pod("orphan", "10.73.0.2/24")
    live = node.pod("live", "10.73.0.3/24")  # a live pod's namespace
    entry = _scanned(node.dir)["orphan"]
    subprocess.run(["umount", str(orphan)], capture_output=True, timeout=30, check=True)
    node.made.remove(orphan)
    orphan.unlink()
    orphan.symlink_to(live)
    _refused(_reads(node, entry), "symlink")


def test_another_namespace_mounted_at_the_path_is_not_read(node: Node) -> None:
    orphan = node.pod("orphan", "10.73.0.2/24")
    entry = _scanned(node.dir)["orphan"]
    node.replace(orphan, "10.73.0.9/24")  # unmounted, removed, another namespace mounted there
    _refused(_reads(node, entry), "not the namespace the scan recorded")
    live = node.pod("live", "10.73.0.3/24")
    other = _scanned(node.dir)["orphan"]
    subprocess.run(["umount", str(orphan)], capture_output=True, timeout=30, check=True)
    subprocess.run(["mount", "--bind", str(live), str(orphan)], capture_output=True, timeout=30, check=True)
    _refused(_reads(node, other), "not the namespace the scan recorded")  # a bind of a live pod's namespace


def test_a_runtime_folder_swapped_for_a_symlink_is_not_followed(node: Node, tmp_path: Path) -> None:
    state = tmp_path / "state"
    real = state / CRI_NETNS_SUBDIR
    real.mkdir(parents=True)
    target = real / "cni-1"
    _new_ns(target)
    node.made.append(target)
    mounts, _ = read_mounts(Path("/proc"))
    [entry], _ = scan_runtime_netns(state, mounts)
    assert netns_file(entry).depth == 3
    assert read_netns_addresses_many([netns_file(entry)], by_netnsid=False) == [()]
    # The runtime's folder moved aside and a symlink put in its place, to a folder with the same namespace:
    # the identity would match, the path would not be the one configured.
    moved = state / "io.containerd.grpc.v1.cri" / "elsewhere"
    os.rename(real, moved)
    real.symlink_to(moved)
    node.made[node.made.index(target)] = moved / "cni-1"
    _refused(_reads(node, entry), "symlink")


def test_a_mismatch_is_a_read_problem_of_the_scan_not_a_crash(node: Node) -> None:
    orphan = node.pod("orphan", "10.73.0.2/24")
    kept = node.pod("kept", "10.73.0.4/24")
    scanned = _scanned(node.dir)
    node.replace(orphan, "10.73.0.9/24")
    entries = (scanned["kept"], scanned["orphan"])
    out, problems = _read_addresses(entries, [0, 1], os.fspath(node.ns))
    assert out[0].addresses_read and out[0].addresses == ("10.73.0.4",)
    assert not out[1].addresses_read and out[1].addresses == ()
    [problem] = problems
    assert problem.path == str(orphan) and "not the namespace the scan recorded" in problem.reason
    assert kept.exists()


def test_a_fifo_or_a_directory_at_the_path_is_refused_at_open(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dir").mkdir()
    with pytest.raises(NetnsFileChanged):
        open_netns(NetnsFile(fifo, inode=1, dev=1))  # opened without blocking, then not the namespace
    with pytest.raises(NetnsFileChanged):
        open_netns(NetnsFile(tmp_path / "dir", inode=1, dev=1))
    with pytest.raises(NetnsFileChanged):
        open_netns(NetnsFile(Path("/"), depth=1))
