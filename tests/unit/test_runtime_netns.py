"""Netns files under containerd's state dir in the planner: keyed apart from /run/netns's, owned by the
sandbox whose netns path names them, else by the one container whose reservations hold their addresses."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.inventory.netns import scan_runtime_netns
from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory, Kind, NetnsEntry, VethLink
from nodegc.planning.owners import entry_key, netns_key
from nodegc.reclaim.netns import remove_netns
from tests.unit.factories import NOW, OLD, cache, pod, reservation
from tests.unit.test_runtime_ownership import run, sandbox, view

STATE = "/run/containerd/io.containerd.grpc.v1.cri/netns"
SEEN = "/host/run/containerd/io.containerd.grpc.v1.cri/netns"
"""The same directory as nodegc sees it from a container (another mount path)."""


def state_netns(name: str, *, mounted: bool = True, addresses: tuple[str, ...] = (), inode: int = 7) -> NetnsEntry:
    return NetnsEntry(name=name, path=f"{SEEN}/{name}", mounted=mounted, ns_inode=inode if mounted else None,
                      file_inode=3, mtime=OLD, addresses=addresses, addresses_read=mounted, runtime_dir=True)


def peer(path: str, name: str = "veth0") -> VethLink:
    return VethLink(name=name, index=5, mac=None, master="cni0", peer_netnsid=1, peer_ifindex=2, peer_netns_path=path)


def test_keys() -> None:
    assert netns_key(f"{STATE}/cni-1") == netns_key(f"{SEEN}/cni-1") == "io.containerd.grpc.v1.cri/netns/cni-1"
    assert netns_key("/var/run/netns/cni-1") == netns_key("/run/netns/cni-1") == "cni-1"
    assert entry_key(state_netns("cni-1")) == netns_key(f"{STATE}/cni-1")
    plain = NetnsEntry(name="cni-1", path="/somewhere/else/cni-1", mounted=True)
    assert entry_key(plain) == "cni-1"  # a file of the configured netns dir, whatever that dir is called


def test_a_ready_sandboxs_state_dir_netns_is_in_use_and_not_its_namesake() -> None:
    """One name in both directories: the runtime's word is about its own file only, and a dead pod's
    cache entry naming /run/netns/<name> says nothing about the state dir's."""
    ours = state_netns("cni-1", addresses=("10.0.0.3",))
    namesake = NetnsEntry(name="cni-1", path="/run/netns/cni-1", mounted=True, ns_inode=8, file_inode=4, mtime=OLD,
                          addresses=(), addresses_read=False)
    inv = Inventory(taken_at=NOW, netns=(ours, namesake), veths=(peer(ours.path), peer(namesake.path, "veth1")),
                    ip_reservations=(reservation("10.0.0.3", "live"), reservation("10.0.0.9", "dead")),
                    cni_cache=(cache("live", uid="u1", ip="10.0.0.3"),
                               cache("dead", uid="gone", ip="10.0.0.9", netns="/run/netns/cni-1")),
                    runtime=view(sandbox("live", "u1", ips=("10.0.0.3",), netns_path=f"{STATE}/cni-1")))
    out = run(inv, pod("web", "u1", ip="10.0.0.3"))
    assert out[(Kind.NETNS, ours.path)].cls is FindingClass.IN_USE
    assert out[(Kind.NETNS, ours.path)].owner.container_id == "live"
    assert out[(Kind.VETH, "veth0")].cls is FindingClass.IN_USE
    assert out[(Kind.NETNS, namesake.path)].cls is FindingClass.LEAKED_NETNS
    assert out[(Kind.NETNS, namesake.path)].owner.container_id == "dead"
    assert out[(Kind.VETH, "veth1")].cls is FindingClass.DANGLING_VETH


def test_a_plain_file_a_ready_sandbox_names_is_its_sandboxs() -> None:
    plain = state_netns("cni-1", mounted=False)
    inv = Inventory(taken_at=NOW, netns=(plain,), ip_reservations=(reservation("10.0.0.3", "live"),),
                    cni_cache=(cache("live", uid="u1", ip="10.0.0.3"),),
                    runtime=view(sandbox("live", "u1", ips=("10.0.0.3",), netns_path=f"{STATE}/cni-1")))
    without = run(dataclasses.replace(inv, runtime=None), pod("web", "u1", ip="10.0.0.3"))
    assert without[(Kind.NETNS, plain.path)].cls is FindingClass.LEAKED_NETNS  # today: an empty leftover file
    assert run(inv, pod("web", "u1", ip="10.0.0.3"))[(Kind.NETNS, plain.path)].cls is FindingClass.IN_USE


def test_a_ready_sandbox_decides_over_a_cache_entry_of_another_id() -> None:
    ours = state_netns("cni-1", addresses=("10.0.0.3",))
    inv = Inventory(taken_at=NOW, netns=(ours,), veths=(peer(ours.path),),
                    ip_reservations=(reservation("10.0.0.3", "live"),),
                    cni_cache=(cache("live", uid="u1", ip="10.0.0.3"),
                               cache("fake", uid="gone", ip="10.0.0.3", netns=f"{STATE}/cni-1")),
                    runtime=view(sandbox("live", "u1", ips=("10.0.0.3",), netns_path=f"{STATE}/cni-1")))
    out = run(inv, pod("web", "u1", ip="10.0.0.3"))
    ns = out[(Kind.NETNS, ours.path)]
    assert ns.cls is FindingClass.IN_USE and ns.owner.container_id == "live" and ns.owner.uid == "u1"
    assert out[(Kind.VETH, "veth0")].cls is FindingClass.IN_USE
    assert not out[(Kind.CNI_CACHE, "/cni/results/k8s-pod-network-fake-eth0")].cls.is_residue


def lost_sandbox(addresses: tuple[str, ...], **kwargs: object) -> Inventory:
    """containerd lost a sandbox: its netns (no cache entry names it: containerd's libcni writes none)
    still holds its address, reserved by the lost id; the live pod runs in a new sandbox."""
    lost = state_netns("cni-old", addresses=addresses)
    live = state_netns("cni-new", addresses=("10.0.0.3",), inode=8)
    inv = Inventory(taken_at=NOW, netns=(lost, live), veths=(peer(lost.path), peer(live.path, "veth1")),
                    ip_reservations=(reservation("10.0.0.2", "old"), reservation("10.0.0.3", "new")),
                    cni_cache=(dataclasses.replace(cache("old", uid="u1", ip="10.0.0.2"), netns=None),
                               dataclasses.replace(cache("new", uid="u1", ip="10.0.0.3"), netns=None)),
                    runtime=view(sandbox("new", "u1", ips=("10.0.0.3",), netns_path=f"{STATE}/cni-new")))
    return dataclasses.replace(inv, **kwargs)  # type: ignore[arg-type]


def test_a_lost_sandboxs_netns_is_tied_through_the_reservation_of_its_address() -> None:
    live = pod("web", "u1", ip="10.0.0.3")
    out = run(lost_sandbox(("10.0.0.2",)), live)
    lost = out[(Kind.NETNS, f"{SEEN}/cni-old")]
    assert lost.cls is FindingClass.LEAKED_NETNS and lost.sandbox == "old" and lost.owner.container_id == "old"
    assert out[(Kind.VETH, "veth0")].cls is FindingClass.DANGLING_VETH
    assert out[(Kind.NETNS, f"{SEEN}/cni-new")].cls is FindingClass.IN_USE
    assert out[(Kind.VETH, "veth1")].cls is FindingClass.IN_USE


def test_a_lost_sandboxs_netns_is_kept_without_full_evidence() -> None:
    live = pod("web", "u1", ip="10.0.0.3")
    # An address no reservation explains (another IPAM's, or added by hand): tied to nobody.
    assert run(lost_sandbox(("10.0.0.2", "192.168.7.7")), live)[(Kind.NETNS, f"{SEEN}/cni-old")].cls \
        is FindingClass.UNKNOWN
    # Addresses not read (the namespace could not be entered): tied to nobody.
    unread = lost_sandbox(("10.0.0.2",))
    unread = dataclasses.replace(unread, netns=(dataclasses.replace(unread.netns[0], addresses=(),
                                                                    addresses_read=False), unread.netns[1]))
    assert run(unread, live)[(Kind.NETNS, f"{SEEN}/cni-old")].cls is FindingClass.UNKNOWN
    # The address is a live pod's (the API still shows the old one): never taken.
    assert not run(lost_sandbox(("10.0.0.2",)), pod("web", "u1", ip="10.0.0.2"))[
        (Kind.NETNS, f"{SEEN}/cni-old")].cls.is_residue
    # The runtime unreachable, or its list missing a running pod's sandbox: nothing concluded.
    down = lost_sandbox(("10.0.0.2",), runtime=view(reachable=False))
    assert run(down, live)[(Kind.NETNS, f"{SEEN}/cni-old")].cls is FindingClass.UNKNOWN
    incomplete = lost_sandbox(("10.0.0.2",))
    other = pod("db", "u2", ip="10.0.0.4")
    assert not run(incomplete, live, other)[(Kind.NETNS, f"{SEEN}/cni-old")].cls.is_residue
    # Two reservations (two networks' ranges) hold the address: which container is not known.
    two = lost_sandbox(("10.0.0.2",))
    two = dataclasses.replace(two, ip_reservations=(*two.ip_reservations,
                                                    reservation("10.0.0.2", "other", network="net2")))
    assert run(two, live)[(Kind.NETNS, f"{SEEN}/cni-old")].cls is FindingClass.UNKNOWN


# -- the files: read and removed only inside the configured state dir, never through a symlink -------------


def _state(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    (state / "io.containerd.grpc.v1.cri" / "netns").mkdir(parents=True)
    return state


def test_scan_reads_the_state_dirs_netns_folder_only(tmp_path: Path) -> None:
    state = _state(tmp_path)
    folder = state / "io.containerd.grpc.v1.cri" / "netns"
    (folder / "cni-1").write_bytes(b"")
    (folder / "link").symlink_to(folder / "cni-1")
    (folder / ".hidden").write_bytes(b"")
    entries, problems = scan_runtime_netns(state, ())
    assert [(e.name, e.runtime_dir, e.mounted) for e in entries] == [("cni-1", True, False)]
    assert {Path(p.path).name: p.reason for p in problems} == {
        "link": "symlink in netns dir, not followed", ".hidden": "hidden name in netns dir"}
    # The same directory configured as --netns-dir is read once, as the netns dir.
    assert scan_runtime_netns(state, (), netns_dir=folder) == ((), ())
    # Absent: nothing, and no problem (containerd keeps its netns in /run/netns).
    assert scan_runtime_netns(tmp_path / "none", ()) == ((), ())


def test_scan_does_not_follow_a_symlink_below_the_state_dir(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "netns"
    elsewhere.mkdir(parents=True)
    (elsewhere / "cni-1").write_bytes(b"")
    state = tmp_path / "state"
    state.mkdir()
    (state / "io.containerd.grpc.v1.cri").symlink_to(elsewhere.parent)
    entries, problems = scan_runtime_netns(state, ())
    assert entries == () and len(problems) == 1 and "is a symlink, not followed" in problems[0].reason
    assert problems[0].kind is Kind.NETNS


def test_removal_is_bounded_to_the_state_dirs_netns_folder(tmp_path: Path) -> None:
    state = _state(tmp_path)
    folder = state / "io.containerd.grpc.v1.cri" / "netns"
    leftover = folder / "cni-1"
    leftover.write_bytes(b"")
    (entry,), _ = scan_runtime_netns(state, ())
    assert not remove_netns(entry, netns_dir=tmp_path / "netns").ok  # no state dir configured: refused
    assert leftover.exists()
    other = tmp_path / "other"
    (other / "io.containerd.grpc.v1.cri" / "netns").mkdir(parents=True)
    assert not remove_netns(entry, netns_dir=tmp_path / "netns", runtime_state_dir=other).ok
    outside = dataclasses.replace(entry, path=str(tmp_path / "cni-1"))
    (tmp_path / "cni-1").write_bytes(b"")
    assert not remove_netns(outside, runtime_state_dir=state).ok and (tmp_path / "cni-1").exists()
    # The folder swapped for a symlink after the scan: refused, nothing below it is touched.
    moved = tmp_path / "moved"
    folder.rename(moved)
    folder.symlink_to(moved)
    refused = remove_netns(entry, runtime_state_dir=state)
    assert not refused.ok and "symlink" in refused.detail and (moved / "cni-1").exists()
    folder.unlink()
    moved.rename(folder)
    assert remove_netns(entry, runtime_state_dir=state).ok and not leftover.exists()
    # A /run/netns entry never passes as the state dir's, nor the other way round.
    plain = dataclasses.replace(entry, runtime_dir=False)
    leftover.write_bytes(b"")
    assert not remove_netns(plain, netns_dir=tmp_path / "netns", runtime_state_dir=state).ok


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=3),
       st.lists(st.tuples(st.none() | st.integers(0, 2), st.sets(st.sampled_from(
           ["10.0.1.0", "10.0.1.1", "10.0.1.2", "10.0.2.0", "10.0.2.1", "192.168.9.9"]), max_size=3)),
           min_size=1, max_size=4),
       st.booleans())
def test_nothing_a_ready_sandbox_names_or_holds_is_residue(ready: list[bool],
                                                           spaces: list[tuple[int | None, set[str]]],
                                                           in_api: bool) -> None:
    """Random namespaces under the state dir, named by a sandbox or not, holding any mix of READY and NotReady
    sandboxes' addresses, dead ids' addresses and addresses nobody reserved: none that a READY sandbox names,
    or that holds a READY sandbox's address, is ever residue, nor its veth."""
    sbs = [sandbox(f"s{i}", f"u{i}", ready=r, ips=(f"10.0.1.{i}",),
                   netns_path=next((f"{STATE}/n{j}" for j, (owner, _) in enumerate(spaces) if owner == i), None))
           for i, r in enumerate(ready)]
    entries = tuple(state_netns(f"n{j}", addresses=tuple(sorted(addrs)), inode=100 + j)
                    for j, (_, addrs) in enumerate(spaces))
    veths = tuple(peer(e.path, f"veth{j}") for j, e in enumerate(entries))
    reservations = [reservation(f"10.0.1.{i}", f"s{i}") for i in range(len(ready))]
    reservations += [reservation("10.0.2.0", "dead0"), reservation("10.0.2.1", "dead1")]
    caches = [dataclasses.replace(cache(f"s{i}", uid=f"u{i}", ip=f"10.0.1.{i}"), netns=None) for i in range(len(ready))]
    inv = Inventory(taken_at=NOW, netns=entries, veths=veths, ip_reservations=tuple(reservations),
                    cni_cache=tuple(caches), runtime=view(*sbs))
    pods = [pod(f"p{i}", f"u{i}", ip=f"10.0.1.{i}") for i in range(len(ready)) if in_api]
    out = run(inv, *pods)
    ready_ips = {f"10.0.1.{i}" for i, r in enumerate(ready) if r}
    ready_named = {sb.netns_path for sb in sbs if sb.ready}
    for j, (_, addrs) in enumerate(spaces):
        if f"{STATE}/n{j}" in ready_named or addrs & ready_ips:
            for key in ((Kind.NETNS, entries[j].path), (Kind.VETH, f"veth{j}")):
                assert not out[key].cls.is_residue, (out[key], sbs)


def test_a_netns_dir_that_is_the_state_dirs_keys_as_the_runtime_reports_it() -> None:
    """`--netns-dir <state>/io.containerd.grpc.v1.cri/netns` (set by hand before nodegc read the state dir):
    its files are still the ones the runtime's netns paths name."""
    entry = NetnsEntry(name="cni-1", path=f"{SEEN}/cni-1", mounted=True, ns_inode=7, file_inode=3, mtime=OLD,
                       addresses=("10.0.0.3",), addresses_read=True)
    assert entry_key(entry) == netns_key(f"{STATE}/cni-1")
    inv = Inventory(taken_at=NOW, netns=(entry,), runtime=view(sandbox("live", "u1", ready=True,
                                                                       netns_path=f"{STATE}/cni-1")))
    f = run(inv, pod("web", "u1", ip="10.0.0.3"))[(Kind.NETNS, entry.path)]
    assert f.cls is FindingClass.IN_USE and f.owner.container_id == "live"


def test_cni_del_enters_the_cached_namespace_never_a_namesake(tmp_path: Path) -> None:
    from nodegc.reclaim.cni_del import netns_for_del
    from nodegc.settings import Roots

    state = _state(tmp_path)
    folder = state / "io.containerd.grpc.v1.cri" / "netns"
    plain = tmp_path / "netns"
    plain.mkdir()
    for d in (folder, plain):
        (d / "cni-1").write_bytes(b"")
    roots = Roots(netns_dir=plain)
    cached_state = dataclasses.replace(cache("x", uid="u"), netns=f"{STATE}/cni-1")
    cached_plain = dataclasses.replace(cache("x", uid="u"), netns="/var/run/netns/cni-1")
    assert netns_for_del(cached_plain, roots) == str(plain / "cni-1")
    assert netns_for_del(cached_state, roots) == ""  # no state dir configured: not the /run/netns namesake
    assert netns_for_del(cached_state, roots, state) == str(folder / "cni-1")
    assert netns_for_del(cached_plain, roots, state) == str(plain / "cni-1")
    assert netns_for_del(cached_state, Roots(netns_dir=folder)) == str(folder / "cni-1")
    assert netns_for_del(cached_plain, Roots(netns_dir=folder)) == ""
