"""A big generated scan: hundreds of sandboxes in every shape the rules tell apart, from one seed.

For tests that compare a fast path of the planner with a straightforward one (or with what it decided
before): the same seed always gives the same inventory and pod list.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import timedelta

from nodegc.model.ipranges import AddressRange, HostLocalRange
from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import (
    CNICacheEntry,
    FirewallRule,
    HostportRule,
    Inventory,
    IPReservation,
    IptablesChain,
    Kind,
    NetnsEntry,
    PodDir,
    PodLogDir,
    ReadProblem,
    VethLink,
    VolumeDir,
)
from nodegc.model.runtime import RuntimeContainer, RuntimeSandbox, RuntimeView
from nodegc.planning.owners import cni_chain_name
from tests.unit.factories import NET, NOW, OLD

OTHER_NET = "secondary"
PHASES = ("Running", "Running", "Running", "Pending", "Succeeded", "Failed", "Unknown", None)


@dataclass(frozen=True)
class BigScan:
    inventory: Inventory
    desired: DesiredState
    unread_netns: tuple[str, ...]
    """Paths of mounted namespaces whose addresses the scan did not read (a cache entry names them)."""


def _ip(i: int) -> str:
    return f"10.244.{i // 250}.{i % 250 + 2}"


def big_scan(seed: int, *, sandboxes: int = 400, runtime: bool = False) -> BigScan:  # noqa: PLR0915
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    pods: list[Pod] = []
    reservations: list[IPReservation] = []
    caches: list[CNICacheEntry] = []
    nss: list[NetnsEntry] = []
    links: list[VethLink] = []
    chains: list[IptablesChain] = []
    rules: list[HostportRule] = []
    firewall: list[FirewallRule] = []
    dirs: list[PodDir] = []
    logs: list[PodLogDir] = []
    boxes: list[RuntimeSandbox] = []
    containers: list[RuntimeContainer] = []
    problems: list[ReadProblem] = []
    unread: list[str] = []
    young = NOW.timestamp() - 1
    for i in range(sandboxes):
        uid = f"uid-{i:04d}"
        cid = f"{i:04d}" + "c" * 60
        name = f"pod-{i}"
        # Some addresses are reused by a later sandbox, some pods show another sandbox's address.
        ip = _ip(rnd.randrange(sandboxes) if rnd.random() < 0.08 else i)
        mtime = young if rnd.random() < 0.1 else OLD
        net = OTHER_NET if rnd.random() < 0.05 else NET
        if rnd.random() < 0.7:
            phase = rnd.choice(PHASES)
            shown = ip if rnd.random() < 0.85 else _ip(rnd.randrange(sandboxes))
            pod_ips = (shown,) if phase not in ("Pending",) or rnd.random() < 0.3 else ()
            pods.append(Pod(uid=uid, namespace="default", name=name, node_name="n1", phase=phase,
                            pod_ips=pod_ips, host_network=rnd.random() < 0.03))
        if rnd.random() < 0.8:
            reservations.append(IPReservation(network=net, ip=ip, path=f"/cni/networks/{net}/{ip}", inode=i,
                                              mtime=mtime, container_id=cid if rnd.random() < 0.97 else None,
                                              ifname="eth0"))
        ns_name = f"cni-{i:04d}"
        if rnd.random() < 0.05:
            ns_name = f"cni-{rnd.randrange(sandboxes):04d}"  # two sandboxes name one namespace
        ns_path = f"/run/netns/{ns_name}"
        if rnd.random() < 0.75:
            with_uid = rnd.random() < 0.85
            caches.append(CNICacheEntry(path=f"/cni/results/{net}-{cid}-eth0", inode=10_000 + i, mtime=mtime,
                                        network=net, container_id=cid, ifname="eth0",
                                        netns=f"/var{ns_path}" if rnd.random() < 0.5 else ns_path,
                                        pod_namespace="default", pod_name=name,
                                        pod_uid=uid if with_uid else None, ips=(ip,)))
        elif rnd.random() < 0.05:
            problems.append(ReadProblem(Kind.CNI_CACHE, f"/cni/results/{net}-{cid}-eth0", "truncated"))
        if rnd.random() < 0.7 and not any(n.name == ns_name for n in nss):
            mounted = rnd.random() < 0.9
            named = any(c.netns and c.netns.endswith("/" + ns_name) for c in caches)
            read = mounted and not named
            addresses = (ip,) if read and rnd.random() < 0.8 else ()
            nss.append(NetnsEntry(name=ns_name, path=ns_path, mounted=mounted, ns_inode=20_000 + i if mounted else None,
                                  file_inode=30_000 + i, mtime=mtime, addresses=addresses, addresses_read=read))
            if mounted and not read:
                unread.append(ns_path)
            if mounted:
                links.append(VethLink(name=f"veth{i:04d}", index=100 + i, mac=None, master="cni0", peer_netnsid=i,
                                      peer_ifindex=2, peer_netns_path=ns_path if rnd.random() < 0.95 else None))
        if rnd.random() < 0.6:
            chain = cni_chain_name(net, cid)
            comment = f'-m comment --comment "name: \\"{net}\\" id: \\"{cid}\\""'
            chains.append(IptablesChain("nat", chain, net, cid if rnd.random() < 0.97 else None,
                                        rules=(f"-A {chain} -d 10.244.0.0/16 {comment} -j ACCEPT",),
                                        jumps=(f"-A POSTROUTING -s {ip}/32 {comment} -j {chain}",)))
            if rnd.random() < 0.3:
                dn = cni_chain_name(net, cid, "DN-")
                rules.append(HostportRule("nat", "CNI-HOSTPORT-DNAT",
                                          f"-A CNI-HOSTPORT-DNAT -p tcp --dport {8000 + i} {comment} -j {dn}",
                                          net, cid, dn))
        if rnd.random() < 0.4:
            firewall.append(FirewallRule("filter", "CNI-FORWARD", f"-A CNI-FORWARD -d {ip}/32 -j ACCEPT", ip, 0))
        if rnd.random() < 0.6:
            path = f"/kubelet/pods/{uid}"
            vol = VolumeDir(pod_uid=uid, plugin="kubernetes.io~empty-dir", name="data",
                            path=f"{path}/volumes/kubernetes.io~empty-dir/data",
                            mount_id=1000 + i if rnd.random() < 0.7 else None, fs_type="tmpfs")
            dirs.append(PodDir(uid=uid, path=path, inode=40_000 + i, mtime=mtime, volumes=(vol,),
                               container_names=("app",), mounts_below=(1000 + i,) if vol.mount_id else ()))
        if rnd.random() < 0.3:
            logs.append(PodLogDir(namespace="default", name=name, uid=uid, path=f"/var/log/pods/default_{name}_{uid}",
                                  inode=50_000 + i, mtime=mtime))
        if runtime and rnd.random() < 0.6:
            created = NOW - timedelta(seconds=1 if mtime == young else 3600)
            ready = rnd.random() < 0.6
            boxes.append(RuntimeSandbox(id=cid, pod_uid=uid, pod_name=name, pod_namespace="default", attempt=0,
                                        ready=ready, created_at=created, ips=(ip,) if ready else (),
                                        netns_path=ns_path, status_read=True))
            if not ready and rnd.random() < 0.1:
                containers.append(RuntimeContainer(id=f"k{cid}", sandbox_id=cid, name="app", state="running"))
    if runtime and seed % 2 == 0:
        # A complete list (a sandbox for every running pod), so that the runtime's word may conclude.
        held = {sb.pod_uid for sb in boxes}
        for p in pods:
            if p.phase == "Running" and not p.host_network and p.uid not in held:
                boxes.append(RuntimeSandbox(id=f"x{p.uid}", pod_uid=p.uid, pod_name=p.name, pod_namespace="default",
                                            attempt=1, ready=True, created_at=NOW - timedelta(seconds=3600),
                                            ips=p.pod_ips, netns_path=None, status_read=True))
    view = RuntimeView(endpoint="unix:///run/containerd/containerd.sock", reachable=True, runtime_name="containerd",
                       runtime_version="1.7", sandboxes=tuple(boxes), containers=tuple(containers),
                       read_at=NOW) if runtime else None
    inventory = Inventory(
        taken_at=NOW, pod_dirs=tuple(dirs), ip_reservations=tuple(reservations), cni_cache=tuple(caches),
        netns=tuple(nss), veths=tuple(links), chains=tuple(chains), hostport_rules=tuple(rules),
        pod_logs=tuple(logs), problems=tuple(problems), firewall_rules=tuple(firewall), runtime=view,
        ip_ranges=(HostLocalRange(network=NET, source="/etc/cni/net.d/10-net.conflist",
                                  ranges=(AddressRange("10.244.0.0/16", "10.244.0.2", "10.244.255.254",
                                                       "10.244.0.1", 65533),)),),
    )
    return BigScan(inventory, DesiredState(node="n1", pods=tuple(pods), source="test", fetched_at=NOW),
                   tuple(unread))


def with_addresses_read(scan: BigScan, seed: int) -> Inventory:
    """The scan's inventory after its unread namespaces were read, as detect does: most hold their own
    sandbox's address, some another pod's or one nobody lists, some none, some could not be read."""
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    unread = set(scan.unread_netns)
    own = {c.netns.replace("/var/run/", "/run/"): c.ips for c in scan.inventory.cni_cache if c.netns}
    netns: list[NetnsEntry] = []
    problems = list(scan.inventory.problems)
    for ns in scan.inventory.netns:
        if ns.path not in unread:
            netns.append(ns)
            continue
        roll = rnd.random()
        if roll < 0.1:
            problems.append(ReadProblem(Kind.NETNS, ns.path, "cannot read addresses: gone"))
            netns.append(ns)
            continue
        if roll < 0.7:
            addresses = own.get(ns.path, ())
        elif roll < 0.85:
            addresses = (_ip(rnd.randrange(400)),)
        elif roll < 0.95:
            addresses = ("192.168.99.1",)
        else:
            addresses = ()
        netns.append(replace(ns, addresses=addresses, addresses_read=True))
    return replace(scan.inventory, netns=tuple(netns), problems=tuple(problems))


def adversarial_scan(seed: int, *, sandboxes: int = 300, runtime: bool = False) -> BigScan:
    """`big_scan` made harder for the indexes and the reuse of a second pass: pods re-created under their
    old name with a new UID (and their old sandbox's address), addresses claimed twice, namespaces named by
    two sandboxes (a cache entry of another container id naming an existing one), one namespace name both
    in the netns dir and in containerd's state dir (two keys), and more log directories of one UID."""
    scan = big_scan(seed, sandboxes=sandboxes, runtime=runtime)
    rnd = random.Random(seed + 1000)  # noqa: S311 (a test scenario, not a secret)
    inv, desired = scan.inventory, scan.desired
    pods = list(desired.pods)
    for pod in desired.pods:
        roll = rnd.random()
        if roll < 0.15:  # re-created: same name, new UID, the old sandbox's address
            pods.append(replace(pod, uid=pod.uid + "-new", phase=rnd.choice(("Running", "Pending")),
                                pod_ips=pod.pod_ips or (_ip(rnd.randrange(sandboxes)),)))
        elif roll < 0.25:  # another pod claims its address
            pods.append(replace(pod, uid=pod.uid + "-dup", name=pod.name + "-dup", phase="Running"))
    caches = list(inv.cni_cache)
    for entry in inv.cni_cache:
        if rnd.random() < 0.15 and entry.netns:
            cid = "e" + entry.container_id[1:]
            caches.append(replace(entry, path=f"/cni/results/{entry.network}-{cid}-eth0", container_id=cid,
                                  pod_uid=rnd.choice((entry.pod_uid, None, f"{entry.pod_uid}-new")),
                                  ips=(_ip(rnd.randrange(sandboxes)),)))
    nss = list(inv.netns)
    unread = list(scan.unread_netns)
    for ns in inv.netns:
        if rnd.random() < 0.15:
            path = f"/run/containerd/io.containerd.grpc.v1.cri/netns/{ns.name}"
            nss.append(replace(ns, path=path, runtime_dir=True, addresses=(), addresses_read=False))
            if ns.mounted:
                unread.append(path)
        elif ns.mounted and ns.path not in unread and rnd.random() < 0.3:
            unread.append(ns.path)  # read again: a new record of a namespace read already
    logs = list(inv.pod_logs)
    for log in inv.pod_logs:
        if rnd.random() < 0.2:
            logs.append(replace(log, name=log.name + "-old", path=log.path + "-old", inode=log.inode + 1))
    inventory = replace(inv, cni_cache=tuple(caches), netns=tuple(nss), pod_logs=tuple(logs))
    return BigScan(inventory, replace(desired, pods=tuple(pods)), tuple(unread))
