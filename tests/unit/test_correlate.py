from __future__ import annotations

from dataclasses import replace

from nodegc.model.findings import Finding, FindingClass
from nodegc.model.pods import OwnerState
from nodegc.model.resources import HostportRule, Inventory, IptablesChain, Kind, PodLogDir
from nodegc.planning.correlate import correlate
from nodegc.planning.owners import cni_chain_name
from tests.unit.factories import NET, NOW, cache, desired, netns, pod, pod_dir, reservation, veth


def classes(findings: tuple[Finding, ...], kind: Kind) -> list[FindingClass]:
    return [f.cls for f in findings if f.kind is kind]


def run(inv: Inventory, *pods: object) -> tuple[Finding, ...]:
    return correlate(inv, desired(*pods), now=NOW)  # type: ignore[arg-type]


def attachment(cid: str, uid: str | None, ip: str) -> Inventory:
    return Inventory(taken_at=NOW, ip_reservations=(reservation(ip, cid),),
                     cni_cache=(cache(cid, uid=uid, ip=ip),), netns=(netns(cid),), veths=(veth(cid),),
                     chains=(IptablesChain("nat", cni_chain_name(NET, cid), NET, cid),),
                     hostport_rules=(HostportRule("nat", "CNI-HOSTPORT-DNAT", "-A ...", NET, cid, "CNI-DN-x"),))


def test_live_pod_attachment_is_in_use() -> None:
    f = run(attachment("c1", "u1", "10.0.0.2"), pod("p", "u1", ip="10.0.0.2"))
    assert {x.cls for x in f} == {FindingClass.IN_USE}
    assert len(f) == 6


def test_deleted_pod_attachment_is_residue() -> None:
    f = run(attachment("c1", "u1", "10.0.0.2"), pod("other", "u2", ip="10.0.0.9"))
    assert classes(f, Kind.IP_RESERVATION) == [FindingClass.LEAKED_IP]
    assert classes(f, Kind.CNI_CACHE) == [FindingClass.STALE_CNI_CACHE]
    assert classes(f, Kind.NETNS) == [FindingClass.LEAKED_NETNS]
    assert classes(f, Kind.VETH) == [FindingClass.DANGLING_VETH]
    assert classes(f, Kind.IPTABLES_CHAIN) == [FindingClass.LEAKED_CHAIN]
    assert classes(f, Kind.HOSTPORT_RULE) == [FindingClass.LEAKED_HOSTPORT_RULE]
    assert all(x.owner.uid == "u1" and x.owner_state is OwnerState.ABSENT for x in f)


def test_terminal_pod_keeps_dir_but_loses_ip_and_volumes() -> None:
    inv = replace(attachment("c1", "u1", "10.0.0.2"), pod_dirs=(pod_dir("u1", mounted=True),))
    f = run(inv, pod("p", "u1", phase="Succeeded", ip="10.0.0.2"))
    assert classes(f, Kind.POD_DIR) == [FindingClass.IN_USE]
    assert classes(f, Kind.VOLUME_MOUNT) == [FindingClass.ORPHANED_VOLUME_MOUNT]
    assert classes(f, Kind.IP_RESERVATION) == [FindingClass.LEAKED_IP]


def test_recreated_pod_same_name_new_uid_keeps_new_resources() -> None:
    old = attachment("c-old", "u-old", "10.0.0.2")
    new = attachment("c-new", "u-new", "10.0.0.3")
    inv = Inventory(taken_at=NOW, ip_reservations=old.ip_reservations + new.ip_reservations,
                    cni_cache=old.cni_cache + new.cni_cache, netns=old.netns + new.netns,
                    pod_dirs=(pod_dir("u-old"), pod_dir("u-new", mounted=True)))
    f = run(inv, pod("p", "u-new", ip="10.0.0.3"))
    by_owner = {(x.kind, x.owner.uid): x.cls for x in f}
    assert by_owner[(Kind.IP_RESERVATION, "u-new")] is FindingClass.IN_USE
    assert by_owner[(Kind.NETNS, "u-new")] is FindingClass.IN_USE
    assert by_owner[(Kind.VOLUME_MOUNT, "u-new")] is FindingClass.IN_USE
    assert by_owner[(Kind.IP_RESERVATION, "u-old")] is FindingClass.LEAKED_IP
    assert by_owner[(Kind.POD_DIR, "u-old")] is FindingClass.ORPHANED_POD_DIR


def test_ip_reused_by_new_pod_is_conflict_not_leak() -> None:
    # The reservation still names the dead sandbox while a live pod's status claims the same IP.
    f = run(attachment("c1", "u1", "10.0.0.2"), pod("new", "u2", ip="10.0.0.2"))
    assert classes(f, Kind.IP_RESERVATION) == [FindingClass.CONFLICT]


def test_two_live_pods_one_ip_is_conflict() -> None:
    inv = Inventory(taken_at=NOW, ip_reservations=(reservation("10.0.0.2", "c1"),))
    f = run(inv, pod("a", "u1", ip="10.0.0.2"), pod("b", "u2", ip="10.0.0.2"))
    assert classes(f, Kind.IP_RESERVATION) == [FindingClass.CONFLICT]


def test_young_and_pending_are_protected() -> None:
    young = Inventory(taken_at=NOW, ip_reservations=(reservation("10.0.0.2", "c1", mtime=NOW.timestamp() - 5),))
    assert classes(run(young), Kind.IP_RESERVATION) == [FindingClass.PROTECTED]
    # No cache entry and a pending pod without IP yet: the reservation may be its.
    inv = Inventory(taken_at=NOW, ip_reservations=(reservation("10.0.0.2", "c1"),))
    assert classes(run(inv, pod("p", "u9", phase="Pending")), Kind.IP_RESERVATION) == [FindingClass.PROTECTED]


def test_pending_pod_named_by_cache_is_in_use() -> None:
    f = run(attachment("c1", "u1", "10.0.0.2"), pod("p", "u1", phase="Pending"))
    assert {x.cls for x in f} == {FindingClass.IN_USE}


def test_reservation_without_cache_follows_status() -> None:
    # The running pod is accounted for by its own cache entry, so c2's reservation is nobody's.
    inv = Inventory(taken_at=NOW, ip_reservations=(reservation("10.0.0.2", "c1"), reservation("10.0.0.3", "c2")),
                    cni_cache=(cache("c1", uid="u1", ip="10.0.0.2"),))
    f = run(inv, pod("p", "u1", ip="10.0.0.2"))
    assert classes(f, Kind.IP_RESERVATION) == [FindingClass.IN_USE, FindingClass.LEAKED_IP]


def test_reservation_without_cache_kept_while_a_running_pod_is_unaccounted() -> None:
    # No cache entry leads to the running pod: c2 may be its sandbox being re-created, or its entry lost.
    inv = Inventory(taken_at=NOW, ip_reservations=(reservation("10.0.0.2", "c1"), reservation("10.0.0.3", "c2")))
    f = run(inv, pod("p", "u1", ip="10.0.0.2"))
    assert classes(f, Kind.IP_RESERVATION) == [FindingClass.IN_USE, FindingClass.PROTECTED]


def test_secondary_network_without_cache_is_unknown() -> None:
    inv = Inventory(taken_at=NOW, ip_reservations=(reservation("10.0.0.2", "c1"),
                                                   reservation("192.168.5.4", "c9", network="storage")),
                    cni_cache=(cache("c1", uid="u1", ip="10.0.0.2"),))
    f = run(inv, pod("p", "u1", ip="10.0.0.2"))
    assert classes(f, Kind.IP_RESERVATION) == [FindingClass.IN_USE, FindingClass.UNKNOWN]


def test_netns_without_cache_by_addresses() -> None:
    inv = Inventory(taken_at=NOW, netns=(netns("a", addresses=("10.0.0.2",)), netns("b", addresses=("10.0.0.7",)),
                                         netns("c", addresses=("10.0.0.8",)), netns("d", mounted=False)))
    f = run(inv, pod("p", "u1", ip="10.0.0.2"), pod("t", "u2", phase="Failed", ip="10.0.0.7"))
    assert classes(f, Kind.NETNS) == [FindingClass.IN_USE, FindingClass.LEAKED_NETNS, FindingClass.UNKNOWN,
                                      FindingClass.LEAKED_NETNS]


def test_cache_without_uid_ties_by_name_only_with_status() -> None:
    entry = cache("c1", uid=None, name="p", ip="10.0.0.2")
    inv = Inventory(taken_at=NOW, cni_cache=(entry,))
    assert classes(run(inv, pod("p", "u1", ip="10.0.0.2")), Kind.CNI_CACHE) == [FindingClass.IN_USE]
    # Same name, other IP: maybe a newer incarnation, maybe not. Never residue.
    assert classes(run(inv, pod("p", "u1", ip="10.0.0.5")), Kind.CNI_CACHE) == [FindingClass.UNKNOWN]
    assert classes(run(inv), Kind.CNI_CACHE) == [FindingClass.STALE_CNI_CACHE]


def test_veth_with_unresolved_peer_is_unknown() -> None:
    link = replace(veth("x"), peer_netns_path=None)
    f = run(Inventory(taken_at=NOW, veths=(link,)))
    assert classes(f, Kind.VETH) == [FindingClass.UNKNOWN]


def test_chain_without_comment_or_owner_is_unknown() -> None:
    inv = Inventory(taken_at=NOW, chains=(IptablesChain("nat", "CNI-abc", None, None),
                                          IptablesChain("nat", "CNI-def", NET, "c7")))
    assert classes(run(inv), Kind.IPTABLES_CHAIN) == [FindingClass.UNKNOWN, FindingClass.UNKNOWN]


def test_exclusive_volume_in_two_live_pods_is_conflict() -> None:
    from nodegc.model.resources import Mount, PodDir, VolumeDir

    def block_dir(uid: str, mount_id: int) -> PodDir:
        path = f"/kubelet/pods/{uid}/volumes/kubernetes.io~csi/pv1/mount"
        vol = VolumeDir(uid, "kubernetes.io~csi", "pv1", path, mount_id=mount_id, fs_type="ext4")
        return PodDir(uid=uid, path=f"/kubelet/pods/{uid}", inode=1, mtime=0, volumes=(vol,))

    mounts = tuple(Mount(i, 1, "8:16", "/", f"/m{i}", "rw", "ext4", "/dev/sdb") for i in (1, 2))
    inv = Inventory(taken_at=NOW, mounts=mounts, pod_dirs=(block_dir("u1", 1), block_dir("u2", 2)))
    f = run(inv, pod("a", "u1", ip="10.0.0.2"), pod("b", "u2", ip="10.0.0.3"))
    assert classes(f, Kind.VOLUME_MOUNT) == [FindingClass.CONFLICT, FindingClass.CONFLICT]


def test_chain_name_matches_bridge_plugin() -> None:
    # Observed from the bridge plugin: network k8s-pod-network, container abc123.
    assert cni_chain_name("k8s-pod-network", "abc123") == "CNI-168710c2ae5f690fed46841c"


def test_volumes_of_a_pod_newer_than_the_pod_list_are_protected() -> None:
    young = pod_dir("u-new", mounted=True, mtime=NOW.timestamp() - 2)
    f = run(Inventory(taken_at=NOW, pod_dirs=(young,)))
    assert classes(f, Kind.POD_DIR) == [FindingClass.PROTECTED]
    assert classes(f, Kind.VOLUME_MOUNT) == [FindingClass.PROTECTED]


def test_absent_pod_directory_named_by_its_first_log_directory() -> None:
    """An absent owner known by UID only takes the namespace/name of its first log directory (terminate GETs
    that name); another UID's log directory names nothing."""
    logs = (PodLogDir("other", "x", "u9", "/var/log/pods/other_x_u9", 1, 0.0),
            PodLogDir("ns1", "first", "u1", "/var/log/pods/ns1_first_u1", 2, 0.0),
            PodLogDir("ns1", "second", "u1", "/var/log/pods/ns1_second_u1", 3, 0.0))
    inv = Inventory(taken_at=NOW, pod_dirs=(pod_dir("u1"), pod_dir("u2")), pod_logs=logs)
    f = {x.id: x for x in run(inv, pod("live", "u3", ip="10.0.0.9")) if x.kind is Kind.POD_DIR}
    named = f["/kubelet/pods/u1"]
    assert (named.owner.namespace, named.owner.name) == ("ns1", "first")
    assert named.evidence[-1] == "its log directory names ns1/first"
    unnamed = f["/kubelet/pods/u2"]
    assert (unnamed.owner.namespace, unnamed.owner.name) == (None, None)
