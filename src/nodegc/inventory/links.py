"""Host-side veth links and the namespace their peer lives in.

A veth whose peer namespace is gone disappears with it; one whose peer namespace is a leaked but still
mounted netns file stays. The peer is resolved through the link's netnsid, which the kernel assigns per
namespace pair; asking the kernel for the id of every mounted netns file maps the id back to a file.

The link dump and the id queries go through `hostio.netlink` (raw rtnetlink, six attributes decoded, id
queries batched) rather than pyroute2, whose full decoding was most of the cost of a scan.

Scan after scan, the id of a netns file is taken again without asking the kernel only while both ends are
provably the same namespaces: the node side by its namespace cookie (never given to another namespace while
the machine runs), the file by the unique id of the mount its path resolves to now (Linux 6.8: never given
to another mount; a mount holds its namespace alive and always shows the same one) and the namespace inode
the netns scan saw. An id assigned between two live namespaces never changes; an unassigned one may be
assigned at any time, so only assigned ids are remembered. Where the kernel has no cookies or no unique
mount ids, every id is asked every scan.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

from nodegc.hostio.libc import unique_mount, unique_mounts
from nodegc.hostio.netlink import DumpBoundError, NetlinkError, NetnsFileChanged, RawLink, RtnlSocket, open_netns
from nodegc.inventory.netns import netns_file
from nodegc.model.resources import DUMP_BOUND, UNREADABLE, Kind, NetnsEntry, ReadProblem, VethLink

_NSID_MAX = 2**31 - 1
"""Ids above this are the unsigned spelling of -1 (NETNSA_NSID_NOT_ASSIGNED)."""
_BATCH = 64
"""Netns files open at once while their ids are asked."""

_Key = tuple[str, int, int]
"""(path, namespace inode, unique id of the mount the path resolved to) of a netns file."""


class _Remembered:
    """The node namespace's cookie and the ids the last scan found from it, by netns file."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._node: int | None = None
        self._ids: dict[_Key, int] = {}

    def ids_from(self, cookie: int | None) -> dict[_Key, int]:
        with self._lock:
            return self._ids if cookie is not None and cookie == self._node else {}

    def keep(self, cookie: int | None, ids: dict[_Key, int]) -> None:
        with self._lock:
            self._node, self._ids = (cookie, ids) if cookie is not None else (None, {})


_REMEMBERED = _Remembered()


def forget_netnsids() -> None:
    """Forget the remembered ids: the next scan asks the kernel for every one (a process's first scan)."""
    _REMEMBERED.keep(None, {})


def scan_veths(
    *, netns_entries: Sequence[NetnsEntry], net_ns: Path | None = None
) -> tuple[tuple[VethLink, ...], tuple[ReadProblem, ...]]:
    """Every veth of the node namespace, peers resolved to netns files where the kernel can tell."""
    where = os.fsdecode(net_ns) if net_ns is not None else "(current netns)"
    problems: list[ReadProblem] = []
    try:
        with RtnlSocket.open(net_ns) as rtnl:
            raw_links, unreadable = rtnl.dump_links()
            problems += (ReadProblem(Kind.VETH, where, f"unreadable link message: {r}") for r in unreadable)
            nameless = [link for link in raw_links if link.kind == "veth" and link.name is None]
            problems += (ReadProblem(Kind.VETH, f"{where} ifindex {link.index}", "link name is not valid UTF-8;"
                                     " skipped") for link in nameless)
            named = [link for link in raw_links if link.name is not None]
            any_veth = any(link.kind == "veth" for link in named)
            ids = _netnsids(rtnl, netns_entries, problems) if any_veth else {}
    except (NetlinkError, OSError) as e:
        return (), (ReadProblem(Kind.VETH, where, f"link dump failed: {e}",
                                DUMP_BOUND if isinstance(e, DumpBoundError) else UNREADABLE),)
    return tuple(_veths_from_dump(named, ids)), tuple(problems)


def _veths_from_dump(raw_links: list[RawLink], ids: dict[int, NetnsEntry] | None = None) -> list[VethLink]:
    """The veths of the dump, each peer resolved to the netns file that holds its id in `ids`."""
    names = {link.index: link.name for link in raw_links if link.name is not None}
    return [_veth(link, names, ids or {}) for link in raw_links if link.kind == "veth"]


def _veth(link: RawLink, names: dict[int, str], ids: dict[int, NetnsEntry]) -> VethLink:
    nsid = link.link_netnsid
    peer_netnsid = nsid if nsid is not None and 0 <= nsid <= _NSID_MAX else None
    entry = ids.get(peer_netnsid) if peer_netnsid is not None else None
    return VethLink(
        name=link.name or f"if{link.index}",
        index=link.index,
        mac=link.mac,
        master=names.get(link.master) if link.master else None,
        peer_netnsid=peer_netnsid,
        peer_ifindex=link.link if link.link else None,
        peer_netns_path=entry.path if entry is not None else None,
        peer_ns_inode=entry.ns_inode if entry is not None else None,
    )


def _netnsids(
    rtnl: RtnlSocket, entries: Sequence[NetnsEntry], problems: list[ReadProblem]
) -> dict[int, NetnsEntry]:
    """nsid -> netns file, as seen from the namespace `rtnl` talks to; unassigned ids are left out.

    Every mounted file's id is found (asked, or taken again as the module says), not only until the ids
    of the dump are found: a second file on the same namespace must be seen to be reported, and the first
    file of the two keeps the id. Files are opened a batch at a time, so a large node never holds more than
    a batch of descriptors.
    """
    mounted = [entry for entry in entries if entry.mounted]
    cookie = rtnl.netns_cookie()
    known = _REMEMBERED.ids_from(cookie)
    answers: list[int | ReadProblem | None] = [None] * len(mounted)
    kept: dict[_Key, int] = {}
    asked: list[int] = []
    keys = _keys_now(mounted) if known else [None] * len(mounted)
    for slot, key in enumerate(keys):
        if key is not None and key in known:
            answers[slot] = kept[key] = known[key]
        else:
            asked.append(slot)
    for start in range(0, len(asked), _BATCH):
        slots = asked[start : start + _BATCH]
        for slot, (answer, key) in zip(slots, _query_batch(rtnl, [mounted[i] for i in slots]), strict=True):
            answers[slot] = answer
            if cookie is not None and key is not None and isinstance(answer, int) and 0 <= answer <= _NSID_MAX:
                kept[key] = answer
    _REMEMBERED.keep(cookie, kept)
    ids: dict[int, NetnsEntry] = {}
    for entry, found in zip(mounted, answers, strict=True):
        if found is None:
            continue  # not reached: every slot is taken again or asked
        if isinstance(found, ReadProblem):
            problems.append(found)
        elif not 0 <= found <= _NSID_MAX:
            continue
        elif found in ids:
            # two files on one namespace (a bind of a bind): the id is not a unique answer
            problems.append(ReadProblem(Kind.VETH, entry.path, f"netnsid {found} also names {ids[found].path}"))
        else:
            ids[found] = entry
    return ids


def _keys_now(entries: Sequence[NetnsEntry]) -> list[_Key | None]:
    """The key of the mount each entry's path resolves to now, where it still shows the namespace scanned."""
    out: list[_Key | None] = []
    for entry, stamp in zip(entries, unique_mounts([entry.path for entry in entries]), strict=True):
        if entry.ns_inode is None or stamp is None or isinstance(stamp, OSError) or stamp[0] != entry.ns_inode:
            out.append(None)
        else:
            out.append((entry.path, stamp[0], stamp[1]))
    return out


def _query_batch(rtnl: RtnlSocket, entries: Sequence[NetnsEntry]) -> list[tuple[int | ReadProblem, _Key | None]]:
    """Each entry's id or problem, in entry order, with the key of the mount the id was asked through."""
    opened: dict[int, int] = {}  # slot in `out` -> fd
    out: list[tuple[int | ReadProblem, _Key | None]] = []
    try:
        for entry in entries:
            fd = _open_netns(entry)
            key: _Key | None = None
            if isinstance(fd, int):
                opened[len(out)] = fd
                key = _key_of_fd(entry, fd)
            out.append((fd, key))
        try:
            answers: list[int | NetlinkError] = rtnl.netnsids(list(opened.values()))
        except NetlinkError as e:
            answers = [e] * len(opened)
    finally:
        for fd in opened.values():
            os.close(fd)
    for slot, answer in zip(opened, answers, strict=True):
        entry, key = entries[slot], out[slot][1]
        if isinstance(answer, NetlinkError):
            out[slot] = (ReadProblem(Kind.VETH, entry.path, f"cannot get netnsid: {answer}"), None)
        else:
            out[slot] = (answer, key)
    return out


def _key_of_fd(entry: NetnsEntry, fd: int) -> _Key | None:
    """The key of the mount `fd` was opened through (the one whose namespace the id is asked of)."""
    try:
        stamp = unique_mount(fd=fd)
    except OSError:
        return None
    if stamp is None or entry.ns_inode is None or stamp[0] != entry.ns_inode:
        return None
    return entry.path, stamp[0], stamp[1]


def _open_netns(entry: NetnsEntry) -> int | ReadProblem:
    """An fd on the file, still the namespace the netns scan saw (reached as `netns.netns_file` records it:
    below its directory, no symlink, the same inode and device), or why not."""
    try:
        return open_netns(netns_file(entry))
    except NetnsFileChanged as e:
        return ReadProblem(Kind.VETH, entry.path, f"netns changed since it was scanned: {e}")
    except OSError as e:
        return ReadProblem(Kind.VETH, entry.path, f"cannot open netns: {e.strerror or e}")
