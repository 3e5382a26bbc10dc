"""What the container runtime (through CRI) says exists on the node.

A `RuntimeView` is one reading of the runtime: its identity, the sandboxes and containers it knows, and
whether the reading is complete. A view that is not `usable` carries no evidence: nothing that needs the
runtime's word may be concluded from it (and "the runtime knows no such sandbox" least of all).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class RuntimeSandbox:
    """One pod sandbox the runtime knows (ListPodSandbox, plus PodSandboxStatus verbose once per id)."""

    id: str
    pod_uid: str
    pod_name: str
    pod_namespace: str
    attempt: int
    ready: bool
    created_at: datetime | None
    ips: tuple[str, ...] = ()
    netns_path: str | None = None
    """Where the runtime says the sandbox's network namespace is (containerd: the OCI spec's network path)."""
    netns_closed: bool | None = None
    pid: int | None = None
    log_directory: str | None = None
    status_read: bool = False
    """True once PodSandboxStatus answered for this sandbox (ips, netns and pid come from there)."""


@dataclass(frozen=True)
class RuntimeContainer:
    id: str
    sandbox_id: str
    name: str
    state: str
    """created, running, exited or unknown."""
    created_at: datetime | None = None


UNTOLD_PROCESS = "a process that cannot be told"
"""The problem of a `shim` leftover without an id: a process whose command line could not be read in time. Any
process may be a shim of any id, so while one cannot be told no leftover is judged."""


@dataclass(frozen=True)
class RuntimeLeftover:
    """Something of containerd's on the host that names a sandbox or container id: a sandbox state
    directory (with its shm mount), a task bundle (with its rootfs mount), or a shim process."""

    what: str
    """sandbox_dir, task_dir or shim."""
    id: str
    path: str
    mounted: bool = False
    pid: int | None = None
    inode: int | None = None
    """A directory's inode (lstat): a re-read must find the same directory."""
    mtime: float | None = None
    """A directory's modification time, or a shim's start (epoch seconds): its age."""
    mount_id: int | None = None
    """The id of the one mount expected inside the directory (`shm` of a sandbox dir, `rootfs` of a task
    bundle), when it is mounted exactly there."""
    mount_point: str | None = None
    """Where that mount is expected (`<path>/shm` or `<path>/rootfs`)."""
    other_mounts: tuple[str, ...] = ()
    """Mount points at or below the directory that are not the expected one: the directory is not touched."""
    sandbox_id: str | None = None
    """A task bundle's sandbox (its OCI annotation `io.kubernetes.cri.sandbox-id`), when it names one."""
    busy: str | None = None
    """Why something may still use the directory (its task's init process is alive), when it may."""
    problem: str | None = None
    """Why the entry cannot be reclaimed at all (a symlink, a path outside the state dir, an odd name)."""
    start_time: int | None = None
    """A shim's start time in clock ticks since boot (/proc/<pid>/stat field 22): with the pid, its identity."""
    address: str | None = None
    """A shim's `-address` (the containerd socket it belongs to)."""


@dataclass(frozen=True)
class RuntimeView:
    """One reading of the runtime. `reachable` False: the runtime could not be asked (see `error`)."""

    endpoint: str
    reachable: bool
    runtime_name: str | None = None
    runtime_version: str | None = None
    api_version: str | None = None
    sandboxes: tuple[RuntimeSandbox, ...] = ()
    containers: tuple[RuntimeContainer, ...] = ()
    error: str | None = None
    read_at: datetime | None = None
    state_dir: str | None = None
    """The runtime's state directory (containerd: the `state` of its config) when nodegc was told it."""
    leftovers: tuple[RuntimeLeftover, ...] = ()
    """What the state directory and the process table hold, known to the runtime or not."""

    def sandbox(self, sandbox_id: str) -> RuntimeSandbox | None:
        for sb in self.sandboxes:
            if sb.id == sandbox_id:
                return sb
        return None

    def by_id(self) -> dict[str, RuntimeSandbox]:
        return {sb.id: sb for sb in self.sandboxes}
