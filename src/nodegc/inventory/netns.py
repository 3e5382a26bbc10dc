"""Network namespace files (`/run/netns/<name>`, and containerd's under its state dir) and the addresses
configured inside them.

A namespace file stays behind in two shapes: still bind-mounted (the namespace lives on, holding its
veth end and its IP) or a plain leftover file whose mount is gone. Both are reported; the mount state
and the inodes are the identity a later re-verify compares against.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import stat
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from nodegc.hostio.netlink import (
    DumpBoundError,
    NetlinkError,
    NetnsFile,
    NetnsFileChanged,
    RtnlSocket,
    open_many,
    open_netns,
)
from nodegc.model.memo import remembered
from nodegc.model.resources import DUMP_BOUND, UNREADABLE, Kind, Mount, NetnsEntry, ReadProblem
from nodegc.planning.owners import CRI_NETNS_SUBDIR

NSFS = "nsfs"
_BLANK = re.compile(r"\s")
"""Any character str.isspace() calls blank (the same set: Unicode whitespace)."""


class NetnsReadError(Exception):
    """The namespace could not be entered or its addresses could not be dumped; `cause` is one of
    model.resources.READ_CAUSES (DUMP_BOUND: a dump past its bound, a namespace filled on purpose)."""

    def __init__(self, message: str, *, of: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = DUMP_BOUND if isinstance(of, DumpBoundError) else UNREADABLE


def scan_netns(
    netns_dir: Path, mounts: Sequence[Mount], *, runtime_dir: bool = False
) -> tuple[tuple[NetnsEntry, ...], tuple[ReadProblem, ...]]:
    """Every file of the netns directory, with its mount state taken from the mount table.

    The mount table is the authority for `mounted`; the device of the file is a second witness, and when
    the two disagree the entry counts as mounted (a namespace that may be alive is never a leftover).
    `runtime_dir`: the directory is the runtime's (see `runtime_netns_dir`), and its entries say so.
    """
    problems: list[ReadProblem] = []
    entries: list[NetnsEntry] = []
    dir_str = os.path.normpath(os.fsdecode(netns_dir))
    try:
        dir_dev = os.stat(netns_dir).st_dev
        with os.scandir(netns_dir) as it:
            dirents = sorted(it, key=lambda e: e.name)
    except FileNotFoundError:
        return (), ()
    except OSError as e:
        return (), (ReadProblem(Kind.NETNS, dir_str, f"cannot list netns dir: {e.strerror or e}"),)

    nsfs_points, other_points = _mount_points(mounts, netns_dir)
    for dirent in dirents:
        entry, problem = _read_entry(
            dirent, dir_str=dir_str, dir_dev=dir_dev, nsfs_points=nsfs_points, other_points=other_points
        )
        if problem is not None:
            problems.append(problem)
        if entry is not None:
            entries.append(dataclasses.replace(entry, runtime_dir=True) if runtime_dir else entry)
    return tuple(entries), tuple(problems)


def runtime_netns_dir(state_dir: Path) -> Path:
    """Where containerd keeps netns files under its state dir (`netns_mounts_under_state_dir = true`)."""
    return state_dir / CRI_NETNS_SUBDIR


def scan_runtime_netns(
    state_dir: Path, mounts: Sequence[Mount], *, netns_dir: Path | None = None
) -> tuple[tuple[NetnsEntry, ...], tuple[ReadProblem, ...]]:
    """The netns files under the runtime's state dir, read like those of the netns dir.

    The state dir is trusted as configured; the directories below it are not followed when they are
    symlinks (a planted link would make nodegc inventory, and later unmount, files anywhere). The same
    directory as the netns dir (one configured as the other) is read once, as the netns dir.
    """
    directory = runtime_netns_dir(state_dir)
    problem = not_followed(state_dir)
    if problem == _ABSENT:
        return (), ()
    if problem is not None:
        return (), (ReadProblem(Kind.NETNS, os.fsdecode(directory), problem),)
    if netns_dir is not None and _same_dir(directory, netns_dir):
        return (), ()
    return scan_netns(directory, mounts, runtime_dir=True)


_ABSENT = "absent"


def is_runtime_netns_dir(state_dir: Path, netns_dir: Path) -> bool:
    """Whether the netns dir is the runtime's state-dir netns folder (at whatever path it is configured)."""
    return not_followed(state_dir) is None and _same_dir(runtime_netns_dir(state_dir), netns_dir)


def not_followed(state_dir: Path) -> str | None:
    """Why the runtime's netns directory under `state_dir` is not to be read or acted in (a component
    below the state dir is a symlink or not a directory), `"absent"` when it does not exist, or None."""
    current = os.fsdecode(state_dir)
    for part in CRI_NETNS_SUBDIR.split("/"):
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return _ABSENT
        except OSError as e:
            return f"cannot stat {current}: {e.strerror or e}"
        if stat.S_ISLNK(st.st_mode):
            return f"{current} is a symlink, not followed"
        if not stat.S_ISDIR(st.st_mode):
            return f"{current} is not a directory"
    return None


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.normpath(os.fsdecode(a)) == os.path.normpath(os.fsdecode(b))


def _mount_points(mounts: Sequence[Mount], netns_dir: Path) -> tuple[frozenset[str], frozenset[str]]:
    """Mount points below the netns dir, split by nsfs or not.

    The configured dir may be a symlink (/var/run/netns -> /run/netns) while mountinfo shows the real
    path, so points under the resolved dir are translated back to the configured spelling.
    """
    configured = os.path.normpath(os.fsdecode(netns_dir))
    resolved = os.path.realpath(configured)
    if not isinstance(mounts, tuple):
        return _points_below(mounts, configured, resolved)
    with _points_lock:
        last = _last_points.get((configured, resolved))
    if last is not None and last[0] is mounts:
        return last[1]
    found = _points_below(mounts, configured, resolved)
    with _points_lock:
        if len(_last_points) >= 4:
            _last_points.clear()
        _last_points[(configured, resolved)] = (mounts, found)
    return found


_Points = tuple[frozenset[str], frozenset[str]]
_last_points: dict[tuple[str, str], tuple[tuple[Mount, ...], _Points]] = {}
"""The last answer per directory (as configured, as resolved now), with the very mount table it came from:
the scan's table is the same object while its bytes are unchanged (`read_mounts(reuse=True)`), and a
tuple cannot change, so the same object gives the same answer."""
_points_lock = threading.Lock()


def _points_below(mounts: Sequence[Mount], configured: str, resolved: str) -> _Points:
    nsfs: set[str] = set()
    other: set[str] = set()
    # A point whose parent is one of the two dirs holds that dir's last name as written: normpath only
    # drops components, so a mount point without either name cannot be below them (most of a node's).
    names = (os.path.basename(configured), os.path.basename(resolved))
    for m in mounts:
        if names[0] not in m.mount_point and names[1] not in m.mount_point:
            continue
        point = os.path.normpath(m.mount_point)
        if resolved != configured and os.path.dirname(point) == resolved:
            point = os.path.join(configured, os.path.basename(point))
        if os.path.dirname(point) != configured:
            continue
        # Interned: the mount point's own string (the table's are) and the entry's path, not a third copy
        # of every namespace's path kept from one scan to the next.
        (nsfs if m.fs_type == NSFS else other).add(sys.intern(point))
    return frozenset(nsfs), frozenset(other)


def _read_entry(
    dirent: os.DirEntry[str],
    *,
    dir_str: str,
    dir_dev: int,
    nsfs_points: frozenset[str],
    other_points: frozenset[str],
) -> tuple[NetnsEntry | None, ReadProblem | None]:
    # Interned: the path the cache entries, the veths and the findings name, read anew every scan.
    name = sys.intern(dirent.name)
    path = sys.intern(os.path.join(dir_str, name))
    reason = _odd_name(name)
    if reason is not None:
        return None, ReadProblem(Kind.NETNS, path, reason)
    try:
        st = os.lstat(path)
        # d_ino from readdir is the inode of the file itself, under any mount stacked on it;
        # lstat of a mount point already answers with the mounted namespace.
        file_inode = dirent.inode()
    except FileNotFoundError:
        return None, None  # removed since the listing: nothing left to report
    except OSError as e:
        return None, ReadProblem(Kind.NETNS, path, f"cannot stat: {e.strerror or e}")
    if stat.S_ISLNK(st.st_mode):
        return None, ReadProblem(Kind.NETNS, path, "symlink in netns dir, not followed")
    if stat.S_ISDIR(st.st_mode):
        return None, ReadProblem(Kind.NETNS, path, "directory in netns dir")
    if not stat.S_ISREG(st.st_mode):
        return None, ReadProblem(Kind.NETNS, path, f"not a regular file (mode {st.st_mode:o})")
    if path in other_points and path not in nsfs_points:
        return None, ReadProblem(Kind.NETNS, path, "a non-nsfs filesystem is mounted on this file")

    in_table = path in nsfs_points
    on_other_dev = st.st_dev != dir_dev
    if not in_table and not on_other_dev:
        entry = NetnsEntry(name=name, path=path, mounted=False, file_inode=file_inode, mtime=st.st_mtime)
        return entry, None
    problem = None
    if not in_table:
        problem = ReadProblem(
            Kind.NETNS, path, "mount point missing from the mount table; kept as mounted"
        )
    # stat of an nsfs mount point is the namespace inode (what /proc/<pid>/ns/net points at)
    entry = NetnsEntry(
        name=name, path=path, mounted=True, ns_inode=st.st_ino, file_inode=file_inode, mtime=st.st_mtime,
        ns_dev=st.st_dev,
    )
    return entry, problem


@remembered(4096)
def _odd_name(name: str) -> str | None:
    """Names `ip netns` and the runtimes never create; such a file is reported, not inventoried."""
    if name.startswith("."):
        return "hidden name in netns dir"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "name is not valid UTF-8"
    if not name.isprintable() or _BLANK.search(name):
        return "name has control or blank characters"
    return None


_RUNTIME_DEPTH = len(CRI_NETNS_SUBDIR.split("/")) + 1


def count_tasks_in(proc_root: Path, namespaces: set[tuple[int, int]]) -> dict[tuple[int, int], int] | str:
    """How many tasks of the process table under `proc_root` are in each network namespace of
    `namespaces` ((device, inode) of its nsfs inode), or why the table could not be read whole.

    Every thread is looked at, not only each process's first: a thread can enter another namespace on
    its own (setns), and a namespace one thread of a daemon uses is in use. A task that ends during the
    walk (its entries vanish, a zombie's namespace links are gone) is in no namespace any more."""
    counts = dict.fromkeys(namespaces, 0)
    root = os.fsdecode(proc_root)
    try:
        with os.scandir(root) as it:
            pids = [e.name for e in it if e.name.isdigit()]
    except OSError as e:
        return f"cannot list {root}: {e.strerror or e}"
    for pid in pids:
        task_dir = os.path.join(root, pid, "task")
        try:
            with os.scandir(task_dir) as it:
                tids = [e.name for e in it if e.name.isdigit()]
        except (FileNotFoundError, ProcessLookupError):
            continue
        except OSError as e:
            return f"cannot list {task_dir}: {e.strerror or e}"
        for tid in tids:
            try:
                st = os.stat(os.path.join(task_dir, tid, "ns", "net"))
            except (FileNotFoundError, ProcessLookupError):
                continue
            except OSError as e:
                return f"cannot stat {os.path.join(task_dir, tid, 'ns', 'net')}: {e.strerror or e}"
            key = (st.st_dev, st.st_ino)
            if key in counts:
                counts[key] += 1
    return counts


def netns_file(entry: NetnsEntry) -> NetnsFile:
    """The entry's file as the scan recorded it: below its configured directory (a runtime-dir file below
    the state dir's folders too), the namespace inode and device it had (see `NetnsFile`)."""
    return NetnsFile(Path(entry.path), depth=_RUNTIME_DEPTH if entry.runtime_dir else 1,
                     inode=entry.ns_inode if entry.mounted else None, dev=entry.ns_dev if entry.mounted else None)


def read_netns_addresses(path: Path | NetnsFile) -> tuple[str, ...]:
    """Addresses inside the namespace, for tying a namespace without a CNI cache entry to a pod.

    Read on nodegc's own netlink socket opened in the namespace (never creates the file, never forks);
    loopback and link-local addresses, and any address on the namespace's loopback (ifindex 1, whatever
    its name; not a link renamed `lo`), are left out.
    """
    try:
        rtnl = RtnlSocket.open(path)
    except (NetlinkError, OSError) as e:
        raise NetnsReadError(f"cannot read addresses in netns {_where(path)}: {e}", of=e) from e
    return _addresses(rtnl, _path(path))


def read_netns_addresses_many(
    paths: Sequence[Path | NetnsFile], *, node_ns: Path | None = None, by_netnsid: bool = True
) -> list[tuple[str, ...] | NetnsReadError]:
    """`read_netns_addresses` of each path, in order. A `NetnsFile` is read only while its path still
    names the namespace the scan recorded, reached without a symlink (see `NetnsFile`); otherwise its
    answer is the NetnsReadError that says why, and nothing is read in its place.

    A namespace that has an id (netnsid) in the node's namespace `node_ns` (None: nodegc's own) is read
    from there, over one socket that names the id in its requests (IFA_TARGET_NETNSID, Linux 4.20): no
    setns and no socket per namespace. The file stays open while its namespace is read, so the id names
    that namespace throughout (an id is given back only when its namespace dies). Every other namespace
    (no id: no veth ties it to the node; a kernel that cannot; any error) is entered, its socket opened by
    one thread for all. `by_netnsid=False` enters every namespace.
    """
    out: list[tuple[str, ...] | NetnsReadError | None] = [None] * len(paths)
    if by_netnsid and paths:
        _read_by_netnsid(paths, out, node_ns)
    rest = [i for i, found in enumerate(out) if found is None]
    entered = [paths[i] for i in rest]
    for i, path, rtnl in zip(rest, entered, open_many(entered), strict=True):
        if isinstance(rtnl, NetlinkError):
            out[i] = NetnsReadError(f"cannot read addresses in netns {_where(path)}: {rtnl}", of=rtnl)
            continue
        try:
            out[i] = _addresses(rtnl, _path(path))
        except NetnsReadError as e:
            out[i] = e
    return [found for found in out if found is not None]


_NSID_MAX = 2**31 - 1
"""Ids above this are the unsigned spelling of -1 (NETNSA_NSID_NOT_ASSIGNED)."""
_BATCH = 64
"""Netns files open at once while their ids are asked and their addresses read."""


def _where(path: Path | NetnsFile) -> str:
    return os.fsdecode(_path(path))


def _path(path: Path | NetnsFile) -> Path:
    return path.path if isinstance(path, NetnsFile) else path


def _read_by_netnsid(paths: Sequence[Path | NetnsFile], out: list[tuple[str, ...] | NetnsReadError | None],
                     node_ns: Path | None) -> None:
    """Fill `out` for each path read through its netnsid in `node_ns`; leave None where it was not (after
    any error the socket is not used again: a dump it abandoned may still be running)."""
    try:
        rtnl = RtnlSocket.open(node_ns)
    except (NetlinkError, OSError):
        return
    with rtnl:
        if not rtnl.strict():
            return
        for start in range(0, len(paths), _BATCH):
            fds: dict[int, int] = {}  # slot -> fd
            try:
                for i in range(start, min(start + _BATCH, len(paths))):
                    try:
                        # as entering it opens it (a FIFO put there since the scan does not block the
                        # open: it has no id, and entering fails); a NetnsFile only as the scan saw it,
                        # and the id is then asked of that very namespace, which the fd keeps alive
                        fds[i] = open_netns(paths[i])
                    except OSError as e:
                        if isinstance(paths[i], NetnsFile):
                            out[i] = NetnsReadError(f"cannot read addresses in netns {_where(paths[i])}: "
                                                    f"{_refusal(e)}")
                        continue  # entering it fails alike, and says why
                ids = rtnl.netnsids(list(fds.values()))
                known = [(i, nsid) for i, nsid in zip(fds, ids, strict=True)
                         if isinstance(nsid, int) and 0 <= nsid <= _NSID_MAX]
                read = rtnl.peer_addresses_off_loopback([nsid for _, nsid in known])
                for (i, _), addresses in zip(known, read, strict=True):
                    out[i] = _kept(addresses)
            except NetlinkError:
                return  # the rest is entered
            finally:
                for fd in fds.values():
                    os.close(fd)


def _refusal(e: OSError) -> str:
    return str(e) if isinstance(e, NetnsFileChanged) else str(e.strerror or e)


def _addresses(rtnl: RtnlSocket, path: Path) -> tuple[str, ...]:
    """The addresses `rtnl` (in the namespace of `path`) dumps, loopback and link-local left out; closes it."""
    try:
        with rtnl:
            addresses = rtnl.addresses_off_loopback()
    except (NetlinkError, OSError) as e:
        raise NetnsReadError(f"cannot read addresses in netns {os.fsdecode(path)}: {e}", of=e) from e
    return _kept(addresses)


def _kept(addresses: list[tuple[int, str]]) -> tuple[str, ...]:
    out: list[str] = []
    for _index, raw in addresses:
        ip = _pod_address(raw)
        if ip is not None and ip not in out:
            out.append(ip)
    return tuple(out)


@remembered(8192)
def _pod_address(raw: str) -> str | None:
    """The address as nodegc writes it, or None for a loopback, link-local or unparsable one. Remembered:
    a node's namespaces show the same addresses scan after scan."""
    try:
        ip = ipaddress.ip_address(raw.split("%", 1)[0])
    except ValueError:
        return None
    if ip.is_loopback or ip.is_link_local:
        return None
    return str(ip)
