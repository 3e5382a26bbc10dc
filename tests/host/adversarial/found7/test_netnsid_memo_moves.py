"""Adversarial, with real namespaces: the veth reader's remembered netnsids (keyed on the node namespace's
cookie, the netns file's path, namespace inode and unique mount id) against what moves between two scans:
a veth's peer moved into another pod's namespace, a netns mount moved to another path and another namespace
mounted at the old one, a namespace whose last veth went (the id stays assigned), a pod namespace gone with
its file left. Each scan must equal one that remembers nothing."""

from __future__ import annotations

import os

from tests.host.test_netnsid_memo import Node, _add_pod, _fresh, _make_netns, _run, _veths, node

__all__ = ["node"]


def test_a_peer_moved_into_another_namespace(node: Node) -> None:
    _veths(node)
    _run("nsenter", f"--net={node.netns_dir / 'pod-0'}", "ip", "link", "set", "eth0", "name", "eth9", "netns",
         node.netns_dir / "pod-2")
    remembered = _veths(node)
    assert remembered == _fresh(node)
    by_name = {v.name: v for v in remembered[0]}
    assert by_name["veth-0"].peer_netns_path == str(node.netns_dir / "pod-2")


def test_a_mount_moved_away_and_another_namespace_mounted_at_its_path(node: Node) -> None:
    _veths(node)
    pod0, moved = node.netns_dir / "pod-0", node.netns_dir / "pod-0-moved"
    moved.touch()
    _run("mount", "--move", pod0, moved)  # the same mount (same unique id), at another path
    _make_netns(pod0)  # a new namespace at the old path, no veth into it yet
    remembered = _veths(node)
    assert remembered == _fresh(node)
    by_name = {v.name: v for v in remembered[0]}
    assert by_name["veth-0"].peer_netns_path == str(moved)
    assert by_name["veth-0"].peer_ns_inode == os.stat(moved).st_ino
    _run("nsenter", f"--net={node.node_ns}", "ip", "link", "add", "veth-x", "type", "veth", "peer", "name",
         "eth0", "netns", pod0)
    remembered = _veths(node)
    assert remembered == _fresh(node)
    assert {v.name: v for v in remembered[0]}["veth-x"].peer_netns_path == str(pod0)


def test_a_namespace_gone_with_its_file_left(node: Node) -> None:
    _veths(node)
    pod1 = node.netns_dir / "pod-1"
    _run("umount", pod1)  # the file stays, empty: not a namespace any more
    _add_pod(node, "pod-7", "veth-7")
    for _ in range(100):
        remembered = _veths(node)
        if "veth-1" not in {v.name for v in remembered[0]}:
            break
    assert remembered == _fresh(node)
    assert all(v.peer_netns_path != str(pod1) for v in remembered[0])


def test_a_namespace_whose_veth_went_keeps_its_id_and_a_new_veth_resolves(node: Node) -> None:
    _veths(node)
    _run("nsenter", f"--net={node.node_ns}", "ip", "link", "del", "veth-2")
    _veths(node)
    _run("nsenter", f"--net={node.node_ns}", "ip", "link", "add", "veth-2b", "type", "veth", "peer", "name",
         "eth0", "netns", node.netns_dir / "pod-2")
    remembered = _veths(node)
    assert remembered == _fresh(node)
    assert {v.name: v for v in remembered[0]}["veth-2b"].peer_netns_path == str(node.netns_dir / "pod-2")
