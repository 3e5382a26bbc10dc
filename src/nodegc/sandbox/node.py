"""A throwaway Kubernetes "node": a tmpfs root plus a private network namespace, filled with pods the way
kubelet + runtime + libcni create them (real CNI plugins, real mounts), and broken the ways real nodes break.

Everything lives below the temporary root and inside the node namespace, so closing the node (or the
process dying inside its private mount namespace) leaves nothing behind on the machine.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import secrets
import shutil
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


def _rand_name(n: int) -> str:
    return "".join(secrets.choice(_NAME_ALPHABET) for _ in range(n))


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

    def __init__(self, root: Path, *, node_name: str, subnet: str, host_ip: str) -> None:
        self.root = root
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
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
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
    ) -> SandboxNode:
        """Refuses to run in the machine's own mount namespace, where a crash would leak mounts."""
        if require_private_mount_ns and not namespace_is_private("mnt"):
            raise SandboxError(
                "not in a private mount namespace: run under `unshare --mount --net --propagation private`"
            )
        root = Path(os.path.realpath(tempfile.mkdtemp(prefix="nodegc-node-", dir=base)))
        node = cls(root, node_name=node_name, subnet=subnet, host_ip=host_ip)
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
        containers: Sequence[str] = ("app",),
        created_at: datetime | None = None,
    ) -> SandboxPod:
        """Sandbox network first (netns + CNI ADD + cache entry), then the kubelet's pod directory."""
        uid = str(uuid.uuid4())
        container_id = secrets.token_hex(32)
        netns_path = self.netns_dir / f"cni-{uuid.uuid4()}"
        pod_dir = self.kubelet_root / "pods" / uid
        pod = SandboxPod(
            name=name,
            namespace=namespace,
            uid=uid,
            container_id=container_id,
            netns_path=netns_path,
            ip=None,
            host_port=host_port,
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
            if isinstance(iface, dict) and "sandbox" not in iface and iface.get("name") != BRIDGE:
                pod.host_veth = str(iface.get("name"))

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
        projected = d / "volumes" / "kubernetes.io~projected" / f"kube-api-access-{_rand_name(5)}"
        projected.mkdir(parents=True)
        _mount_tmpfs(projected)
        paths.append(projected)
        pod.volume_paths = tuple(paths)
        (projected / "namespace").write_text(pod.namespace)
        for c in pod.containers:
            cdir = d / "containers" / c
            cdir.mkdir(parents=True)
            (cdir / secrets.token_hex(4)).touch()
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
