"""Literal inventories and pods for planning tests: small constructors with safe defaults."""

from __future__ import annotations

from datetime import UTC, datetime

from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import CNICacheEntry, IPReservation, NetnsEntry, PodDir, VethLink, VolumeDir

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
OLD = NOW.timestamp() - 3600
NET = "k8s-pod-network"


def pod(name: str, uid: str, *, phase: str = "Running", ip: str | None = None, ns: str = "default") -> Pod:
    return Pod(uid=uid, namespace=ns, name=name, node_name="n1", phase=phase, pod_ips=(ip,) if ip else ())


def desired(*pods: Pod) -> DesiredState:
    return DesiredState(node="n1", pods=tuple(pods), source="test", fetched_at=NOW)


def reservation(ip: str, cid: str | None, *, mtime: float = OLD, network: str = NET) -> IPReservation:
    return IPReservation(network=network, ip=ip, path=f"/cni/networks/{network}/{ip}", inode=1, mtime=mtime,
                         container_id=cid, ifname="eth0")


def cache(cid: str, *, uid: str | None, name: str = "p", ip: str = "10.0.0.2", netns: str | None = None,
          mtime: float = OLD) -> CNICacheEntry:
    return CNICacheEntry(path=f"/cni/results/{NET}-{cid}-eth0", inode=2, mtime=mtime, network=NET,
                         container_id=cid, ifname="eth0", netns=netns or f"/var/run/netns/cni-{cid}",
                         pod_namespace="default", pod_name=name, pod_uid=uid, ips=(ip,))


def netns(cid: str, *, mounted: bool = True, addresses: tuple[str, ...] = (), mtime: float = OLD) -> NetnsEntry:
    return NetnsEntry(name=f"cni-{cid}", path=f"/run/netns/cni-{cid}", mounted=mounted, ns_inode=7 if mounted else None,
                      mtime=mtime, addresses=addresses, addresses_read=mounted)


def veth(cid: str, name: str = "veth0") -> VethLink:
    return VethLink(name=name, index=5, mac=None, master="cni0", peer_netnsid=1, peer_ifindex=2,
                    peer_netns_path=f"/run/netns/cni-{cid}")


def pod_dir(uid: str, *, mounted: bool = False, mtime: float = OLD) -> PodDir:
    path = f"/kubelet/pods/{uid}"
    vol = VolumeDir(pod_uid=uid, plugin="kubernetes.io~empty-dir", name="data",
                    path=f"{path}/volumes/kubernetes.io~empty-dir/data",
                    mount_id=100 if mounted else None, fs_type="tmpfs" if mounted else None)
    return PodDir(uid=uid, path=path, inode=3, mtime=mtime, volumes=(vol,),
                  mounts_below=(100,) if mounted else ())
