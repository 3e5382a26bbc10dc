"""containerd's own things on the host, by the id they name (read only): sandbox state directories under
`<state>/io.containerd.grpc.v1.cri/sandboxes/<id>` (each with its shm mount), task bundles under
`<state>/io.containerd.runtime.v2.task/k8s.io/<id>` (with the rootfs mount), and
`containerd-shim-runc-v2 ... -id <id>` processes. Netns files under `<state>/io.containerd.grpc.v1.cri/netns/`
are network namespaces, read by `inventory.netns.scan_runtime_netns`.

Planning compares the ids with what the runtime lists. Symlinks are not followed: a directory on the way
that resolves outside the state dir, a symlink or an odd name is listed with the reason it cannot be
reclaimed. Nothing is opened but directories, a task's `init.pid` and `config.json` (regular files, bounded)
and /proc/<pid>/{cmdline,stat,cgroup}.
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from nodegc.hostio.libc import stat_in_root
from nodegc.hostio.mountinfo import MountIndex, top_of
from nodegc.model.resources import UNTOLD_PROCESS_CAUSE, Kind, Mount, ReadProblem
from nodegc.model.runtime import UNTOLD_PROCESS, RuntimeLeftover

_ID = re.compile(r"[0-9a-f]{64}")
CRI_DIR = "io.containerd.grpc.v1.cri"
TASKS_DIR = "io.containerd.runtime.v2.task"
CRI_NAMESPACE = "k8s.io"
"""containerd's namespace of the CRI plugin. Other namespaces are other clients' (Docker's `moby`, nerdctl's
`default`): the CRI lists none of their containers, so their tasks and shims are never judged."""
_SHIM = "containerd-shim-runc-v2"
_MAX_CMDLINE = 8192
_MAX_CONFIG = 1 << 20
_SANDBOX_ANNOTATION = "io.kubernetes.cri.sandbox-id"
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def is_container_id(name: str) -> bool:
    return _ID.fullmatch(name) is not None


def _show(name: str) -> str:
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _entries(path: str, problems: list[ReadProblem]) -> list[os.DirEntry[str]]:
    """A folder that exists but cannot be listed (EACCES, EIO) is a read problem: the leftovers it would
    show are not gone, so none of their items may close or move on."""
    try:
        with os.scandir(path) as it:
            return list(it)
    except FileNotFoundError:
        return []
    except OSError as e:
        problems.append(ReadProblem(Kind.RUNTIME_LEFTOVER, _show(path), f"cannot list: {e.strerror or e}"))
        return []


def expected_mount(what: str, path: str) -> str:
    """The one mount a sandbox dir (`shm`) or a task bundle (`rootfs`) holds, exactly there."""
    return os.path.join(path, "shm" if what == "sandbox_dir" else "rootfs")


def scan_leftovers(state_dir: Path, *, mounts: Iterable[Mount], proc_root: Path = Path("/proc"),
                   socket: str | None = None) -> tuple[RuntimeLeftover, ...]:
    return read_leftovers(state_dir, mounts=mounts, proc_root=proc_root, socket=socket)[0]


def read_leftovers(state_dir: Path, *, mounts: Iterable[Mount], proc_root: Path = Path("/proc"),
                   socket: str | None = None) -> tuple[tuple[RuntimeLeftover, ...], tuple[ReadProblem, ...]]:
    """The leftovers, and the folders that could not be listed."""
    problems: list[ReadProblem] = []
    base = os.path.realpath(os.fsdecode(state_dir))
    index = MountIndex.build(tuple(mounts))
    out: list[RuntimeLeftover] = []
    sandboxes = os.path.join(base, CRI_DIR, "sandboxes")
    out += _id_dirs("sandbox_dir", sandboxes, index, proc_root, problems)
    tasks = os.path.join(base, TASKS_DIR)
    if _inside(tasks, base):
        out += _id_dirs("task_dir", os.path.join(tasks, CRI_NAMESPACE), index, proc_root, problems)
    out += _shims(proc_root, socket, problems)
    return tuple(out), tuple(problems)


def _inside(path: str, base: str) -> bool:
    """`path` (a directory under the resolved state dir) resolves to itself: no symlink on the way."""
    return os.path.realpath(path) == path and path.startswith(base + "/")


def _id_dirs(what: str, parent: str, index: MountIndex, proc_root: Path,
             problems: list[ReadProblem]) -> list[RuntimeLeftover]:
    if not os.path.lexists(parent):
        return []
    if not _inside(parent, os.path.dirname(parent)) or os.path.islink(parent):
        return [RuntimeLeftover(what, "", parent, problem=f"{_show(parent)} resolves to"
                                f" {_show(os.path.realpath(parent))}: outside the state dir, not read")]
    found: list[RuntimeLeftover] = []
    for e in _entries(parent, problems):
        name_ok = is_container_id(e.name)
        if e.is_symlink():
            found.append(RuntimeLeftover(what, e.name if name_ok else "", e.path,
                                         problem="a symlink: not followed, not touched"))
            continue
        if not e.is_dir(follow_symlinks=False):
            continue
        if not name_ok:
            found.append(RuntimeLeftover(what, "", e.path, problem=f"{_show(e.name)!r} is not a container id"))
            continue
        found.append(_id_dir(what, e, index, proc_root))
    return found


def _id_dir(what: str, e: os.DirEntry[str], index: MountIndex, proc_root: Path) -> RuntimeLeftover:
    try:
        st = e.stat(follow_symlinks=False)
    except OSError as err:
        return RuntimeLeftover(what, e.name, e.path, problem=f"cannot stat: {err.strerror}")
    point = expected_mount(what, e.path)
    below = index.below(e.path)
    at_point = [m for m in below if m.mount_point == point]
    others = sorted({m.mount_point for m in below if m.mount_point != point})
    if len(at_point) > 1:
        others.append(f"{point} ({len(at_point)} mounts stacked)")
    top = top_of(at_point) if at_point else None
    sandbox_id, busy = (None, None)
    if what == "task_dir":
        sandbox_id, busy = _task(e.path, proc_root)
    return RuntimeLeftover(what, e.name, e.path, mounted=top is not None, inode=st.st_ino, mtime=st.st_mtime,
                           mount_id=top.mount_id if top else None, mount_point=point, other_mounts=tuple(others),
                           sandbox_id=sandbox_id, busy=busy)


def read_small(path: str, limit: int, *, dir_fd: int | None = None) -> bytes | None:
    """A regular file's bytes (never a symlink, FIFO or device), at most `limit`; None otherwise. With
    `dir_fd`, `path` is a name inside that directory."""
    try:
        fd = os.open(path, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        return os.read(fd, limit + 1)[:limit]
    except OSError:
        return None
    finally:
        os.close(fd)


def load_json(raw: bytes) -> Any:
    """The parsed document, or None when it cannot be parsed (malformed, or nested too deeply: the decoder
    raises RecursionError there, not ValueError)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def read_spec(path: str, *, dir_fd: int | None = None) -> Any:
    """A bundle's config.json, parsed (`read_small`, bounded); None when it is missing or unreadable."""
    raw = read_small(path, _MAX_CONFIG, dir_fd=dir_fd)
    return None if raw is None else load_json(raw)


def cgroups_path(spec: Any) -> str | None:
    """The spec's `linux.cgroupsPath`, when it is a string."""
    linux = spec.get("linux") if isinstance(spec, dict) else None
    path = linux.get("cgroupsPath") if isinstance(linux, dict) else None
    return path if isinstance(path, str) else None


def _task(path: str, proc_root: Path) -> tuple[str | None, str | None]:
    """(its sandbox id, why it may be in use) from the bundle's config.json and init.pid."""
    sandbox_id: str | None = None
    spec = read_spec(os.path.join(path, "config.json"))
    cgroup = cgroups_path(spec)
    annotations = spec.get("annotations") if isinstance(spec, dict) else None
    if isinstance(annotations, dict) and isinstance(annotations.get(_SANDBOX_ANNOTATION), str):
        found = annotations[_SANDBOX_ANNOTATION]
        sandbox_id = found if is_container_id(found) else None
    pid_text = read_small(os.path.join(path, "init.pid"), 32)
    if pid_text is None or not pid_text.strip().isdigit():
        return sandbox_id, None
    pid = int(pid_text.strip())
    if not os.path.exists(f"{proc_root}/{pid}"):
        return sandbox_id, None
    if cgroup and ":" not in cgroup:
        # A reused pid is another process: the init process lives in the task's cgroup. /proc/<pid>/cgroup
        # shows it relative to the reader's cgroup namespace (`/../../<qos>/pod<uid>/<id>` from an agent in
        # a namespace of its own), so its last component (the container's own) is what must match.
        try:
            mine = (proc_root / str(pid) / "cgroup").read_text()
        except OSError:
            mine = None
        if mine is not None and not _in_cgroup(mine, cgroup):
            return sandbox_id, None
    return sandbox_id, f"its init process (pid {pid}) is alive"


def _in_cgroup(proc_cgroup: str, cgroups_path: str) -> bool:
    """Whether a /proc/<pid>/cgroup text names the cgroup `cgroups_path` in some hierarchy: verbatim, or by
    its last component (the path as another cgroup namespace spells it keeps that one)."""
    if cgroups_path in proc_cgroup:
        return True
    leaf = cgroups_path.rstrip("/").rsplit("/", 1)[-1]
    return bool(leaf) and any(line.split(":", 2)[-1].rstrip("/").rsplit("/", 1)[-1] == leaf
                              for line in proc_cgroup.splitlines())


def boot_time(proc_root: Path) -> float | None:
    try:
        for line in (proc_root / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def start_ticks(proc_root: Path, pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot."""
    try:
        raw = (proc_root / str(pid) / "stat").read_bytes()
        return int(raw[raw.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def shim_args(proc_root: Path, pid: int) -> tuple[str | None, str | None, bool] | None:
    """(-id, -address, whether it runs the `delete` action) of a containerd-shim-runc-v2 process of the
    CRI's namespace; None when the pid is no such shim, or its command line cannot be read (nor within
    STAT_WAIT seconds: `read_cmdline`)."""
    return _shim_args_of(read_cmdline(proc_root, pid))


def read_cmdline(proc_root: Path, pid: int, limit: int = _MAX_CMDLINE) -> bytes | None:
    """/proc/<pid>/cmdline's first `limit` bytes within STAT_WAIT seconds (None otherwise, or unreadable).
    The kernel reads it from the process's memory under that process's mmap lock, which the process can hold
    for ever (an mmap of a FUSE file that waits on a read nobody answers): see `_bounded`."""
    return _bounded(("cmdline", f"{os.fspath(proc_root)}/{pid}"), lambda: _cmdline(proc_root, pid, limit))


def _cmdline(proc_root: Path, pid: int, limit: int = _MAX_CMDLINE) -> bytes | None:
    try:
        with open(proc_root / str(pid) / "cmdline", "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def _shim_args_of(raw: bytes | None) -> tuple[str | None, str | None, bool] | None:
    if raw is None:
        return None
    argv = raw.split(b"\0")
    if not argv or not argv[0].endswith(_SHIM.encode()):
        return None
    args = [a.decode("utf-8", "replace") for a in argv]
    if "-namespace" not in args[:-1] or args[args.index("-namespace") + 1] != CRI_NAMESPACE:
        return None  # another containerd client's shim (Docker, nerdctl): the CRI cannot know its id
    sid = args[args.index("-id") + 1] if "-id" in args[:-1] else None
    address = args[args.index("-address") + 1] if "-address" in args[:-1] else None
    return sid, address, "delete" in args[1:]


def _shims(proc_root: Path, socket: str | None, problems: list[ReadProblem]) -> list[RuntimeLeftover]:
    found: list[RuntimeLeftover] = []
    try:
        entries = [e for e in os.scandir(proc_root) if e.name.isdigit()]
    except OSError:
        return found
    btime = boot_time(proc_root)
    ticks = os.sysconf("SC_CLK_TCK")
    # The endpoint and the shims' -address may spell one socket two ways (/var/run is a link to /run).
    want = os.path.realpath(socket) if socket is not None else None
    want_file = socket_file(socket) if socket is not None else None
    served: dict[_ShimKey, bool] = _served[0]
    answers: dict[_ShimKey, bool] = {}
    cmdlines, stalled = _cmdlines(proc_root, [int(e.name) for e in entries])
    for pid in stalled:
        # Any process may be a shim, of any id: while one cannot be told, no leftover is judged (planning).
        # A pod can hold that on purpose, so it is a read problem of its own cause too: logged with the pid,
        # counted by cause (nodegc_scan_read_problems), shown on the dashboard.
        why = (f"{UNTOLD_PROCESS}: its command line could not be read within {STAT_WAIT:g}s (its memory map is"
               " locked), so whether it is a shim, and of which id, cannot be told")
        found.append(RuntimeLeftover("shim", "", f"{proc_root}/{pid}", pid=pid, problem=why))
        problems.append(ReadProblem(Kind.RUNTIME_LEFTOVER, f"{proc_root}/{pid}",
                                    f"pid {pid}: {why}; no runtime leftover is judged", UNTOLD_PROCESS_CAUSE))
    for e in entries:
        pid = int(e.name)
        args = _shim_args_of(cmdlines.get(pid))
        if args is None:
            continue
        sid, address, _ = args
        if sid and is_container_id(sid) and (socket is None or address == socket
                                             or (address is not None and _realpath(address) == want)):
            start = start_ticks(proc_root, pid)
            started = btime + start / ticks if btime is not None and start is not None else None
            # `... -bundle <dir> delete` is containerd cleaning up after a shim that exited: it uses the
            # bundle too, and is never signalled.
            cleanup = "containerd's cleanup of an exited shim (`delete`)" if args[2] else None
            if socket is not None:
                key = (os.fspath(proc_root), pid, start, address, want_file)
                serves = served.get(key) if key in served else serves_socket(proc_root, pid, address, want_file)
                if serves is not None and start is not None:
                    answers[key] = serves
                if serves is False:
                    continue  # another containerd's, in another mount namespace at the same socket path
                if serves is None:
                    cleanup = cleanup or ("which containerd it serves cannot be told: its -address socket, as"
                                          " its mount namespace shows it, cannot be compared with the endpoint's")
            found.append(RuntimeLeftover("shim", sid, f"{proc_root}/{e.name}", pid=pid, start_time=start,
                                         mtime=started, address=address, problem=cleanup))
    _served[0] = answers  # the shims of this scan only
    return found


def _cmdlines(proc_root: Path, pids: list[int]) -> tuple[dict[int, bytes | None], list[int]]:
    """Each pid's command line (None: unreadable), read by one thread for the whole list rather than a thread
    each (a node runs thousands of processes), and the pids not read. A read that has not returned after
    STAT_WAIT seconds (see `read_cmdline`) leaves its thread behind, waiting under that pid's key (a later
    scan does not read that pid again while it waits), and a new thread goes on with the next pid; once
    _MAX_WAITING looks wait, the rest are not read either."""
    results: dict[int, bytes | None] = {}
    stalled: list[int] = []
    root = os.fspath(proc_root)
    with _waiting_lock:
        for k in [k for k, t in _waiting.items() if not t.is_alive()]:
            del _waiting[k]
        waiting = {k[1] for k in _waiting if k[0] == "cmdline"}
    todo: list[int] = []
    for pid in pids:
        (stalled if f"{root}/{pid}" in waiting else todo).append(pid)
    while todo:
        batch = todo
        finished = threading.Event()
        progress = {"done": 0, "at": time.monotonic(), "cancelled": 0}

        def run(batch: list[int] = batch, finished: threading.Event = finished,
                progress: dict[str, float] = progress) -> None:
            for pid in batch:
                raw = _cmdline(proc_root, pid)
                if progress["cancelled"]:
                    return  # given up on: the pids after it are another thread's
                results[pid] = raw
                progress["done"] += 1
                progress["at"] = time.monotonic()
            finished.set()

        with _waiting_lock:
            if len(_waiting) >= _MAX_WAITING:
                stalled += batch
                break
            thread = threading.Thread(target=run, name="nodegc-cmdlines", daemon=True)
        thread.start()
        # Woken at the end, or to look how long the read in progress has taken (progress is counted
        # without a lock: one writer, and a pid read twice after a give-up is only read twice).
        while not finished.wait(max(STAT_WAIT - (time.monotonic() - progress["at"]), 0.0)):
            if time.monotonic() - progress["at"] >= STAT_WAIT:
                progress["cancelled"] = 1
                break
        done = int(progress["done"])
        if finished.is_set() or done >= len(batch):
            thread.join()
            break
        with _waiting_lock:  # its thread stays blocked in the kernel on that pid
            _waiting[("cmdline", f"{root}/{batch[done]}")] = thread
        stalled.append(batch[done])
        todo = batch[done + 1:]
    return results, sorted(stalled)


_ShimKey = tuple[str, int, int | None, str | None, tuple[int, int] | None]
_served: list[dict[_ShimKey, bool]] = [{}]
"""Whether each shim of the last scan serves the endpoint's socket, by (proc root, pid, start time, -address,
the endpoint's socket file): fixed for a shim's life (a new socket file is another key), so a scan stats only the
shims it has not seen yet. The answers a step acts on are read fresh (`reclaim.runtime_leftovers`)."""


def _realpath(path: str) -> str | None:
    """`os.path.realpath(path)` within STAT_WAIT seconds (None otherwise): it looks at every component."""
    return _bounded(("realpath", path), lambda: os.path.realpath(path))


def socket_file(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISSOCK(st.st_mode) else None


def serves_socket(proc_root: Path, pid: int, address: str | None, want: tuple[int, int] | None) -> bool | None:
    """Whether a shim's `-address` is the endpoint's socket file as the shim's own mount namespace shows it.
    Another containerd in another mount namespace (a nested node, a second runtime) may listen at the same
    path: then the file differs (False), and its shims are not this runtime's. None: it cannot be told (nor
    within STAT_WAIT seconds: see `_bounded`)."""
    if want is None or not address or not address.startswith("/"):
        return None
    root = proc_root / str(pid) / "root"
    st = _bounded((os.fspath(root), address), lambda: stat_in_root(root, address))
    if st is None:
        return None
    return stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == want


STAT_WAIT = 2.0
"""Seconds a look at a shim's `-address` gets (its stat inside the shim's root, or its resolution in the
agent's own). Any process may name itself a shim, with any address, and a file system that never answers may
be on the way (an NFS volume whose server is gone, a FUSE mount nobody serves, in its mount namespace or a
pod's volume in the agent's): the look would never return, nor would the scan (the pod directory scan never
stats inside a volume, for the same reason). A read of a process's command line gets as long: the kernel
takes the process's mmap lock for it, which the process can hold for ever."""
_MAX_WAITING = 16
"""Looks still waiting past STAT_WAIT (their threads stay blocked in the kernel) before no more is tried."""
_waiting: dict[tuple[str, str], threading.Thread] = {}
_waiting_lock = threading.Lock()
_T = TypeVar("_T")


def _bounded(key: tuple[str, str], look: Callable[[], _T]) -> _T | None:
    """`look()` in a thread of its own, waited for STAT_WAIT seconds; None when it fails (OSError, ValueError),
    when it has not returned by then (the thread is left to end whenever the file system answers), or while a
    look of the same key, or _MAX_WAITING of them, still wait."""
    got: list[_T | None] = []

    def run() -> None:
        try:
            got.append(look())
        except (OSError, ValueError):
            got.append(None)

    with _waiting_lock:
        for k in [k for k, t in _waiting.items() if not t.is_alive()]:
            del _waiting[k]
        if key in _waiting or len(_waiting) >= _MAX_WAITING:
            return None
        thread = _waiting[key] = threading.Thread(target=run, name="nodegc-shim-address", daemon=True)
    thread.start()
    thread.join(STAT_WAIT)
    if thread.is_alive():
        return None
    with _waiting_lock:
        if _waiting.get(key) is thread:
            del _waiting[key]
    return got[0] if got else None
