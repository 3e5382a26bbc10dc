"""A throwaway Kubernetes "node": a tmpfs root plus a private network namespace, filled with pods the way
kubelet + runtime + libcni create them (real CNI plugins, real mounts), and broken the ways real nodes break.

Everything lives below the temporary root and inside the node namespace, so closing the node (or the
process dying inside its private mount namespace) leaves nothing behind on the machine.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import random
import re
import shutil
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from nodegc.hostio import libc
from nodegc.hostio.mountinfo import parse_mountinfo
from nodegc.sandbox.cni import cache_entry_path, run_conflist, write_cache_entry
from nodegc.settings import Roots

NETWORK_NAME = "k8s-pod-network"
IFNAME = "eth0"
BRIDGE = "cni0"
CNI_BIN_DIR = Path("/usr/lib/cni")
_CMD_TIMEOUT = 30.0
_LINK_GONE_TIMEOUT = 10.0

_MNT_DETACH = libc.MNT_DETACH
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes uses for generated name suffixes


class SandboxError(RuntimeError):
    """The sandbox could not build or tear down part of the node."""


# --- mounts through libc: one syscall instead of a mount(8) process per volume -----------------------


def _sys_mount(source: str | None, target: Path, fstype: str | None, flags: int, data: str | None) -> None:
    libc.mount(source, target, fstype, flags, data)


def _sys_umount(target: Path | str, flags: int = 0) -> None:
    """Unmount once; "not mounted" and "gone" count as done, so teardown is idempotent."""
    try:
        libc.umount2(target, flags)
    except OSError as e:
        if e.errno in (errno.EINVAL, errno.ENOENT):
            return
        raise


def _mount_tmpfs(target: Path, options: str = "size=4m,mode=0755") -> None:
    _sys_mount("tmpfs", target, "tmpfs", 0, options)


def mount_points() -> list[str]:
    """Mount points of this process's mount namespace, octal escapes decoded, in mount order."""
    with open("/proc/self/mountinfo", "rb") as f:
        mounts, _unparsed = parse_mountinfo(f.read().decode("utf-8", "surrogateescape"))
    return [m.mount_point for m in mounts]


def _mount_types() -> list[tuple[str, str]]:
    with open("/proc/self/mountinfo", "rb") as f:
        mounts, _unparsed = parse_mountinfo(f.read().decode("utf-8", "surrogateescape"))
    return [(m.mount_point, m.fs_type) for m in mounts]


_MAC = re.compile(rb'"mac":\s*"[0-9a-f:]+"')
_SAVE_COUNTERS = re.compile(r"\[\d+:\d+\]")


_BUILTIN_CHAIN = re.compile(r"^:(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) ACCEPT$")


def _rules_without_counters(dump: str) -> list[str]:
    """iptables-save without its comment lines and packet counters: what a rule set is, not what it saw.

    A table that holds nothing but its built-in chains with the ACCEPT policy filters nothing; such a table
    is left out, since merely listing or flushing a chain (as a plugin's DEL does) makes one appear.
    """
    out: list[str] = []
    table: list[str] = []
    for raw in dump.splitlines():
        line = _SAVE_COUNTERS.sub("", raw).rstrip()
        if not line or line.startswith("#"):
            continue
        table.append(line)
        if line == "COMMIT":
            if not all(_BUILTIN_CHAIN.match(x) for x in table[1:-1]):
                out += table
            table = []
    return out + table


def _decoded_cache_config(content: bytes) -> bytes:
    """A cache entry with its base64 network configuration decoded, so that paths in it can be compared."""
    try:
        doc = json.loads(content)
        doc["config"] = base64.b64decode(doc["config"]).decode()
    except (ValueError, KeyError, TypeError):
        return content
    return json.dumps(doc, sort_keys=True).encode()


def mounts_under(root: Path) -> list[str]:
    """Mounts at or below `root`, deepest first so they can be unmounted in order."""
    prefix = str(root).rstrip("/") + "/"
    found = [p for p in mount_points() if p == str(root) or p.startswith(prefix)]
    return sorted(found, key=lambda p: (p.count("/"), len(p)), reverse=True)


def is_mounted(path: Path) -> bool:
    return str(path) in mount_points()


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
    try:
        proc = subprocess.run(list(argv), capture_output=True, timeout=_CMD_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SandboxError(f"{argv[0]} failed: {e}") from e
    if proc.returncode != 0:
        msg = proc.stderr.decode(errors="replace").strip()[:300]
        raise SandboxError(f"{' '.join(argv)} exited {proc.returncode}: {msg}")
    return proc


def _new_netns(path: Path) -> None:
    """Create a namespace pinned by a bind mount at `path`, as `ip netns add` / the runtime would."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
    os.close(fd)
    _run(["unshare", f"--net={path}", "true"])


def _remove_netns(path: Path) -> None:
    _sys_umount(path)
    path.unlink(missing_ok=True)


def _ns_inode(pid: int | str, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def _mount_ids(pid: int | str) -> frozenset[bytes] | None:
    try:
        with open(f"/proc/{pid}/mountinfo", "rb") as f:
            return frozenset(line.split(b" ", 1)[0] for line in f)
    except OSError:
        return None


def _proc_net_inode(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/net/dev").st_ino
    except OSError:
        return None


def namespace_is_private(kind: str) -> bool:
    """True when this process's `kind` namespace ("mnt" or "net") is not the machine's (PID 1's).

    Where /proc/1/ns is unreadable (no ptrace right over PID 1), other evidence PID 1 still shows
    decides: mount ids are renumbered in a copied mount namespace, and /proc/<pid>/net entries get
    new inodes per network namespace. Unproven means not private, which protects the machine.
    """
    own = _ns_inode("self", kind)
    init = _ns_inode(1, kind)
    if own is not None and init is not None:
        return own != init
    if kind == "mnt":
        own_ids, init_ids = _mount_ids("self"), _mount_ids(1)
        return own_ids is not None and init_ids is not None and own_ids != init_ids
    if kind == "net":
        own_net, init_net = _proc_net_inode("self"), _proc_net_inode(1)
        return own_net is not None and init_net is not None and own_net != init_net
    return False


_CHAIN_PLUGINS = ("bridge", "portmap", "firewall", "tuning", "bandwidth")
"""Plugins a sandbox conflist may chain, in conflist order (bridge with host-local IPAM always first)."""
_BANDWIDTH = {"egressRate": 1_000_000, "egressBurst": 100_000, "ingressRate": 1_000_000, "ingressBurst": 100_000}


def _rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class SandboxPod:
    """One pod as the sandbox built it; `in_api` and `phase` are what the API server would show."""

    name: str
    namespace: str
    uid: str
    container_id: str
    netns_path: Path
    ip: str | None
    host_port: int | None
    bandwidth: bool
    """Whether the pod asked for traffic shaping (the bandwidth plugin then adds an ifb device)."""
    volume_paths: tuple[Path, ...]
    pod_dir: Path
    phase: str
    in_api: bool = True
    host_veth: str | None = None
    """Host side of the pod's veth in the node namespace (from the CNI result)."""
    containers: tuple[str, ...] = ("app",)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class SandboxNode:
    """Build with `SandboxNode.create()`, use as a context manager; see the module docstring."""

    def __init__(self, root: Path, *, node_name: str, subnet: str, host_ip: str,
                 plugins: Sequence[str] = ("bridge", "portmap"), seed: int | None = None) -> None:
        self.root = root
        self._rng = random.Random(seed) if seed is not None else random.SystemRandom()  # noqa: S311 - names, not secrets
        """Names and ids; a seed makes two nodes built the same way identical (benchmarks compare them)."""
        self.node_name = node_name
        self.subnet = subnet
        self.host_ip = host_ip
        self.kubelet_root = root / "var/lib/kubelet"
        self.cni_conf_dir = root / "etc/cni/net.d"
        self.cni_data_dir = root / "var/lib/cni"
        self.ipam_dir = self.cni_data_dir / "networks"
        self.netns_dir = root / "run/netns"
        self.static_pod_dir = root / "etc/kubernetes/manifests"
        self.pod_log_dir = root / "var/log/pods"
        self.node_netns = root / "node.netns"
        self.conflist: dict[str, Any] = {
            "cniVersion": "1.0.0",
            "name": NETWORK_NAME,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": subnet}]],
                        "dataDir": str(self.ipam_dir),
                    },
                },
            ],
        }
        self.plugins = tuple(plugins)
        unknown = [p for p in self.plugins if p not in _CHAIN_PLUGINS]
        if unknown or self.plugins[:1] != ("bridge",):
            raise SandboxError(f"plugins must start with bridge and be among {_CHAIN_PLUGINS}: {unknown}")
        chain = self.conflist["plugins"]
        if "portmap" in self.plugins:
            chain.append({"type": "portmap", "capabilities": {"portMappings": True}})
        if "firewall" in self.plugins:
            chain.append({"type": "firewall", "backend": "iptables"})
        if "tuning" in self.plugins:
            chain.append({"type": "tuning", "sysctl": {"net.core.somaxconn": "512"}})
        if "bandwidth" in self.plugins:
            chain.append({"type": "bandwidth", "capabilities": {"bandwidth": True}})
        self.conflist_bytes = json.dumps(self.conflist, indent=2).encode()
        self.conflist_path = self.cni_conf_dir / "10-sandbox.conflist"
        self.pods: dict[str, SandboxPod] = {}

    # --- lifecycle -----------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        base: Path | None = None,
        *,
        node_name: str = "sandbox-node",
        subnet: str = "10.244.0.0/16",
        host_ip: str = "10.0.0.10",
        require_private_mount_ns: bool = True,
        plugins: Sequence[str] = ("bridge", "portmap"),
        seed: int | None = None,
    ) -> SandboxNode:
        """Refuses to run in the machine's own mount namespace, where a crash would leak mounts."""
        if require_private_mount_ns and not namespace_is_private("mnt"):
            raise SandboxError(
                "not in a private mount namespace: run under `unshare --mount --net --propagation private`"
            )
        root = Path(os.path.realpath(tempfile.mkdtemp(prefix="nodegc-node-", dir=base)))
        node = cls(root, node_name=node_name, subnet=subnet, host_ip=host_ip, plugins=plugins, seed=seed)
        try:
            node._build()
        except BaseException:
            node.close()
            raise
        return node

    def _build(self) -> None:
        try:
            _mount_tmpfs(self.root, "mode=0755")
            _sys_mount(None, self.root, None, libc.MS_PRIVATE | libc.MS_REC, None)
        except OSError as e:
            raise SandboxError(f"cannot mount the node root: {e}") from e
        for d in (self.kubelet_root / "pods", self.cni_conf_dir, self.ipam_dir, self.netns_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.conflist_path.write_bytes(self.conflist_bytes)
        _new_netns(self.node_netns)
        _run(["nsenter", f"--net={self.node_netns}", "ip", "link", "set", "lo", "up"])

    def close(self) -> None:
        """Unmount everything below the root (deepest first), which also destroys every namespace, then
        remove the root. Idempotent; tries every mount even when some fail."""
        if not self.root.exists():
            return
        problems: list[str] = []
        for _ in range(8):  # stacked mounts need more than one pass
            remaining = mounts_under(self.root)
            if not remaining:
                break
            for point in remaining:
                try:
                    _sys_umount(point)
                except OSError:
                    try:
                        _sys_umount(point, libc.MNT_DETACH)
                    except OSError as e:
                        problems.append(str(e))
        left = mounts_under(self.root)
        if left:
            raise SandboxError(f"mounts left under {self.root}: {left[:5]} ({'; '.join(problems[:3])})")
        # Nothing is mounted below the root any more, so this cannot cross into another filesystem.
        shutil.rmtree(self.root, ignore_errors=True)
        if self.root.exists():
            raise SandboxError(f"cannot remove {self.root}")

    def __enter__(self) -> SandboxNode:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def roots(self) -> Roots:
        return Roots(
            kubelet_root=self.kubelet_root,
            cni_conf_dir=self.cni_conf_dir,
            cni_bin_dirs=(CNI_BIN_DIR,),
            cni_data_dir=self.cni_data_dir,
            netns_dir=self.netns_dir,
            static_pod_dir=self.static_pod_dir,
            pod_log_dir=self.pod_log_dir,
            net_ns=self.node_netns,
        )

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _hex(self, nbytes: int) -> str:
        return self._rng.getrandbits(nbytes * 8).to_bytes(nbytes, "big").hex()

    def _rand_name(self, n: int) -> str:
        return "".join(self._rng.choice(_NAME_ALPHABET) for _ in range(n))

    # --- paths of one pod's artifacts ----------------------------------------------------------------

    def cache_path(self, pod: SandboxPod) -> Path:
        return cache_entry_path(
            cni_data_dir=self.cni_data_dir, network=NETWORK_NAME, container_id=pod.container_id, ifname=IFNAME
        )

    def ipam_path(self, pod: SandboxPod) -> Path | None:
        return self.ipam_dir / NETWORK_NAME / pod.ip if pod.ip else None

    def node_exec(self, *argv: str) -> str:
        """Run a command in the node network namespace (ip, iptables-save) and return its stdout."""
        return _run(["nsenter", f"--net={self.node_netns}", *argv]).stdout.decode(errors="replace")

    # --- creating pods -------------------------------------------------------------------------------

    def add_pod(
        self,
        name: str,
        *,
        namespace: str = "default",
        phase: str = "Running",
        volumes: Sequence[str] = ("data",),
        host_port: int | None = None,
        bandwidth: bool = False,
        containers: Sequence[str] = ("app",),
        created_at: datetime | None = None,
    ) -> SandboxPod:
        """Sandbox network first (netns + CNI ADD + cache entry), then the kubelet's pod directory."""
        uid = self._uuid()
        container_id = self._hex(32)
        netns_path = self.netns_dir / f"cni-{self._uuid()}"
        pod_dir = self.kubelet_root / "pods" / uid
        pod = SandboxPod(
            name=name,
            namespace=namespace,
            uid=uid,
            container_id=container_id,
            netns_path=netns_path,
            ip=None,
            host_port=host_port,
            bandwidth=bandwidth,
            volume_paths=(),
            pod_dir=pod_dir,
            phase=phase,
            in_api=True,
            containers=tuple(containers),
            created_at=created_at or datetime.now(UTC),
        )
        try:
            self._add_network(pod)
            self._make_pod_dir(pod, volumes)
        except BaseException:
            self._unmount_volumes(pod)
            _remove_netns(netns_path)
            raise
        self.pods[uid] = pod
        return pod

    def _cni_args(self, pod: SandboxPod) -> list[tuple[str, str]]:
        return [
            ("IgnoreUnknown", "1"),
            ("K8S_POD_NAMESPACE", pod.namespace),
            ("K8S_POD_NAME", pod.name),
            ("K8S_POD_INFRA_CONTAINER_ID", pod.container_id),
            ("K8S_POD_UID", pod.uid),
        ]

    def _add_network(self, pod: SandboxPod) -> None:
        _new_netns(pod.netns_path)
        cap_args: dict[str, Any] = {}
        if pod.host_port is not None:
            cap_args["portMappings"] = [{"hostPort": pod.host_port, "containerPort": 80, "protocol": "tcp"}]
        if pod.bandwidth:
            if "bandwidth" not in self.plugins:
                raise SandboxError("a pod with bandwidth needs the bandwidth plugin in the conflist")
            cap_args["bandwidth"] = dict(_BANDWIDTH)
        cni_args = self._cni_args(pod)
        result = run_conflist(
            command="ADD",
            conflist=self.conflist,
            container_id=pod.container_id,
            netns=str(pod.netns_path),
            ifname=IFNAME,
            cni_args=cni_args,
            capability_args=cap_args,
            cni_path=(CNI_BIN_DIR,),
            host_netns=self.node_netns,
        )
        if result is None:
            raise SandboxError("CNI ADD returned no result")
        write_cache_entry(
            cni_data_dir=self.cni_data_dir,
            network=NETWORK_NAME,
            container_id=pod.container_id,
            ifname=IFNAME,
            netns=str(pod.netns_path),
            conflist_bytes=self.conflist_bytes,
            cni_args=cni_args,
            capability_args=cap_args,
            result=result,
        )
        ips = result.get("ips") or []
        if ips and isinstance(ips[0], dict):
            pod.ip = str(ips[0].get("address", "")).split("/")[0] or None
        for iface in result.get("interfaces") or []:
            # the bridge plugin lists the bridge, the host veth and the pod's interface; later plugins may add
            # their own host devices (bandwidth's ifb) after them
            if isinstance(iface, dict) and "sandbox" not in iface and iface.get("name") != BRIDGE:
                pod.host_veth = str(iface.get("name"))
                break

    def _make_pod_dir(self, pod: SandboxPod, volumes: Sequence[str]) -> None:
        d = pod.pod_dir
        paths: list[Path] = []
        for v in volumes:
            vol = d / "volumes" / "kubernetes.io~empty-dir" / v
            vol.mkdir(parents=True)
            _mount_tmpfs(vol)
            paths.append(vol)
            pod.volume_paths = tuple(paths)
            ready = d / "plugins" / "kubernetes.io~empty-dir" / v
            ready.mkdir(parents=True)
            (ready / "ready").touch()
        projected = d / "volumes" / "kubernetes.io~projected" / f"kube-api-access-{self._rand_name(5)}"
        projected.mkdir(parents=True)
        _mount_tmpfs(projected)
        paths.append(projected)
        pod.volume_paths = tuple(paths)
        (projected / "namespace").write_text(pod.namespace)
        for c in pod.containers:
            cdir = d / "containers" / c
            cdir.mkdir(parents=True)
            (cdir / self._hex(4)).touch()
        hosts = "127.0.0.1\tlocalhost\n" + (f"{pod.ip}\t{pod.name}\n" if pod.ip else "")
        (d / "etc-hosts").write_text(hosts)

    # --- the pieces of a teardown, each idempotent ---------------------------------------------------

    def _unmount_volumes(self, pod: SandboxPod) -> None:
        for p in pod.volume_paths:
            _sys_umount(p)

    def _remove_pod_dir(self, pod: SandboxPod) -> None:
        if mounts_under(pod.pod_dir):
            raise SandboxError(f"{pod.pod_dir} still holds mounts")
        shutil.rmtree(pod.pod_dir, ignore_errors=True)

    def _cni_del(self, pod: SandboxPod) -> None:
        """DEL from the cache entry, as a runtime does, then drop the entry."""
        cache = self.cache_path(pod)
        try:
            entry = json.loads(cache.read_bytes())
        except FileNotFoundError:
            return
        conflist = json.loads(base64.b64decode(entry["config"]))
        run_conflist(
            command="DEL",
            conflist=conflist,
            container_id=pod.container_id,
            netns=str(entry.get("netns", pod.netns_path)),
            ifname=IFNAME,
            cni_args=[(k, v) for k, v in entry.get("cniArgs", [])],
            capability_args=entry.get("capabilityArgs") or {},
            cni_path=(CNI_BIN_DIR,),
            host_netns=self.node_netns,
            prev_result=entry.get("result"),
        )
        cache.unlink(missing_ok=True)

    def _wait_link_gone(self, name: str | None) -> None:
        """A namespace dies asynchronously in the kernel; wait so callers see the veth already gone."""
        if not name:
            return
        deadline = time.monotonic() + _LINK_GONE_TIMEOUT
        while time.monotonic() < deadline:
            if not self.link_exists(name):
                return
            time.sleep(0.02)
        raise SandboxError(f"veth {name} still present after its namespace was removed")

    def link_exists(self, name: str) -> bool:
        argv = ["nsenter", f"--net={self.node_netns}", "ip", "-o", "link", "show", "dev", name]
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=_CMD_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SandboxError(f"cannot list links: {e}") from e
        return proc.returncode == 0

    # --- residue scenarios ---------------------------------------------------------------------------

    def delete_without_cni_del(self, pod: SandboxPod) -> None:
        """Kubelet cleaned up but the runtime never ran CNI DEL: netns, veth, IP, cache and chains stay."""
        pod.in_api = False
        self._unmount_volumes(pod)
        self._remove_pod_dir(pod)

    def delete_netns_only(self, pod: SandboxPod) -> None:
        """The netns was removed (taking the veth with it) without CNI DEL: IP, cache and chains stay."""
        pod.in_api = False
        self._unmount_volumes(pod)
        self._remove_pod_dir(pod)
        _remove_netns(pod.netns_path)
        self._wait_link_gone(pod.host_veth)

    def delete_leaving_mounts(self, pod: SandboxPod) -> None:
        """Network torn down properly, but the kubelet never unmounted the volumes or removed the dir."""
        pod.in_api = False
        self._cni_del(pod)
        _remove_netns(pod.netns_path)

    def delete_leaving_dir(self, pod: SandboxPod) -> None:
        """Network torn down and volumes unmounted, but the pod directory tree stays."""
        self.delete_leaving_mounts(pod)
        self._unmount_volumes(pod)

    def terminate(self, pod: SandboxPod, phase: str = "Succeeded") -> None:
        """The pod finished and is still in the API; nothing on the node was torn down yet."""
        pod.phase = phase

    def delete_cleanly(self, pod: SandboxPod) -> None:
        """What a healthy node does; also finishes any partial teardown left by a scenario above."""
        pod.in_api = False
        self._cni_del(pod)
        _remove_netns(pod.netns_path)
        self._unmount_volumes(pod)
        self._remove_pod_dir(pod)
        self._wait_link_gone(pod.host_veth)

    # --- the whole node, for comparing two of them --------------------------------------------------------

    def full_state(self, *, ignore: Sequence[str] = ()) -> dict[str, Any]:
        """Everything a pod can leave on this node, in a form two nodes built alike (same seed) compare on:
        every file below the root (path, type, size, content digest), the mount table below the root, the
        links of the node namespace, and both iptables families rule by rule (counters left out).

        What the plugins name at random (veth names and MACs) is replaced by the pod the veth belongs to;
        `ignore` lists top-level names below the root that belong to the observer (a ledger, a snapshot).
        """
        veth_owner = {p.host_veth: p.name for p in self.pods.values() if p.host_veth}
        return {
            "files": self._files_state(set(ignore), veth_owner),
            "mounts": sorted(
                (os.path.relpath(point, self.root), fs)
                for point, fs in _mount_types()
                if point == str(self.root) or point.startswith(str(self.root) + "/")
            ),
            "links": self._links_state(veth_owner),
            "iptables": {
                cmd: _rules_without_counters(self.node_exec(cmd)) for cmd in ("iptables-save", "ip6tables-save")
            },
        }

    def _files_state(self, ignore: set[str], veth_owner: dict[str, str]) -> list[tuple[str, str, str]]:
        out: list[tuple[str, str, str]] = []
        for dirpath, dirnames, found in os.walk(self.root):
            rel_dir = os.path.relpath(dirpath, self.root)
            filenames = found
            if rel_dir == ".":
                dirnames[:] = [d for d in dirnames if d not in ignore]
                filenames = [f for f in found if f not in ignore and f != self.node_netns.name]
            dirnames.sort()
            for name in dirnames:
                out.append((os.path.normpath(os.path.join(rel_dir, name)), "dir", ""))
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                rel = os.path.normpath(os.path.join(rel_dir, name))
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode):
                    out.append((rel, f"mode {st.st_mode:o}", ""))
                    continue
                try:
                    content = Path(path).read_bytes()
                except OSError as e:  # an nsfs mount point reads as EINVAL: its mount shows in "mounts"
                    out.append((rel, "file", f"unreadable: {e.errno}"))
                    continue
                if rel.startswith("var/lib/cni/results/"):
                    content = _decoded_cache_config(content)
                content = content.replace(os.fsencode(self.root), b"<root>")
                for veth, owner in veth_owner.items():
                    content = content.replace(veth.encode(), f"veth-of-{owner}".encode())
                if rel.startswith("var/lib/cni/results/"):
                    content = _MAC.sub(b"<mac>", content)
                out.append((rel, "file", hashlib.sha256(content).hexdigest()[:16]))
        return out

    def _links_state(self, veth_owner: dict[str, str]) -> list[tuple[str, str, str]]:
        doc = json.loads(self.node_exec("ip", "-d", "-j", "link", "show"))
        out: list[tuple[str, str, str]] = []
        for link in doc:
            name = str(link.get("ifname"))
            kind = str((link.get("linkinfo") or {}).get("info_kind") or "")
            if kind == "veth":
                name = f"veth-of-{veth_owner.get(name, '?')}"
            out.append((name, kind, str(link.get("master") or "")))
        return sorted(out)

    # --- the API view --------------------------------------------------------------------------------

    def pod_record(self, pod: SandboxPod) -> dict[str, Any]:
        """One item of `kubectl get pods -o json`. A Pending pod has no IP in status yet (creation race)."""
        status: dict[str, Any] = {"phase": pod.phase, "hostIP": self.host_ip}
        if pod.ip and pod.phase != "Pending":
            status["podIP"] = pod.ip
            status["podIPs"] = [{"ip": pod.ip}]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
                "creationTimestamp": _rfc3339(pod.created_at),
            },
            "spec": {"nodeName": self.node_name, "containers": [{"name": c} for c in pod.containers]},
            "status": status,
        }

    def api_pods(self) -> Iterator[SandboxPod]:
        return (p for p in self.pods.values() if p.in_api)

    def pods_snapshot(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "List", "items": [self.pod_record(p) for p in self.api_pods()]}

    def write_snapshot(self, path: Path) -> Path:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.pods_snapshot(), indent=2))
        os.replace(tmp, path)
        return path
