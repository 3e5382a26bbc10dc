"""A real containerd for a sandbox node: its own root, state dir, socket and CRI configuration, running
inside the node's network namespace, with locally built images (no registry is needed).

The images are OCI archives of static binaries: a pause built with `gcc -static` (the sandbox image) and
Debian's busybox-static (for app containers). Paths containerd and libcni hard-code (/run/containerd for
shim sockets and runc state, /var/lib/cni for the libcni cache) are bind-mounted from the node root in
the caller's private mount namespace, so nothing reaches the machine's own directories.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodegc.inventory.cri.client import RuntimeClient, RuntimeUnavailable
from nodegc.inventory.cri.messages import message
from nodegc.sandbox.node import (
    _MNT_DETACH,
    CNI_BIN_DIR,
    SandboxError,
    SandboxNode,
    _run,
    _sys_mount,
    _sys_umount,
    is_mounted,
    mounts_under,
)

PAUSE_IMAGE = "localhost/nodegc/pause:1"
BUSYBOX_IMAGE = "localhost/nodegc/busybox:1"
NAMESPACE = "k8s.io"
_MS_BIND = 4096
_START_TIMEOUT = 30.0
_BUSYBOX = Path("/bin/busybox")

_PAUSE_C = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void on_term(int s) { (void)s; _exit(0); }
static void on_child(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
    struct sigaction a = {0};
    a.sa_handler = on_term;
    sigaction(SIGINT, &a, 0);
    sigaction(SIGTERM, &a, 0);
    a.sa_handler = on_child;
    a.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &a, 0);
    for (;;) pause();
}
"""


def containerd_available() -> str | None:
    """Why a sandbox containerd cannot run here (missing tools), or None."""
    for tool in ("containerd", "ctr", "runc", "containerd-shim-runc-v2", "gcc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not _BUSYBOX.exists():
        return f"{_BUSYBOX} (busybox-static) is not installed"
    return None


# --- images ---------------------------------------------------------------------------------------------

def _blob(blobs: dict[str, bytes], data: bytes) -> dict[str, Any]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"digest": digest, "size": len(data)}


def _layer(files: dict[str, tuple[bytes | None, int, str | None]]) -> bytes:
    """An uncompressed layer tar: path -> (content, mode, symlink target)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in sorted({str(Path(p).parent) for p in files} - {"."}):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, (content, mode, target) in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.mode = mode
            if target is not None:
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
            else:
                data = content or b""
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def oci_archive(name: str, files: dict[str, tuple[bytes | None, int, str | None]], entrypoint: list[str]) -> bytes:
    """An OCI image layout tar holding one single-layer linux/amd64 image named `name`."""
    blobs: dict[str, bytes] = {}
    layer = _layer(files)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   **_blob(blobs, json.dumps(config).encode())},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **_blob(blobs, layer)}],
    }
    index = {
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            **_blob(blobs, json.dumps(manifest).encode()),
            "annotations": {"io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]},
        }],
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        def add(path: str, data: bytes) -> None:
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add("index.json", json.dumps(index).encode())
        for digest, data in blobs.items():
            add(f"blobs/sha256/{digest.split(':', 1)[1]}", data)
    return out.getvalue()


def build_images(workdir: Path) -> list[Path]:
    """The pause and busybox archives, built from the local compiler and Debian's busybox-static."""
    workdir.mkdir(parents=True, exist_ok=True)
    src, binary = workdir / "pause.c", workdir / "pause"
    src.write_text(_PAUSE_C)
    _run(["gcc", "-static", "-O2", "-o", str(binary), str(src)])
    pause = oci_archive(PAUSE_IMAGE, {"pause": (binary.read_bytes(), 0o755, None)}, ["/pause"])
    busybox_files: dict[str, tuple[bytes | None, int, str | None]] = {
        "bin/busybox": (_BUSYBOX.read_bytes(), 0o755, None),
        "bin/sh": (None, 0o777, "busybox"),
        "bin/sleep": (None, 0o777, "busybox"),
    }
    busybox = oci_archive(BUSYBOX_IMAGE, busybox_files, ["/bin/sh"])
    paths = []
    for name, data in (("pause.tar", pause), ("busybox.tar", busybox)):
        (workdir / name).write_bytes(data)
        paths.append(workdir / name)
    return paths


# --- the daemon -----------------------------------------------------------------------------------------

@dataclass
class SandboxSpec:
    """What the test's "kubelet" asked the runtime for."""

    name: str
    namespace: str
    uid: str
    attempt: int = 0
    host_port: int | None = None

    @property
    def log_dir_name(self) -> str:
        return f"{self.namespace}_{self.name}_{self.uid}"


class SandboxContainerd:
    """containerd for one SandboxNode. `start()` it, `kill()` it as a crash would, `wipe_state()` as a
    reboot would, `start()` it again; `close()` stops it and everything it started."""

    def __init__(self, node: SandboxNode, *, netns_under_state_dir: bool = True, firewall: bool = False) -> None:
        self.node = node
        if firewall and not any(p.get("type") == "firewall" for p in node.conflist["plugins"]):
            # The firewall plugin's per-address CNI-FORWARD rules, as many clusters chain it.
            node.conflist["plugins"] = [*node.conflist["plugins"], {"type": "firewall"}]
            node.conflist_bytes = json.dumps(node.conflist, indent=2).encode()
            node.conflist_path.write_bytes(node.conflist_bytes)
        base = node.root / "containerd"
        self.root = base / "root"
        self.state = base / "state"
        self.run_dir = node.root / "run/containerd"
        # A unix socket path has at most 107 bytes: the socket sits in the bound /run/containerd, where
        # the default endpoint of nodegc, crictl and the kubelet finds it.
        self.socket = Path("/run/containerd/containerd.sock")
        self.config = base / "config.toml"
        self.images_dir = base / "images"
        self.log_root = node.root / "var/log/pods"
        self.log_path = base / "containerd.log"
        self.netns_under_state_dir = netns_under_state_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self._bound: list[Path] = []
        self._images: list[Path] = []
        self.cgroup_parent = f"nodegc-sandbox-{uuid.uuid4().hex[:12]}"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def client(self, timeout: float = 10.0) -> RuntimeClient:
        return RuntimeClient(self.endpoint, timeout=timeout)

    def _bind_over(self, source: Path, target: Path) -> None:
        source.mkdir(parents=True, exist_ok=True)
        target.mkdir(parents=True, exist_ok=True)
        _sys_mount(str(source), target, None, _MS_BIND, None)
        self._bound.append(target)

    def _write_config(self) -> None:
        cri = "plugins.\"io.containerd.grpc.v1.cri\""
        lines = [
            "version = 2",
            f'root = "{self.root}"',
            f'state = "{self.state}"',
            'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",'
            ' "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",'
            ' "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
            "[grpc]",
            f'  address = "{self.socket}"',
            "[ttrpc]",
            f'  address = "{self.socket}.ttrpc"',
            "[debug]",
            '  level = "info"',
            "[metrics]",
            '  address = ""',
            '[plugins."io.containerd.internal.v1.opt"]',
            f'  path = "{self.root}/opt"',
            f"[{cri}]",
            f'  sandbox_image = "{PAUSE_IMAGE}"',
            "  restrict_oom_score_adj = true",
            f"  netns_mounts_under_state_dir = {str(self.netns_under_state_dir).lower()}",
            "  disable_tcp_service = true",
            '  stream_server_address = "127.0.0.1"',
            '  stream_server_port = "0"',
            "  enable_selinux = false",
            "  disable_apparmor = true",
            f"[{cri}.containerd]",
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]",
            "  SystemdCgroup = false",
            f"[{cri}.cni]",
            f'  bin_dir = "{CNI_BIN_DIR}"',
            f'  conf_dir = "{self.node.cni_conf_dir}"',
            "  max_conf_num = 1",
        ]
        self.config.parent.mkdir(parents=True, exist_ok=True)
        self.config.write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        """Start (or restart) the daemon in the node's network namespace and wait for CRI to answer."""
        if self.proc is not None and self.proc.poll() is None:
            return
        if not self._bound:
            # containerd's shim sockets and runc state, and libcni's cache, live at fixed paths.
            self._bind_over(self.run_dir, Path("/run/containerd"))
            self._bind_over(self.node.cni_data_dir, Path("/var/lib/cni"))
        for d in (self.root, self.state, self.log_root):
            d.mkdir(parents=True, exist_ok=True)
        self._write_config()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the daemon, closed by the OS at its exit
        try:
            self.proc = subprocess.Popen(
                ["nsenter", f"--net={self.node.node_netns}", "containerd", "--config", str(self.config)],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        finally:
            log.close()
        self._wait_ready()
        if not self._images:
            self._images = build_images(self.images_dir)
        for archive in self._images:
            self.ctr("images", "import", str(archive))

    def ctr(self, *args: str) -> str:
        return _run(["ctr", "--address", str(self.socket), "--namespace", NAMESPACE, *args]).stdout.decode()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT
        last = ""
        with self.client(timeout=2.0) as c:
            while time.monotonic() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    break
                try:
                    c.version()
                    return
                except RuntimeUnavailable as e:
                    last = str(e)
                    time.sleep(0.2)
        raise SandboxError(f"containerd did not start: {last}; log tail: {self.log_tail()}")

    def log_tail(self, n: int = 1500) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """containerd dies (SIGKILL); its shims and sandboxes keep running, as after a crash."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None

    def _pids(self) -> tuple[list[int], list[int]]:
        """(shims, container processes) of THIS daemon only. Every sandbox containerd uses the same socket
        path (its own bind of /run/containerd), so a shim is told apart by its mount namespace (the
        daemon's, which is this process's) and a container process by its cgroup (unique per daemon)."""
        own_mnt = os.stat("/proc/self/ns/mnt").st_ino
        shims, members = [], []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                if cmdline and cmdline[0].endswith(b"containerd-shim-runc-v2"):
                    if os.stat(entry / "ns/mnt").st_ino == own_mnt:
                        shims.append(int(entry.name))
                    continue
                if f"/{self.cgroup_parent}/" in (entry / "cgroup").read_text():
                    members.append(int(entry.name))
            except OSError:
                continue
        return shims, members

    def shim_pids(self) -> list[int]:
        return self._pids()[0]

    def kill_everything(self) -> None:
        """What a power loss does to processes: the daemon, its shims and every container process."""
        self.kill()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            shims, members = self._pids()
            if not shims and not members:
                return
            for pid in shims + members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def wipe_state(self, *, metadata: bool = False) -> None:
        """A reboot: tmpfs state is gone (netns mounts, shim sockets, runc state); with `metadata`, the
        daemon's root (its bolt database, snapshots) is lost too. The CNI files on disk stay."""
        for path in (self.state, self.run_dir, *([self.root] if metadata else [])):
            for point in mounts_under(path):
                with contextlib.suppress(OSError):
                    _sys_umount(point, _MNT_DETACH)
            # The directory stays (/run/containerd is bound to it); what is inside goes.
            path.mkdir(parents=True, exist_ok=True)
            for child in path.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        if metadata:
            self._images = []

    def close(self) -> None:
        """Stop every sandbox through CRI when the daemon answers, then kill what is left and unbind."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(Exception), self.client(timeout=5.0) as c:
                for sb in c.list_sandboxes():
                    c.stop_sandbox(sb.id, timeout=20.0)
                    c.remove_sandbox(sb.id, timeout=20.0)
        self.kill_everything()
        for target in reversed(self._bound):
            for point in mounts_under(target):
                with contextlib.suppress(OSError):
                    _sys_umount(point, _MNT_DETACH)
        self._bound.clear()
        for point in mounts_under(self.node.root / "containerd"):
            with contextlib.suppress(OSError):
                _sys_umount(point, _MNT_DETACH)
        remove_cgroups(self.cgroup_parent)

    # --- what a kubelet asks of the runtime ------------------------------------------------------------

    def sandbox_config(self, spec: SandboxSpec) -> Any:
        ports = ([message("PortMapping", protocol=0, container_port=80, host_port=spec.host_port)]
                 if spec.host_port else [])
        return message(
            "PodSandboxConfig",
            metadata=message("PodSandboxMetadata", name=spec.name, uid=spec.uid, namespace=spec.namespace,
                             attempt=spec.attempt),
            hostname=spec.name,
            log_directory=str(self.log_root / spec.log_dir_name),
            port_mappings=ports,
            labels={"io.kubernetes.pod.name": spec.name, "io.kubernetes.pod.namespace": spec.namespace,
                    "io.kubernetes.pod.uid": spec.uid},
            linux=message("LinuxPodSandboxConfig", cgroup_parent=f"/{self.cgroup_parent}/{spec.uid}"),
        )

    def run_sandbox(self, spec: SandboxSpec, *, timeout: float = 60.0) -> str:
        """RunPodSandbox as the kubelet calls it, after it made the pod's directory and log directory."""
        (self.node.kubelet_root / "pods" / spec.uid).mkdir(parents=True, exist_ok=True)
        (self.log_root / spec.log_dir_name).mkdir(parents=True, exist_ok=True)
        with self.client(timeout=timeout) as c:
            reply = c.call("RunPodSandbox", message("RunPodSandboxRequest", config=self.sandbox_config(spec)),
                           "RunPodSandboxResponse")
        return str(reply.pod_sandbox_id)

    def run_container(self, sandbox_id: str, spec: SandboxSpec, name: str = "app", *, timeout: float = 60.0) -> str:
        config = message(
            "ContainerConfig",
            metadata=message("ContainerMetadata", name=name),
            image=message("ImageSpec", image=BUSYBOX_IMAGE),
            command=["/bin/sleep", "100000"],
            log_path=f"{name}/0.log",
            labels={"io.kubernetes.container.name": name, "io.kubernetes.pod.uid": spec.uid},
        )
        with self.client(timeout=timeout) as c:
            reply = c.call("CreateContainer", message("CreateContainerRequest", pod_sandbox_id=sandbox_id,
                           config=config, sandbox_config=self.sandbox_config(spec)), "CreateContainerResponse")
            cid = str(reply.container_id)
            c.call("StartContainer", message("StartContainerRequest", container_id=cid), "StartContainerResponse")
        return cid

    def forget_pod(self, spec: SandboxSpec) -> None:
        """What the kubelet removes of a deleted pod whatever the runtime did: its directory."""
        shutil.rmtree(self.node.kubelet_root / "pods" / spec.uid, ignore_errors=True)

    def stop_sandbox(self, sandbox_id: str) -> None:
        with self.client(timeout=60.0) as c:
            c.stop_sandbox(sandbox_id)

    def remove_sandbox(self, sandbox_id: str) -> None:
        with self.client(timeout=60.0) as c:
            c.stop_sandbox(sandbox_id)
            c.remove_sandbox(sandbox_id)


def thaw_cgroups(name: str, root: Path = Path("/sys/fs/cgroup")) -> None:
    """Thaw the cgroup tree `name` in every hierarchy (v1 `freezer.state`, v2 `cgroup.freeze`): a frozen
    process holds a SIGKILL until it is thawed, so a test that froze one and died leaves it otherwise."""
    for hierarchy in [root, *root.iterdir()] if root.is_dir() else []:
        top = hierarchy / name
        if not top.is_dir() or top.is_symlink():
            continue
        for d in [top, *(p for p in top.rglob("*") if p.is_dir() and not p.is_symlink())]:
            for control, value in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
                if (d / control).is_file():
                    with contextlib.suppress(OSError):
                        (d / control).write_text(value)


def remove_cgroups(name: str, root: Path = Path("/sys/fs/cgroup")) -> None:
    """Remove the (empty) cgroup tree `name` the sandboxes were put in, in every hierarchy."""
    for hierarchy in [root, *root.iterdir()] if root.is_dir() else []:
        top = hierarchy / name
        if not top.is_dir() or top.is_symlink():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir() and not p.is_symlink()),
                      key=lambda p: len(p.parts), reverse=True)
        for d in [*dirs, top]:
            with contextlib.suppress(OSError):
                d.rmdir()


def pod_record(node: SandboxNode, spec: SandboxSpec, ip: str | None, phase: str = "Running") -> dict[str, Any]:
    """The API's view of a pod the runtime runs (one item of `kubectl get pods -o json`)."""
    status: dict[str, Any] = {"phase": phase, "hostIP": node.host_ip}
    if ip:
        status |= {"podIP": ip, "podIPs": [{"ip": ip}]}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": spec.name, "namespace": spec.namespace, "uid": spec.uid,
                         "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "spec": {"nodeName": node.node_name, "containers": [{"name": "app"}]}, "status": status}


def write_pods(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": records}))
    return path


def sandbox_ips(runtime: SandboxContainerd, sandbox_id: str) -> tuple[str, ...]:
    with runtime.client() as c:
        reply = c.sandbox_status(sandbox_id)
    if reply is None:
        return ()
    net = reply.status.network
    return tuple(ip for ip in (net.ip, *(a.ip for a in net.additional_ips)) if ip)


def new_spec(name: str, *, namespace: str = "default", host_port: int | None = None) -> SandboxSpec:
    return SandboxSpec(name=name, namespace=namespace, uid=str(uuid.uuid4()), host_port=host_port)


@contextlib.contextmanager
def running_containerd(node: SandboxNode, **kwargs: Any) -> Iterator[SandboxContainerd]:
    runtime = SandboxContainerd(node, **kwargs)
    try:
        runtime.start()
        yield runtime
    finally:
        runtime.close()


__all__ = ["BUSYBOX_IMAGE", "PAUSE_IMAGE", "SandboxContainerd", "SandboxSpec", "build_images",
           "containerd_available", "is_mounted", "new_spec", "running_containerd"]
