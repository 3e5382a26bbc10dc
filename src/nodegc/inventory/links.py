"""Host-side veth links and the namespace their peer lives in.

A veth whose peer namespace is gone disappears with it; one whose peer namespace is a leaked but still
mounted netns file stays. The peer is resolved through the link's netnsid, which the kernel assigns per
namespace pair; asking the kernel for the id of every mounted netns file maps the id back to a file.

The link dump and the id queries go through `hostio.netlink` (raw rtnetlink, six attributes decoded, id
queries batched) rather than pyroute2, whose full decoding was most of the cost of a scan.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from nodegc.hostio.netlink import NetlinkError, RawLink, RtnlSocket
from nodegc.model.resources import Kind, NetnsEntry, ReadProblem, VethLink

_NSID_MAX = 2**31 - 1
"""Ids above this are the unsigned spelling of -1 (NETNSA_NSID_NOT_ASSIGNED)."""
_BATCH = 64
"""Netns files open at once while their ids are asked."""


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
            veths = _veths_from_dump([link for link in raw_links if link.name is not None])
            ids = _netnsids(rtnl, netns_entries, problems) if veths else {}
    except (NetlinkError, OSError) as e:
        return (), (ReadProblem(Kind.VETH, where, f"link dump failed: {e}"),)
    resolved = tuple(_resolve_peer(v, ids) for v in veths)
    return resolved, tuple(problems)


def _veths_from_dump(raw_links: list[RawLink]) -> list[VethLink]:
    names = {link.index: link.name for link in raw_links if link.name is not None}
    return [_veth(link, names) for link in raw_links if link.kind == "veth"]


def _veth(link: RawLink, names: dict[int, str]) -> VethLink:
    nsid = link.link_netnsid
    return VethLink(
        name=link.name or f"if{link.index}",
        index=link.index,
        mac=link.mac,
        master=names.get(link.master) if link.master else None,
        peer_netnsid=nsid if nsid is not None and 0 <= nsid <= _NSID_MAX else None,
        peer_ifindex=link.link if link.link else None,
    )


def _netnsids(
    rtnl: RtnlSocket, entries: Sequence[NetnsEntry], problems: list[ReadProblem]
) -> dict[int, NetnsEntry]:
    """nsid -> netns file, as seen from the namespace `rtnl` talks to; unassigned ids are left out.

    Every mounted file is asked, not only until the ids of the dump are found: a second file on the
    same namespace must be seen to be reported, and the first file of the two keeps the id. Files are
    opened a batch at a time, so a large node never holds more than a batch of descriptors.
    """
    mounted = [entry for entry in entries if entry.mounted]
    ids: dict[int, NetnsEntry] = {}
    for start in range(0, len(mounted), _BATCH):
        for entry, answer in _query_batch(rtnl, mounted[start : start + _BATCH]):
            if isinstance(answer, ReadProblem):
                problems.append(answer)
            elif not 0 <= answer <= _NSID_MAX:
                continue
            elif answer in ids:
                # two files on one namespace (a bind of a bind): the id is not a unique answer
                problems.append(
                    ReadProblem(Kind.VETH, entry.path, f"netnsid {answer} also names {ids[answer].path}")
                )
            else:
                ids[answer] = entry
    return ids


def _query_batch(
    rtnl: RtnlSocket, entries: Sequence[NetnsEntry]
) -> list[tuple[NetnsEntry, int | ReadProblem]]:
    """Each entry with its id or its problem, in entry order."""
    opened: dict[int, int] = {}  # slot in `out` -> fd
    out: list[tuple[NetnsEntry, int | ReadProblem]] = []
    try:
        for entry in entries:
            fd = _open_netns(entry)
            if isinstance(fd, int):
                opened[len(out)] = fd
            out.append((entry, fd))
        try:
            answers: list[int | NetlinkError] = rtnl.netnsids(list(opened.values()))
        except NetlinkError as e:
            answers = [e] * len(opened)
    finally:
        for fd in opened.values():
            os.close(fd)
    for slot, answer in zip(opened, answers, strict=True):
        entry = out[slot][0]
        if isinstance(answer, NetlinkError):
            out[slot] = (entry, ReadProblem(Kind.VETH, entry.path, f"cannot get netnsid: {answer}"))
        else:
            out[slot] = (entry, answer)
    return out


def _open_netns(entry: NetnsEntry) -> int | ReadProblem:
    """An fd on the file, still the namespace the netns scan saw, or why not."""
    try:
        fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        return ReadProblem(Kind.VETH, entry.path, f"cannot open netns: {e.strerror or e}")
    try:
        changed = entry.ns_inode is not None and os.fstat(fd).st_ino != entry.ns_inode
    except OSError as e:
        os.close(fd)
        return ReadProblem(Kind.VETH, entry.path, f"cannot get netnsid: {e}")
    if changed:
        os.close(fd)
        return ReadProblem(Kind.VETH, entry.path, "netns changed since it was scanned")
    return fd


def _resolve_peer(link: VethLink, ids: dict[int, NetnsEntry]) -> VethLink:
    if link.peer_netnsid is None:
        return link
    entry = ids.get(link.peer_netnsid)
    if entry is None:
        return link
    return replace(link, peer_netns_path=entry.path, peer_ns_inode=entry.ns_inode)
