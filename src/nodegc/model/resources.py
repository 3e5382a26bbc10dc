"""What the inventory readers see on a node.

Every record is frozen and carries the identity evidence later phases compare against
(inode, mount id, container id), so a re-read can prove the resource is still the same one. The records
have slots: a scan of 1,000 pods holds some 20,000 of them, and the scan keeps most from one cycle to the
next (a slotted record is about 50 bytes smaller).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from nodegc.model.ipranges import HostLocalRange
from nodegc.model.runtime import RuntimeView


class Kind(StrEnum):
    POD_DIR = "pod_dir"
    VOLUME_MOUNT = "volume_mount"
    IP_RESERVATION = "ip_reservation"
    CNI_CACHE = "cni_cache"
    NETNS = "netns"
    VETH = "veth"
    IPTABLES_CHAIN = "iptables_chain"
    HOSTPORT_RULE = "hostport_rule"
    SANDBOX = "sandbox"
    RUNTIME_LEFTOVER = "runtime_leftover"
    POD_LOG_DIR = "pod_log_dir"
    FIREWALL_RULE = "firewall_rule"
    STATIC_POD = "static_pod"
    """A manifest of the kubelet's static pod directory: read as evidence, never reclaimed."""


UNREADABLE = "unreadable"
DUMP_BOUND = "dump_bound"
"""A namespace's netlink dump went past its bound (`hostio.netlink.DUMP_MAX_MESSAGES`, `DUMP_MAX_BYTES`): one a
pod can fill on purpose, and what it would have shown stays kept."""
UNTOLD_PROCESS_CAUSE = "untold_process"
"""A process whose command line could not be read in time (its memory map held locked): any process may be a
shim, so no runtime leftover is judged while it lasts, and a pod can hold that on purpose."""
READ_CAUSES = (UNREADABLE, DUMP_BOUND, UNTOLD_PROCESS_CAUSE)
"""Why a read failed, as a metric label (`nodegc_scan_read_problems`): the causes a pod can bring about on
purpose to keep what it hides unjudged, each of its own, and every other failure."""


@dataclass(frozen=True, slots=True)
class ReadProblem:
    """Something a reader could not read; the scan records it and goes on."""

    kind: Kind
    path: str
    reason: str
    cause: str = UNREADABLE
    """One of READ_CAUSES."""


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of /proc/<pid>/mountinfo, octal escapes already decoded."""

    mount_id: int
    parent_id: int
    device: str
    root: str
    mount_point: str
    options: str
    fs_type: str
    source: str


@dataclass(frozen=True, slots=True)
class VolumeDir:
    """A volume path `pods/<uid>/volumes/<plugin>/<name>` (or a subpath bind) and its mount state."""

    pod_uid: str
    plugin: str
    name: str
    path: str
    mount_id: int | None = None
    fs_type: str | None = None
    source: str | None = None
    subpath: bool = False

    @property
    def mounted(self) -> bool:
        return self.mount_id is not None


@dataclass(frozen=True, slots=True)
class PodDir:
    """`<kubelet root>/pods/<uid>` and what is inside it."""

    uid: str
    path: str
    inode: int
    mtime: float
    volumes: tuple[VolumeDir, ...] = ()
    container_names: tuple[str, ...] = ()
    mounts_below: tuple[int, ...] = ()
    """Mount ids of every mount anywhere below the directory (volumes, subpaths, plugins...)."""


@dataclass(frozen=True, slots=True)
class IPReservation:
    """A host-local IPAM file `<cni data>/networks/<net>/<ip>`."""

    network: str
    ip: str
    path: str
    inode: int
    mtime: float
    container_id: str | None
    ifname: str | None
    legacy_format: bool = False


@dataclass(frozen=True, slots=True)
class CNICacheEntry:
    """A libcni result cache file `<cni data>/results/<net>-<cid>-<ifname>` (kind cniCacheV1)."""

    path: str
    inode: int
    mtime: float
    network: str
    container_id: str
    ifname: str
    netns: str | None = None
    pod_namespace: str | None = None
    pod_name: str | None = None
    pod_uid: str | None = None
    infra_container_id: str | None = None
    ips: tuple[str, ...] = ()
    cni_args: tuple[tuple[str, str], ...] = ()
    config_json: str | None = None
    """The cached network configuration (decoded from base64), kept verbatim for CNI DEL."""
    capability_args_json: str | None = None


@dataclass(frozen=True, slots=True)
class NetnsEntry:
    """A file in the netns directory (or the runtime's, under its state dir); `ns_inode` is the namespace inode
    when it is still bind-mounted."""

    name: str
    path: str
    mounted: bool
    ns_inode: int | None = None
    file_inode: int | None = None
    mtime: float | None = None
    ns_dev: int | None = None
    """The device of the namespace inode (nsfs) when it is still bind-mounted: with `ns_inode`, what a
    later open of the path must find (`hostio.netlink.NetnsFile`)."""
    addresses: tuple[str, ...] = ()
    """Addresses configured inside the namespace (read only when it is mounted)."""
    addresses_read: bool = False
    """Whether `addresses` was read: an unread namespace holds unknown addresses, not none."""
    runtime_dir: bool = False
    """A file of the runtime's state dir (`<state>/io.containerd.grpc.v1.cri/netns`), not of the netns dir."""
    runtime_keyed: bool = False
    """A file of a netns dir that is the runtime's state-dir netns folder seen at another path (mounted
    elsewhere): keyed as the runtime names its files, though read (and removed) as the netns dir's."""
    tasks: int | None = None
    """Tasks (threads of any process) the process table shows inside the namespace; None: not counted.
    Counted only for a mounted namespace nothing ties to a sandbox, a cache entry or a pod (the proof that
    it is dead, `planning.runtime`), and for the READY sandboxes' namespaces (the witness that the table
    is the node's)."""


@dataclass(frozen=True, slots=True)
class VethLink:
    """A host-side veth; the peer namespace is resolved from the link's netnsid when possible."""

    name: str
    index: int
    mac: str | None
    master: str | None
    peer_netnsid: int | None
    peer_ifindex: int | None
    peer_netns_path: str | None = None
    peer_ns_inode: int | None = None


@dataclass(frozen=True, slots=True)
class IptablesChain:
    """A chain created by a CNI plugin (CNI-<hash>, CNI-DN-<hash>) with its rules and the jumps into it."""

    table: str
    name: str
    network: str | None
    container_id: str | None
    rules: tuple[str, ...] = ()
    jumps: tuple[str, ...] = ()
    """Rules in other chains that jump to this chain (e.g. POSTROUTING or CNI-HOSTPORT-DNAT)."""


@dataclass(frozen=True, slots=True)
class HostportRule:
    """A rule in a CNI-HOSTPORT-* chain that names a container (the hostport DNAT and masquerade jumps)."""

    table: str
    chain: str
    rule: str
    network: str | None
    container_id: str | None
    target: str | None


@dataclass(frozen=True, slots=True)
class StaticPodManifest:
    """A pod the kubelet runs from a file of its static pod directory, whatever the API shows."""

    path: str
    namespace: str | None
    """None when the file could not be read or parsed: it may declare any pod."""
    name: str | None
    uid: str | None = None
    """metadata.uid when the manifest sets it (the kubelet then uses it); else the kubelet's config hash."""
    containers: tuple[str, ...] = ()
    host_network: bool = False


@dataclass(frozen=True, slots=True)
class PodLogDir:
    """`/var/log/pods/<namespace>_<name>_<uid>`: the kubelet's per-pod log directory, which ties a UID to
    the pod's namespace and name (a pod directory alone does not)."""

    namespace: str
    name: str
    uid: str
    path: str
    inode: int
    mtime: float


@dataclass(frozen=True, slots=True)
class FirewallRule:
    """One of the firewall plugin's per-address rules in CNI-FORWARD (`-d ip/32 ... RELATED,ESTABLISHED -j
    ACCEPT` or `-s ip/32 -j ACCEPT`). They carry no container id: the address ties them to an attachment."""

    table: str
    chain: str
    rule: str
    ip: str
    family: int
    """0 for IPv4 (iptables), 1 for IPv6 (ip6tables)."""


@dataclass(frozen=True)
class Inventory:
    """Everything the readers saw in one scan, plus what they could not read."""

    taken_at: datetime
    pod_dirs: tuple[PodDir, ...] = ()
    mounts: tuple[Mount, ...] = ()
    ip_reservations: tuple[IPReservation, ...] = ()
    cni_cache: tuple[CNICacheEntry, ...] = ()
    netns: tuple[NetnsEntry, ...] = ()
    veths: tuple[VethLink, ...] = ()
    chains: tuple[IptablesChain, ...] = ()
    hostport_rules: tuple[HostportRule, ...] = ()
    static_pods: tuple[StaticPodManifest, ...] = ()
    pod_logs: tuple[PodLogDir, ...] = ()
    problems: tuple[ReadProblem, ...] = field(default=())
    ip_ranges: tuple[HostLocalRange, ...] = ()
    """host-local range sets from the CNI configuration (conf dir and cached configs)."""
    ip_range_problems: tuple[str, ...] = ()
    """Configuration that could not be read for ranges ("<path>: <reason>"); no resource kind is affected."""
    runtime: RuntimeView | None = None
    firewall_rules: tuple[FirewallRule, ...] = ()
    """What the container runtime said; None when no runtime is configured or its socket is absent."""
    net_ns: str | None = None
    """The network namespace file the node's links were read in (None: nodegc's own); the addresses of a
    namespace with an id there are read through it."""
    looked_in: tuple[tuple[Kind, str], ...] = ()
    """(kind, directory) for the kinds whose resources are paths: where this scan looked for them (each
    directory spelt as configured, normalized and resolved). An item of such a kind whose path is in none of
    them was not looked for. Empty: no such statement (every item counts as looked for)."""
    unread: frozenset[Kind] = frozenset()
    """Kinds this scan did not read at all (no runtime to ask: its sandboxes and leftovers)."""
