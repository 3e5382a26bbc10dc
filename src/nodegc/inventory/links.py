"""Host-side veth links and the namespace their peer lives in.

A veth whose peer namespace is gone disappears with it; one whose peer namespace is a leaked but still
mounted netns file stays. The peer is resolved through the link's netnsid, which the kernel assigns per
namespace pair; asking the kernel for the id of every mounted netns file maps the id back to a file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute, NetNS

from nodegc.model.resources import Kind, NetnsEntry, ReadProblem, VethLink

_NSID_MAX = 2**31 - 1
"""Ids above this are the unsigned spelling of -1 (NETNSA_NSID_NOT_ASSIGNED)."""


def scan_veths(
    *, netns_entries: Sequence[NetnsEntry], net_ns: Path | None = None
) -> tuple[tuple[VethLink, ...], tuple[ReadProblem, ...]]:
    """Every veth of the node namespace, peers resolved to netns files where the kernel can tell."""
    where = os.fsdecode(net_ns) if net_ns is not None else "(current netns)"
    problems: list[ReadProblem] = []
    try:
        with _open_rtnl(net_ns) as ipr:
            raw_links: list[Any] = list(ipr.get_links())
            veths = _veths_from_dump(raw_links, problems, where=where)
            ids = _netnsids(ipr, netns_entries, problems) if veths else {}
    except Exception as e:
        return (), (ReadProblem(Kind.VETH, where, f"link dump failed: {e}"),)
    resolved = tuple(_resolve_peer(v, ids) for v in veths)
    return resolved, tuple(problems)


def _open_rtnl(net_ns: Path | None) -> Any:
    # flags=0: never create the namespace file when it is missing
    return IPRoute() if net_ns is None else NetNS(os.fsdecode(net_ns), flags=0)


def _veths_from_dump(raw_links: list[Any], problems: list[ReadProblem], *, where: str) -> list[VethLink]:
    names: dict[int, str] = {}
    for msg in raw_links:
        try:
            name = msg.get_attr("IFLA_IFNAME")
            if isinstance(name, str):
                names[int(msg["index"])] = name
        except (KeyError, TypeError, ValueError):
            continue
    out: list[VethLink] = []
    for msg in raw_links:
        try:
            link = _veth_from_msg(msg, names)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            problems.append(ReadProblem(Kind.VETH, where, f"unreadable link message: {e!r}"))
            continue
        if link is not None:
            out.append(link)
    return out


def _veth_from_msg(msg: Any, names: dict[int, str]) -> VethLink | None:
    linkinfo = msg.get_attr("IFLA_LINKINFO")
    if linkinfo is None or linkinfo.get_attr("IFLA_INFO_KIND") != "veth":
        return None
    index = int(msg["index"])
    name = msg.get_attr("IFLA_IFNAME")
    mac = msg.get_attr("IFLA_ADDRESS")
    master_index = _opt_int(msg.get_attr("IFLA_MASTER"))
    nsid = _opt_int(msg.get_attr("IFLA_LINK_NETNSID"))
    peer_ifindex = _opt_int(msg.get_attr("IFLA_LINK"))
    return VethLink(
        name=name if isinstance(name, str) else f"if{index}",
        index=index,
        mac=mac if isinstance(mac, str) else None,
        master=names.get(master_index) if master_index else None,
        peer_netnsid=nsid if nsid is not None and 0 <= nsid <= _NSID_MAX else None,
        peer_ifindex=peer_ifindex if peer_ifindex else None,
    )


def _netnsids(ipr: Any, entries: Sequence[NetnsEntry], problems: list[ReadProblem]) -> dict[int, NetnsEntry]:
    """nsid -> netns file, as seen from the namespace `ipr` talks to; unassigned ids are left out."""
    ids: dict[int, NetnsEntry] = {}
    for entry in entries:
        if not entry.mounted:
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            problems.append(ReadProblem(Kind.VETH, entry.path, f"cannot open netns: {e.strerror or e}"))
            continue
        try:
            if entry.ns_inode is not None and os.fstat(fd).st_ino != entry.ns_inode:
                problems.append(ReadProblem(Kind.VETH, entry.path, "netns changed since it was scanned"))
                continue
            reply = ipr.get_netnsid(fd=fd)
        except Exception as e:
            problems.append(ReadProblem(Kind.VETH, entry.path, f"cannot get netnsid: {e}"))
            continue
        finally:
            os.close(fd)
        nsid = _opt_int(reply.get("nsid")) if isinstance(reply, dict) else None
        if nsid is None or not 0 <= nsid <= _NSID_MAX:
            continue
        if nsid in ids:
            # two files on one namespace (a bind of a bind): the id is not a unique answer
            problems.append(ReadProblem(Kind.VETH, entry.path, f"netnsid {nsid} also names {ids[nsid].path}"))
            continue
        ids[nsid] = entry
    return ids


def _resolve_peer(link: VethLink, ids: dict[int, NetnsEntry]) -> VethLink:
    if link.peer_netnsid is None:
        return link
    entry = ids.get(link.peer_netnsid)
    if entry is None:
        return link
    return replace(link, peer_netns_path=entry.path, peer_ns_inode=entry.ns_inode)


def _opt_int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value
