"""Deleting a host-side veth (its peer goes with it), identified by name and index together.

Names are reused as soon as a link is gone, and indexes too after a while: only both together (and the
MAC when known) prove the link is still the one that was scanned.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute, NetNS
from pyroute2.netlink.exceptions import NetlinkError

from nodegc.model.resources import VethLink
from nodegc.reclaim.outcomes import Outcome

_GONE = (errno.ENODEV, errno.ENOENT)


def delete_veth(link: VethLink, *, net_ns: Path | None) -> Outcome:
    """Runs against `net_ns` (the node namespace) or, when None, the namespace nodegc runs in."""
    try:
        ipr: Any = IPRoute() if net_ns is None else NetNS(os.fsdecode(net_ns), flags=0)
    except Exception as e:
        return Outcome.failed(f"cannot open netlink in {net_ns or 'current netns'}: {e}")
    try:
        with ipr:
            return _compare_and_delete(ipr, link)
    except Exception as e:
        return Outcome.failed(f"netlink error on {link.name}: {e}")


def _compare_and_delete(ipr: Any, link: VethLink) -> Outcome:
    try:
        msgs: list[Any] = list(ipr.get_links(link.index))
    except NetlinkError as e:
        if e.code in _GONE:
            return Outcome.gone(f"link index {link.index} already gone")
        raise
    if not msgs:
        return Outcome.gone(f"link index {link.index} already gone")
    msg = msgs[0]
    name = msg.get_attr("IFLA_IFNAME")
    if name != link.name:
        return Outcome.changed(f"index {link.index} is now {name!r}, not {link.name!r}")
    info = msg.get_attr("IFLA_LINKINFO")
    kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
    if kind != "veth":
        return Outcome.changed(f"{link.name} is now a {kind or 'link of unknown kind'}, not a veth")
    mac = msg.get_attr("IFLA_ADDRESS")
    if link.mac is not None and isinstance(mac, str) and mac != link.mac:
        return Outcome.changed(f"{link.name} now has MAC {mac}, not {link.mac}")
    try:
        ipr.link("del", index=link.index)
    except NetlinkError as e:
        if e.code in _GONE:
            return Outcome.gone(f"{link.name} went away before the delete")
        raise
    return Outcome.done(f"deleted veth {link.name}")
