"""Network executors on a real sandbox node: the real plugins leave the residue, the executors remove exactly
it, and every resource of a live pod stays byte for byte what it was."""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import json
import os
from pathlib import Path
from typing import Any

import pytest

import nodegc.reclaim.rules as rules_module
from nodegc.inventory.scanning import scan_node
from nodegc.model.resources import Inventory
from nodegc.reclaim.network import cni_del, delete_veth, release_ip, remove_netns, remove_rules
from nodegc.reclaim.outcomes import Outcome
from nodegc.reclaim.veth import delete_veths
from nodegc.sandbox.node import NETWORK_NAME, SandboxNode, SandboxPod

OTHER_CID = "f" * 64


def records(inv: Inventory, pod: SandboxPod) -> dict[str, tuple[Any, ...]]:
    cid = pod.container_id
    return {
        "ip": tuple(r for r in inv.ip_reservations if r.container_id == cid),
        "cache": tuple(e for e in inv.cni_cache if e.container_id == cid),
        "netns": tuple(n for n in inv.netns if n.path == str(pod.netns_path)),
        "veth": tuple(v for v in inv.veths if pod.host_veth and v.name == pod.host_veth),
        "chains": tuple(c for c in inv.chains if c.container_id == cid),
        "rules": tuple(r for r in inv.hostport_rules if r.container_id == cid),
    }


def scan(node: SandboxNode) -> Inventory:
    inv = scan_node(node.roots)
    assert inv.problems == ()
    return inv


def reclaim_all(node: SandboxNode, found: dict[str, tuple[Any, ...]]) -> list[Outcome]:
    """Everything but the cache entry, in the order an engine would go: rules, IP, veth, then the netns."""
    roots = node.roots
    outcomes = list(remove_rules(found["chains"], found["rules"], net_ns=roots.net_ns).values())
    outcomes += [release_ip(r, roots=roots) for r in found["ip"]]
    outcomes += [delete_veth(v, net_ns=roots.net_ns) for v in found["veth"]]
    outcomes += [remove_netns(n) for n in found["netns"]]
    return outcomes


def test_cni_del_then_leftovers_reclaims_everything_and_keeps_live_pods(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    live = [node.add_pod("web-0", host_port=8080), node.add_pod("web-1")]
    no_del = node.add_pod("gone-no-del", host_port=9090)
    netns_gone = node.add_pod("gone-netns", host_port=9091)
    node.delete_without_cni_del(no_del)
    node.delete_netns_only(netns_gone)
    before = scan(node)
    live_before = [records(before, p) for p in live]
    leaked = [no_del, netns_gone]
    assert all(records(before, p)["cache"] and records(before, p)["ip"] for p in leaked)

    for pod in leaked:
        (entry,) = records(before, pod)["cache"]
        out = cni_del(entry, roots=node.roots)
        assert out.ok and not out.already_gone, out
        assert cni_del(entry, roots=node.roots).already_gone

    middle = scan(node)
    for pod in leaked:
        found = records(middle, pod)
        assert found["ip"] == found["cache"] == found["rules"] == ()
        assert all(o.ok for o in reclaim_all(node, found))

    after = scan(node)
    for pod in leaked:
        assert all(v == () for v in records(after, pod).values()), records(after, pod)
        assert not node.link_exists(pod.host_veth or "none")
        assert not os.path.lexists(pod.netns_path)
    assert [records(after, p) for p in live] == live_before
    # and a second pass over the very first records finds everything gone
    for pod in leaked:
        again = reclaim_all(node, records(before, pod))
        assert again and all(o.ok and o.already_gone for o in again), again


def test_direct_executors_without_cni_del(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    live = [node.add_pod("web-0", host_port=8080), node.add_pod("web-1")]
    gone = node.add_pod("gone", host_port=9090)
    node.delete_without_cni_del(gone)
    before = scan(node)
    live_before = [records(before, p) for p in live]
    save_before = node.node_exec("iptables-save")
    found = records(before, gone)
    assert found["ip"] and found["veth"] and found["netns"] and len(found["chains"]) == 2 and found["rules"]

    outcomes = reclaim_all(node, found)
    assert outcomes and all(o.ok and not o.already_gone for o in outcomes), outcomes

    after = scan(node)
    left = records(after, gone)
    assert left["cache"] == found["cache"]  # nothing but CNI DEL removes a cache entry
    assert all(v == () for k, v in left.items() if k != "cache"), left
    assert [records(after, p) for p in live] == live_before
    save_after = node.node_exec("iptables-save")
    kept = [ln for ln in save_before.splitlines() if not ln.startswith("#") and gone.container_id not in ln
            and not any(c.name in ln for c in found["chains"])]
    assert kept == [ln for ln in save_after.splitlines() if not ln.startswith("#")]

    again = reclaim_all(node, found)
    assert all(o.ok and o.already_gone for o in again), again


def test_release_ip_compares_container_and_inode(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    pod = node.add_pod("gone")
    node.delete_without_cni_del(pod)
    (res,) = records(scan(node), pod)["ip"]
    path = Path(res.path)

    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # same inode, another holder
    os.write(fd, f"{OTHER_CID}\r\neth0".encode())
    os.close(fd)
    out = release_ip(res, roots=node.roots)
    assert out.identity_changed and not out.ok
    assert path.read_text().startswith(OTHER_CID)

    tmp = path.with_name("tmp")  # same content as scanned, but another file
    tmp.write_text(f"{res.container_id}\r\neth0")
    os.replace(tmp, path)
    assert release_ip(res, roots=node.roots).identity_changed
    assert path.exists()

    (fresh,) = records(scan(node), pod)["ip"]
    assert release_ip(fresh, roots=node.roots).ok
    assert not path.exists()
    assert release_ip(fresh, roots=node.roots).already_gone
    assert (path.parent / "lock").exists()


def test_reused_ip_survives_cni_del_of_old_sandbox(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    old = node.add_pod("db-0", host_port=8080)
    node.delete_netns_only(old)
    old_records = records(scan(node), old)
    (old_entry,) = old_records["cache"]
    (old_res,) = old_records["ip"]
    # The address was released (say by an earlier partial teardown) and host-local hands it out again:
    # its next pick is the address after the last reserved one.
    Path(old_res.path).unlink()
    prev = ipaddress.ip_address(old_res.ip) - 1
    (node.ipam_dir / NETWORK_NAME / "last_reserved_ip.0").write_text(str(prev))
    new = node.add_pod("db-0", host_port=8080)
    assert new.ip == old.ip
    before = scan(node)
    new_before = records(before, new)
    assert new_before["ip"][0].ip == old_res.ip

    assert cni_del(old_entry, roots=node.roots).ok
    middle = scan(node)
    assert records(middle, new) == new_before
    leftover = records(middle, old)
    assert leftover["cache"] == leftover["ip"] == ()
    # bridge skips its masquerade chain when the netns is gone: removed by rule, the new one stays
    outcomes = remove_rules(leftover["chains"], leftover["rules"], net_ns=node.roots.net_ns)
    assert outcomes and all(o.ok for o in outcomes.values())
    after = scan(node)
    assert all(v == () for v in records(after, old).values())
    assert records(after, new) == new_before


def test_cni_del_refuses_a_replaced_cache_file(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    pod = node.add_pod("gone")
    node.delete_without_cni_del(pod)
    (entry,) = records(scan(node), pod)["cache"]
    path = Path(entry.path)
    tmp = path.with_name("tmp")
    tmp.write_bytes(path.read_bytes())
    os.replace(tmp, path)
    out = cni_del(entry, roots=node.roots)
    assert out.identity_changed
    assert path.exists() and records(scan(node), pod)["ip"]


def test_cni_del_with_a_single_network_config(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    live = node.add_pod("web-0")
    pod = node.add_pod("gone")
    node.delete_without_cni_del(pod)
    # the runtime cached a single network config (a .conf), not a conflist
    path = node.cache_path(pod)
    doc = json.loads(path.read_bytes())
    single = dict(node.conflist["plugins"][0], name=NETWORK_NAME, cniVersion="1.0.0")
    doc["config"] = base64.b64encode(json.dumps(single).encode()).decode()
    path.write_text(json.dumps(doc))
    before = scan(node)
    live_before = records(before, live)
    (entry,) = records(before, pod)["cache"]
    assert entry.config_json is not None and "plugins" not in json.loads(entry.config_json)

    # a cache entry whose config changed after the scan is refused
    stale = dataclasses.replace(entry, config_json=json.dumps(node.conflist))
    assert cni_del(stale, roots=node.roots).identity_changed

    assert cni_del(entry, roots=node.roots).ok
    left = records(scan(node), pod)
    assert left["ip"] == left["cache"] == left["veth"] == left["chains"] == ()
    assert records(scan(node), live) == live_before


def test_ipv6_chain_found_by_family(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    chain = "CNI-0123456789abcdef01234567"
    comment = f'name: "{NETWORK_NAME}" id: "{OTHER_CID}"'
    node.node_exec("ip6tables", "-t", "nat", "-N", chain)
    node.node_exec("ip6tables", "-t", "nat", "-A", chain, "-d", "fd00::/64", "-m", "comment",
                   "--comment", comment, "-j", "ACCEPT")
    node.node_exec("ip6tables", "-t", "nat", "-A", "POSTROUTING", "-s", "fd00::5/128", "-m", "comment",
                   "--comment", comment, "-j", chain)
    live = node.add_pod("web-0")
    before = scan(node)
    live_before = records(before, live)
    (v6,) = [c for c in before.chains if c.name == chain]
    assert v6.container_id == OTHER_CID and v6.jumps

    out = remove_rules([v6], [], net_ns=node.roots.net_ns)
    assert out[chain].ok and not out[chain].already_gone
    assert chain not in node.node_exec("ip6tables-save")
    assert records(scan(node), live) == live_before
    assert remove_rules([v6], [], net_ns=node.roots.net_ns)[chain].already_gone
    # the owner comment changed: nothing is removed
    node.node_exec("ip6tables", "-t", "nat", "-N", chain)
    node.node_exec("ip6tables", "-t", "nat", "-A", chain, "-m", "comment", "--comment",
                   f'name: "{NETWORK_NAME}" id: "{"e" * 64}"', "-j", "ACCEPT")
    assert remove_rules([v6], [], net_ns=node.roots.net_ns)[chain].identity_changed
    assert chain in node.node_exec("ip6tables-save")


def test_netns_leftover_and_identity_checks(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    pod = node.add_pod("gone")
    node.delete_without_cni_del(pod)
    leftover = node.netns_dir / "cni-leftover"
    leftover.touch()
    stuffed = node.netns_dir / "cni-stuffed"
    stuffed.touch()
    inv = scan(node)
    by_path = {n.path: n for n in inv.netns}
    stuffed.write_text("x")
    assert remove_netns(by_path[str(stuffed)]).identity_changed
    assert remove_netns(by_path[str(leftover)]).ok and not leftover.exists()
    (ns,) = records(inv, pod)["netns"]
    assert remove_netns(dataclasses.replace(ns, ns_inode=1)).identity_changed
    (veth,) = records(inv, pod)["veth"]
    assert delete_veth(dataclasses.replace(veth, name="other0"), net_ns=node.roots.net_ns).identity_changed
    assert node.link_exists(veth.name)
    assert delete_veth(veth, net_ns=node.roots.net_ns).ok
    assert remove_netns(ns).ok
    assert remove_netns(ns).already_gone
    assert delete_veth(veth, net_ns=node.roots.net_ns).already_gone


def test_failed_batch_is_isolated_per_chain(
    sandbox_node: SandboxNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = sandbox_node
    pods = [node.add_pod(f"gone-{i}") for i in range(3)]
    for p in pods:
        node.delete_without_cni_del(p)
    inv = scan(node)
    chains = [c for p in pods for c in records(inv, p)["chains"]]
    bad = chains[1].name
    real = rules_module._restore

    def flaky(fam: Any, text: str, *, net_ns: Path | None, deadline: float) -> str | None:
        if bad in text:
            return "injected failure"
        return real(fam, text, net_ns=net_ns, deadline=deadline)

    monkeypatch.setattr(rules_module, "_restore", flaky)
    out = remove_rules(chains, [], net_ns=node.roots.net_ns)
    assert not out[bad].ok and "injected" in out[bad].detail
    assert all(out[c.name].ok and not out[c.name].already_gone for c in chains if c.name != bad)
    left = {c.name for c in scan(node).chains}
    assert bad in left and not left & {c.name for c in chains if c.name != bad}


def test_veths_deleted_together_each_one_checked(sandbox_node: SandboxNode) -> None:
    node = sandbox_node
    pods = [node.add_pod(f"gone-{i}") for i in range(3)]
    for p in pods:
        node.delete_without_cni_del(p)
    veths = [v for p in pods for v in records(scan(node), p)["veth"]]
    forged = dataclasses.replace(veths[1], mac="02:00:00:00:00:01")
    out = delete_veths([veths[0], forged, veths[2]], net_ns=node.roots.net_ns)
    assert out[0].ok and not out[0].already_gone and out[2].ok and not out[2].already_gone, out
    assert out[1].identity_changed, out
    assert node.link_exists(veths[1].name)
    assert not node.link_exists(veths[0].name) and not node.link_exists(veths[2].name)
    again = delete_veths(veths, net_ns=node.roots.net_ns)
    assert again[0].already_gone and again[1].ok and not again[1].already_gone and again[2].already_gone
