"""Reclaiming containerd's leftovers: a sandbox state directory or task bundle whose id the runtime no
longer lists (its shm or rootfs mount unmounted, then the tree removed), and, on opt-in, a shim process of
such an id (SIGTERM, a bounded wait, SIGKILL).

Each step first asks the runtime again (a fresh ListPodSandbox and ListContainers must not show the id)
and re-reads the host: the directory must be exactly `<state>/io.containerd.grpc.v1.cri/sandboxes/<id>` or
`<state>/io.containerd.runtime.v2.task/k8s.io/<id>` of the resolved state dir, reached with
O_NOFOLLOW from the state dir down, still the verified inode, and hold no mount but its own shm/rootfs
(still the verified mount id). The unmount is `reclaim.unmounting`'s: a child process with a timeout that
unmounts only the mount whose id it verified through its own descriptor, and detaches it lazily when it is
busy or hangs (what holds it then keeps its reference; nothing below it exists, so nothing else is taken
along). The tree goes with `reclaim.removing`'s walk: never a symlink followed, never a mount crossed.

A shim is pinned with a pidfd before its identity is read (same pid, same start time in /proc/<pid>/stat,
the same `-id` and `-address` on its command line), and every signal goes through that pidfd: a pid reused
by another process is never signalled.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import signal
import stat
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from nodegc.hostio.mountinfo import mounts_below, read_mounts, top_of
from nodegc.inventory.cri.client import CRIError, EndpointError, RuntimeClient, socket_path
from nodegc.inventory.cri.leftovers import (
    CRI_DIR,
    CRI_NAMESPACE,
    TASKS_DIR,
    cgroups_path,
    expected_mount,
    is_container_id,
    load_json,
    read_cmdline,
    read_small,
    read_spec,
    serves_socket,
    shim_args,
    socket_file,
    start_ticks,
)
from nodegc.model.resources import Mount, VolumeDir
from nodegc.model.runtime import RuntimeLeftover
from nodegc.reclaim.outcomes import Outcome
from nodegc.reclaim.removing import open_dir_below, remove_dir_at
from nodegc.reclaim.unmounting import unmount_volume

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
TERM_WAIT = 10.0
"""Seconds a shim gets to exit after SIGTERM before SIGKILL."""
_KILL_WAIT = 5.0
_RUNC_WAIT = 3.0
"""Seconds a `runc` call of the shim (a child in no container's cgroup) gets to end before the step fails."""


def runtime_doubt(left: RuntimeLeftover, *, endpoint: str | None, timeout: float,
                  also: Collection[str] = ()) -> str | None:
    """Why the runtime may still own the id (or one of `also`): a fresh list shows it, or cannot be read;
    None: it does not."""
    if not endpoint:
        return "no runtime endpoint configured: its leftovers are only reclaimed with its word"
    ids = {i for i in (left.id, left.sandbox_id, *also) if i}
    try:
        with RuntimeClient(endpoint, timeout=timeout) as client:
            listed = {sb.id for sb in client.list_sandboxes()}
            listed |= {i for c in client.list_containers() for i in (c.id, c.pod_sandbox_id) if i}
    except CRIError as e:
        return f"runtime: {e}"
    known = sorted(ids & listed)
    return f"the runtime lists {known[0][:12]} again" if known else None


def _relative(left: RuntimeLeftover, base: str) -> list[str] | None:
    """The path's components below the resolved state dir, when it has the layout of its kind."""
    if not left.path.startswith(base + "/"):
        return None
    parts = left.path[len(base) + 1:].split("/")
    if left.what == "sandbox_dir" and parts[:2] == [CRI_DIR, "sandboxes"] and len(parts) == 3:
        return parts
    if left.what == "task_dir" and len(parts) == 3 and parts[:2] == [TASKS_DIR, CRI_NAMESPACE]:
        return parts
    return None


def remove_runtime_dir(left: RuntimeLeftover, *, state_dir: Path | None, endpoint: str | None, timeout: float,
                       unmount_timeout: float = 10.0, proc_root: Path = Path("/proc"),
                       runc_root: Path | None = None, cgroup_root: Path | None = None) -> Outcome:
    """A task bundle goes after what runc keeps of its container outside it (`runc_root`'s state dir of the
    id, the container's empty cgroups below `cgroup_root`; None: not touched): see `_runc_leftovers`."""
    if state_dir is None:
        return Outcome.failed("no runtime state dir configured")
    base = os.path.realpath(os.fsdecode(state_dir))
    try:
        left.path.encode("utf-8")
    except UnicodeEncodeError:
        return Outcome.failed(f"refused: {left.path!r} is not UTF-8")
    parts = _relative(left, base)
    if parts is None or not is_container_id(left.id) or parts[-1] != left.id or left.inode is None:
        return Outcome.failed(f"refused: {left.path} is not a {left.what} of {base}")
    doubt = runtime_doubt(left, endpoint=endpoint, timeout=timeout)
    if doubt is not None:
        return Outcome.changed(doubt) if doubt.startswith("the runtime lists") else Outcome.failed(doubt)
    try:
        fd = os.open(base, _DIR_FLAGS)
    except FileNotFoundError:
        return Outcome.gone(f"{base} does not exist")
    except OSError as e:
        return Outcome.failed(f"cannot open {base}: {e.strerror}")
    try:
        for i, name in enumerate(parts[:-1]):
            next_fd = open_dir_below(fd, name, path=os.path.join(base, *parts[:i + 1]))
            if isinstance(next_fd, Outcome):
                return next_fd
            os.close(fd)
            fd = next_fd
        return _unmount_then_remove(fd, left, unmount_timeout=unmount_timeout, proc_root=proc_root, timeout=timeout,
                                    runc_root=runc_root, cgroup_root=cgroup_root)
    finally:
        os.close(fd)


def _unmount_then_remove(parent_fd: int, left: RuntimeLeftover, *, unmount_timeout: float, proc_root: Path,
                         timeout: float, runc_root: Path | None = None, cgroup_root: Path | None = None) -> Outcome:
    try:
        st = os.lstat(left.id, dir_fd=parent_fd)
    except FileNotFoundError:
        return Outcome.gone(f"{left.path} does not exist")
    except OSError as e:
        return Outcome.failed(f"cannot stat {left.path}: {e.strerror}")
    if st.st_ino != left.inode:
        return Outcome.changed(f"{left.path} is inode {st.st_ino}, not the verified {left.inode}")
    mounts, problems = read_mounts(proc_root)
    if problems or not mounts:
        return Outcome.failed(f"cannot read the mount table: {problems[0].reason if problems else 'empty'}")
    point = expected_mount(left.what, left.path)
    below = mounts_below(mounts, left.path)
    others = sorted({m.mount_point for m in below if m.mount_point != point})
    if others:
        return Outcome.failed(f"not touched: mounted below {left.path}, not its own: {others[:3]}")
    own = [m for m in below if m.mount_point == point]
    if own and (len(own) > 1 or own[0].mount_id != left.mount_id):
        return Outcome.changed(f"{point} holds mount(s) {[m.mount_id for m in own]}, not the verified"
                               f" {left.mount_id}")
    runc = ""
    if left.what == "task_dir":
        gone_first = _runc_leftovers(parent_fd, left, mounts=mounts, runc_root=runc_root, cgroup_root=cgroup_root,
                                     proc_root=proc_root, timeout=timeout)
        if isinstance(gone_first, Outcome):
            return gone_first
        runc = gone_first
    lazy = False
    if own:
        m = own[0]
        volume = VolumeDir(pod_uid=left.id, plugin="", name=os.path.basename(point), path=point,
                           mount_id=m.mount_id, fs_type=m.fs_type, source=m.source)
        unmounted = unmount_volume(volume, proc_root=proc_root, timeout=unmount_timeout)
        if not unmounted.ok:
            return unmounted
        lazy = unmounted.lazy
    removed = remove_dir_at(parent_fd, left.id, inode=left.inode, path=left.path, proc_root=proc_root,
                            timeout=timeout)
    if own and removed.ok:
        how = "lazily detached" if lazy else "unmounted"
        return Outcome.done(f"{runc}{how} {point}; {removed.detail}", lazy=lazy)
    if runc and removed.ok:
        return Outcome.done(f"{runc}{removed.detail}")
    return removed


# --- what runc keeps of a container outside its bundle ---------------------------------------------------

_MAX_STATE = 4 << 20
def _runc_leftovers(parent_fd: int, left: RuntimeLeftover, *, mounts: Sequence[Mount], runc_root: Path | None,
                    cgroup_root: Path | None, proc_root: Path, timeout: float) -> str | Outcome:
    """A shim that exits without containerd's cleanup (`runc delete`, a shim its daemon does not know) leaves
    runc's state dir of each container and the container's cgroups. They go in the bundle's step, before the
    bundle (whose config.json names the cgroups): a step cut short is met again with its bundle. What was
    removed (a detail prefix), or why the step stops here (the bundle stays)."""
    said = []
    # The cgroups first: one that still holds a process (EBUSY) stops the step before runc's state goes.
    if cgroup_root is not None:
        spec = None
        bundle = open_dir_below(parent_fd, left.id, path=left.path)
        if isinstance(bundle, int):
            try:
                spec = read_spec("config.json", dir_fd=bundle)
            finally:
                os.close(bundle)
        out = _remove_cgroups(left.id, cgroups_path(spec), mounts=mounts, cgroup_root=cgroup_root)
        if isinstance(out, Outcome):
            return out
        said.append(out)
    if runc_root is not None:
        out = _remove_runc_state(left.id, runc_root, proc_root=proc_root, timeout=timeout)
        if isinstance(out, Outcome):
            return out
        said.append(out)
    return "".join(f"{s}; " for s in said if s)


def _remove_runc_state(cid: str, runc_root: Path, *, proc_root: Path, timeout: float) -> str | Outcome:
    """`<runc root>/k8s.io/<id>`: kept while the init process its state.json names (pid and start time) runs."""
    root = os.path.realpath(os.fsdecode(runc_root))
    path = os.path.join(root, CRI_NAMESPACE, cid)
    try:
        root_fd = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        return ""
    except OSError as e:
        return Outcome.failed(f"cannot open {root}: {e.strerror}")
    try:
        ns_fd = open_dir_below(root_fd, CRI_NAMESPACE, path=os.path.dirname(path))
        if isinstance(ns_fd, Outcome):
            return "" if ns_fd.already_gone else ns_fd
        try:
            state_fd = open_dir_below(ns_fd, cid, path=path)
            if isinstance(state_fd, Outcome):
                return "" if state_fd.already_gone else state_fd
            try:
                inode = os.fstat(state_fd).st_ino
                raw = read_small("state.json", _MAX_STATE, dir_fd=state_fd)
                # Only a missing state.json says no init runs: one that exists but cannot be read (beyond the
                # bound, not a regular file) may name one that does.
                busy = ("its state.json cannot be read (not a regular file, or beyond the bound)"
                        if raw is None and _exists("state.json", state_fd) else _runc_init_alive(raw, cid, proc_root))
            finally:
                os.close(state_fd)
            if busy is not None:
                return Outcome.failed(f"not touched: {path}: {busy}")
            removed = remove_dir_at(ns_fd, cid, inode=inode, path=path, proc_root=proc_root, timeout=timeout)
            if not removed.ok:
                return removed
            return "" if removed.already_gone else f"removed runc's state {path}"
        finally:
            os.close(ns_fd)
    finally:
        os.close(root_fd)


def _exists(name: str, dir_fd: int) -> bool:
    """`name` is in the directory (any type, a symlink not followed); a doubt (not ENOENT) counts as there."""
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def _runc_init_alive(raw: bytes | None, cid: str, proc_root: Path) -> str | None:
    """Why runc's state may still be a running container's; None: it is not (no state.json is none)."""
    if raw is None:
        return None
    state = load_json(raw)
    if state is None:
        return "its state.json cannot be read"
    if not isinstance(state, dict) or state.get("id") != cid:
        return "its state.json names another container"
    pid, start = state.get("init_process_pid"), state.get("init_process_start")
    if not isinstance(pid, int) or pid <= 0:
        return None
    ticks = start_ticks(proc_root, pid)
    if ticks is None:
        return None  # no such process
    if not isinstance(start, int) or ticks == start:
        return f"its init process (pid {pid}) runs"
    return None  # the pid is another process's now


def _remove_cgroups(cid: str, cgroups_path: str | None, *, mounts: Sequence[Mount],
                    cgroup_root: Path) -> str | Outcome:
    """The container's own cgroup in each hierarchy mounted below `cgroup_root`: `<hierarchy><cgroupsPath>`
    (the cgroupfs driver's path; the systemd driver's `slice:prefix:name` scopes are systemd's to remove),
    whose last component is the container id, removed with rmdir: the kernel refuses a cgroup that holds a
    process or a child cgroup (EBUSY), so a cgroup in use is never removed. Parents (the pod's cgroup, the
    kubelet's) are not touched. Components are opened with O_NOFOLLOW from the hierarchy's mount point."""
    if not cgroups_path or ":" in cgroups_path or not cgroups_path.startswith("/"):
        return ""  # the systemd driver's (systemd removes its scopes), or relative to a cgroup not known here
    parts = [p for p in cgroups_path.split("/") if p]
    if not parts or parts[-1] != cid or any(p in (".", "..") for p in parts):
        return Outcome.failed(f"not touched: the bundle's cgroupsPath {cgroups_path!r} is not its container's")
    base = os.path.realpath(os.fsdecode(cgroup_root))
    stacks: dict[str, list[Mount]] = {}
    for m in mounts:
        stacks.setdefault(m.mount_point, []).append(m)
    points = sorted(p for p, stack in stacks.items() if (p == base or p.startswith(base + "/"))
                    and any(_hierarchy(m) for m in stack))
    if not points:
        return Outcome.failed(f"cannot tell whether the container's cgroup is gone: no cgroup hierarchy is mounted"
                              f" at {base} (--cgroup-root)")
    removed, busy, crossed, blind = 0, [], [], []
    for point in points:
        if not _holds(point, parts[0]) and not root_cgroup(point, top_of(stacks[point]).fs_type):
            # A cgroup namespace's view (the agent's own /sys/fs/cgroup) or a subtree: the node's tree, where
            # the container's cgroup would be, is not in sight, so its absence here says nothing.
            blind.append(f"{point} is a cgroup namespace's view or a subtree without {parts[0]!r}")
            continue
        target = os.path.join(point, *parts)
        # The walk stays on the hierarchy's file system: a mount on the way, at the cgroup, or stacked over the
        # hierarchy's mount point is another file system's directory, not this container's cgroup.
        on_way = [mp for mp in stacks if mp.startswith(point + "/") and (target + "/").startswith(mp + "/")]
        if not _hierarchy(top_of(stacks[point])):
            on_way.insert(0, point)
        if on_way:
            crossed.append(f"{target}: {sorted(on_way)[0]} is mounted on the way")
            continue
        try:
            fd = os.open(point, _DIR_FLAGS)
        except OSError:
            continue
        try:
            for i, name in enumerate(parts[:-1]):
                next_fd = open_dir_below(fd, name, path=os.path.join(point, *parts[:i + 1]))
                os.close(fd)
                fd = -1
                if isinstance(next_fd, Outcome):
                    break
                fd = next_fd
            if fd < 0:
                continue
            try:
                os.rmdir(cid, dir_fd=fd)
                removed += 1
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    continue
                busy.append(f"{os.path.join(point, *parts)}: {e.strerror}")
        finally:
            if fd >= 0:
                os.close(fd)
    if crossed:
        return Outcome.failed(f"not touched further: a mount crossed on the container's cgroup path: {crossed[:3]}")
    if blind:
        return Outcome.failed(f"cannot tell whether the container's cgroup is gone: {blind[:3]}; mount the node's"
                              " cgroup tree and point --cgroup-root at it")
    if busy:
        return Outcome.failed(f"not touched further: the container's cgroup is in use or cannot go: {busy[:3]}")
    return f"removed its empty cgroup in {removed} hierarchies" if removed else ""


def _hierarchy(m: Mount) -> bool:
    """A cgroup hierarchy's mount. Its root field does not tell the node's tree from a namespace's view: a
    cgroup namespace shows its own root as `/` and the node's root as `/..` components, so `root_cgroup`
    asks the kernel's files instead."""
    return m.fs_type in ("cgroup", "cgroup2") and (m.root == "/" or set(m.root.strip("/").split("/")) == {".."})


_V2_NOT_ON_ROOT = ("cgroup.type", "cgroup.events", "cgroup.freeze")
"""Files the kernel gives every cgroup v2 cgroup but the hierarchy's root (CFTYPE_NOT_ON_ROOT)."""
_V1_ONLY_ON_ROOT = ("release_agent", "cgroup.sane_behavior")
"""Files the kernel gives a cgroup v1 hierarchy's root cgroup only (CFTYPE_ONLY_ON_ROOT)."""


def root_cgroup(point: str, fs_type: str) -> bool:
    """Whether the directory at a hierarchy's mount point is the hierarchy's root cgroup, the node's whole
    tree: not the root of a cgroup namespace (a pod's own /sys/fs/cgroup on cgroup v2) or a bind-mounted
    subtree. A file that cannot be checked counts against it."""
    def there(name: str) -> bool | None:
        try:
            os.lstat(os.path.join(point, name))
        except FileNotFoundError:
            return False
        except OSError:
            return None
        return True
    if fs_type == "cgroup2":
        return all(there(name) is False for name in _V2_NOT_ON_ROOT)
    if there("tasks") is False and there("cgroup.procs") is False:
        return True  # no cgroup's files at all: nothing says this is a subtree
    return any(there(name) is True for name in _V1_ONLY_ON_ROOT)


def _holds(point: str, name: str) -> bool:
    """The hierarchy shows the top of the container's cgroup path (`kubepods`, `kubepods.slice`, the kubelet's
    --cgroup-root): a directory, not followed if a symlink."""
    try:
        return stat.S_ISDIR(os.lstat(os.path.join(point, name)).st_mode)
    except OSError:
        return False


def cgroup_view_doubt(cgroup_root: Path, mounts: Sequence[Mount]) -> str | None:
    """Why the cgroup hierarchies below `cgroup_root` may not be the node's (container cgroups are then
    reported "cannot tell", never "already gone"); None: each is its hierarchy's root cgroup or shows the
    kubelet's pod tree (`kubepods`, `kubepods.slice`)."""
    base = os.path.realpath(os.fsdecode(cgroup_root))
    stacks: dict[str, list[Mount]] = {}
    for m in mounts:
        stacks.setdefault(m.mount_point, []).append(m)
    points = sorted(p for p, stack in stacks.items() if (p == base or p.startswith(base + "/"))
                    and _hierarchy(top_of(stack)))
    if not points:
        return f"no cgroup hierarchy is mounted at {base}"
    blind = [p for p in points if not root_cgroup(p, top_of(stacks[p]).fs_type)
             and not any(_holds(p, name) for name in ("kubepods", "kubepods.slice"))]
    if blind:
        return (f"{', '.join(blind[:3])}: a cgroup namespace's view or a subtree, not the node's cgroup tree"
                " (no kubepods in it)")
    return None


def _identity_doubt(left: RuntimeLeftover, proc_root: Path) -> str | None:
    assert left.pid is not None
    if start_ticks(proc_root, left.pid) != left.start_time:
        return f"pid {left.pid} is another process now (another start time)"
    if shim_args(proc_root, left.pid) != (left.id, left.address, False):
        return f"pid {left.pid} is no longer the shim of {left.id[:12]}"
    return None


def _socket_doubt(left: RuntimeLeftover, endpoint: str | None, proc_root: Path) -> str | None:
    """The shim's `-address`, seen from its own mount namespace, must be the endpoint's socket file: another
    containerd may listen at the same path in another mount namespace."""
    assert left.pid is not None
    if not endpoint:
        return None  # refused below: no runtime to ask
    try:
        want = socket_file(str(socket_path(endpoint or "")))
    except EndpointError as e:
        return f"no runtime socket to compare the shim's with: {e}"
    if serves_socket(proc_root, left.pid, left.address, want) is not True:
        return f"pid {left.pid}'s -address {left.address} is not the endpoint's socket as its mount namespace shows it"
    return None


def _wait_exit(pidfd: int, seconds: float) -> bool:
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if poller.poll(int(left * 1000) + 1):
            return True


_CGROUP_ID = re.compile(r"(?:cri-containerd-)?([0-9a-f]{64})(?:\.scope)?")
"""The last component of a container's cgroup, as the runc shim makes it: `<id>` (cgroupfs) or
`cri-containerd-<id>.scope` (systemd)."""


def _ppid(proc_root: Path, pid: int) -> int | None:
    try:
        raw = (proc_root / str(pid) / "stat").read_bytes()
        return int(raw[raw.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _container_of(proc_root: Path, pid: int) -> str | None:
    """The container id every cgroup hierarchy of the process names, or None (not a container's).

    On a hybrid node (cgroup v1 controllers, plus the v2 hierarchy at /sys/fs/cgroup/unified) a runtime may
    leave its containers at the root of the v2 hierarchy (`0::/`, which holds no controller there): that
    line alone names nothing, and the v1 hierarchies decide. `0::/` with no v1 line (a v2-only node) is the
    root cgroup, no container's."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    lines = [line.split(":", 2) for line in text.splitlines()]
    if any(len(parts) != 3 for parts in lines):
        return None
    v1 = [parts for parts in lines if parts[0] != "0"]
    found = set()
    for number, _, path in lines:
        if number == "0" and path == "/" and v1:
            continue  # hybrid: the unified hierarchy's root, not joined
        m = _CGROUP_ID.fullmatch(path.rsplit("/", 1)[-1])
        if m is None:
            return None
        found.add(m.group(1))
    return found.pop() if len(found) == 1 else None


def _command(proc_root: Path, pid: int) -> str:
    raw = read_cmdline(proc_root, pid, 4096)  # within STAT_WAIT seconds: a process can lock its memory map
    if raw is None:
        return "?"
    argv0 = raw.split(b"\0", 1)[0]
    return os.path.basename(argv0).decode("utf-8", "replace") or "?"


class _RuncCall(Exception):
    """A child of the shim that is a `runc` call in flight (create, start, kill, delete of its containers)."""

    def __init__(self, pid: int, pidfd: int) -> None:
        super().__init__(pid)
        self.pid, self.pidfd = pid, pidfd


def _pin_children(shim_pid: int, proc_root: Path, *, runc_wait: bool = False) -> tuple[
        list[tuple[int, int, str]], str | None]:
    """The shim's children, each pinned with a pidfd and then seen again as a child of the (pinned) shim
    in a container's cgroup: (pid, pidfd, container id). The runc shim is the parent of its containers'
    init processes (and subreaper of what they leave). A child in no container's cgroup is a doubt; with
    `runc_wait`, one whose command is `runc` raises _RuncCall (holding its pidfd) so it can be waited for."""
    pinned: list[tuple[int, int, str]] = []
    try:
        pids = [int(e.name) for e in os.scandir(proc_root) if e.name.isdigit()]
    except OSError as e:
        return pinned, f"cannot list {proc_root}: {e.strerror}"
    for pid in pids:
        if _ppid(proc_root, pid) != shim_pid:
            continue
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        except OSError as e:
            _close_all(pinned)
            return [], f"cannot pin pid {pid}, a child of the shim: {e.strerror}"
        # Read after the pidfd is open: a child of the pinned shim now is the process the pidfd holds.
        cid = _container_of(proc_root, pid) if _ppid(proc_root, pid) == shim_pid else None
        if cid is None:
            if _ppid(proc_root, pid) == shim_pid:
                _close_all(pinned)
                command = _command(proc_root, pid)
                if runc_wait and command == "runc":
                    raise _RuncCall(pid, fd)
                os.close(fd)
                what = "runc, a call still in flight" if command == "runc" else command
                return [], f"pid {pid} ({what}), a child of the shim, is in no container's cgroup"
            os.close(fd)
            continue
        pinned.append((pid, fd, cid))
    return pinned, None


def _close_all(pinned: list[tuple[int, int, str]]) -> None:
    for _, fd, _ in pinned:
        with contextlib.suppress(OSError):
            os.close(fd)


def _stop_containers(pinned: list[tuple[int, int, str]]) -> tuple[str, list[int]]:
    """SIGKILL to each pinned container process (a container's init: unless its pid namespace is shared or
    the host's, the kernel then kills every process in it), then a bounded wait: what it says about them,
    and the pids still running."""
    left = []
    for pid, fd, _ in pinned:
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            continue
        if not _wait_exit(fd, _KILL_WAIT):
            left.append(pid)
    ids = sorted({cid[:12] for _, _, cid in pinned})
    return (f"; killed its {len(pinned)} container process(es) ({', '.join(ids)})" if pinned else ""), left


def stop_shim(left: RuntimeLeftover, *, endpoint: str | None, timeout: float, proc_root: Path = Path("/proc"),
              term_wait: float = TERM_WAIT) -> Outcome:
    """SIGTERM, a bounded wait, SIGKILL; any doubt about who the pid is, or about the runtime, signals nothing.

    The containers the shim ran outlive it when no containerd cleans up after it (a shim its daemon does
    not know): their init processes, the shim's children, are pinned with pidfds before anything is
    signalled, must each be in a container's cgroup whose id a fresh runtime list does not show either, and
    get SIGKILL before the shim is signalled: the live shim keeps them findable, so a step cut short after
    the kill, or a container that outlives it, is met again by the next attempt (and the shim is left
    running until none is left)."""
    if left.pid is None or left.start_time is None or not is_container_id(left.id):
        return Outcome.failed("refused: no verified pid, start time and id")
    try:
        own = os.readlink(proc_root / "self") == str(os.getpid())
    except OSError:
        own = False
    if not own:
        return Outcome.failed(f"refused: {proc_root} is not this process's pid namespace; its pids cannot be"
                              " signalled from here")
    try:
        pidfd = os.pidfd_open(left.pid)
    except ProcessLookupError:
        return Outcome.gone(f"pid {left.pid} has exited")
    except OSError as e:
        return Outcome.failed(f"cannot pin pid {left.pid}: {e.strerror}")
    pinned: list[tuple[int, int, str]] = []
    try:
        # Read after the pidfd is open: if it matches now, the pidfd is that very process.
        doubt = _identity_doubt(left, proc_root) or _socket_doubt(left, endpoint, proc_root)
        if doubt is not None:
            return Outcome.changed(doubt)
        try:
            pinned, doubt = _pin_children(left.pid, proc_root, runc_wait=True)
        except _RuncCall as call:
            # The shim is working on its containers (a `runc` it ran): never signalled mid-call; given a
            # bounded wait to end, then its children are read again (still one: the step fails, retried).
            try:
                _wait_exit(call.pidfd, _RUNC_WAIT)
            finally:
                os.close(call.pidfd)
            pinned, doubt = _pin_children(left.pid, proc_root)
        if doubt is not None:
            return Outcome.failed(f"not signalled: {doubt}")
        try:
            signal.pidfd_send_signal(pidfd, 0)  # still the shim: its pid was not handed on during the scan
        except ProcessLookupError:
            return Outcome.gone(f"shim pid {left.pid} exited")
        doubt = runtime_doubt(left, endpoint=endpoint, timeout=timeout, also=[cid for _, _, cid in pinned])
        if doubt is not None:
            return Outcome.changed(doubt) if doubt.startswith("the runtime lists") else Outcome.failed(doubt)
        killed, survivors = _stop_containers(pinned)
        if survivors:
            return Outcome.failed(f"shim {left.id[:12]} not signalled: its container process(es) {survivors} still"
                                  f" run {_KILL_WAIT:g}s after SIGKILL")
        for sig, wait in ((signal.SIGTERM, term_wait), (signal.SIGKILL, _KILL_WAIT)):
            try:
                signal.pidfd_send_signal(pidfd, sig)
            except ProcessLookupError:
                return Outcome.gone(f"shim pid {left.pid} exited{killed}")
            if _wait_exit(pidfd, wait):
                return Outcome.done(f"stopped shim {left.id[:12]} (pid {left.pid}) with {sig.name}{killed}")
        return Outcome.failed(f"shim pid {left.pid} still runs {term_wait + _KILL_WAIT:g}s after SIGTERM and SIGKILL")
    finally:
        _close_all(pinned)
        os.close(pidfd)
