"""Deleting a host-side veth (its peer goes with it), identified by name and index together.

Names are reused as soon as a link is gone, and indexes too after a while: only both together (and the
MAC when known) prove the link is still the one that was scanned. Everything goes through nodegc's own
rtnetlink socket (`hostio.netlink`), opened in the node namespace.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path

from nodegc.hostio.netlink import NetlinkError, RawLink, RtnlSocket, delete_together
from nodegc.model.resources import VethLink
from nodegc.reclaim.outcomes import Outcome

_GONE = (errno.ENODEV, errno.ENOENT)


def delete_veth(link: VethLink, *, net_ns: Path | None) -> Outcome:
    """Runs against `net_ns` (the node namespace) or, when None, the namespace nodegc runs in."""
    return delete_veths([link], net_ns=net_ns)[0]


def delete_veths(links: Sequence[VethLink], *, net_ns: Path | None) -> list[Outcome]:
    """Compare every link with what the kernel shows now, then delete those that match, on one socket."""
    if not links:
        return []
    try:
        rtnl = RtnlSocket.open(net_ns)
    except (NetlinkError, OSError) as e:
        return [Outcome.failed(f"cannot open netlink in {net_ns or 'current netns'}: {e}")] * len(links)
    with rtnl:
        try:
            return _compare_and_delete(rtnl, links)
        except (NetlinkError, OSError) as e:
            return [Outcome.failed(f"netlink error on {link.name}: {e}") for link in links]


def _compare_and_delete(rtnl: RtnlSocket, links: Sequence[VethLink]) -> list[Outcome]:
    outcomes: list[Outcome | None] = []
    if len(links) == 1:
        found = rtnl.get_link(links[0].index)
        current = {found.index: found} if found is not None else {}
    else:
        dumped, _unreadable = rtnl.dump_links()
        current = {raw.index: raw for raw in dumped}
    for link in links:
        outcomes.append(_refusal(link, current.get(link.index)))
    todo = [i for i, o in enumerate(outcomes) if o is None]
    answers = delete_together(rtnl, [current[links[i].index] for i in todo])
    for i, answer in zip(todo, answers, strict=True):
        link = links[i]
        if answer is None:
            outcomes[i] = Outcome.done(f"deleted veth {link.name}")
        elif answer.code in _GONE:
            outcomes[i] = Outcome.gone(f"{link.name} went away before the delete")
        else:
            outcomes[i] = Outcome.failed(f"netlink error on {link.name}: {answer}")
    return [o if o is not None else Outcome.failed("no outcome") for o in outcomes]


def _refusal(link: VethLink, raw: RawLink | None) -> Outcome | None:
    """None when `raw` is still the scanned veth; otherwise the outcome that stands instead of a delete."""
    if raw is None:
        return Outcome.gone(f"link index {link.index} already gone")
    if raw.name != link.name:
        return Outcome.changed(f"index {link.index} is now {raw.name!r}, not {link.name!r}")
    if raw.kind != "veth":
        return Outcome.changed(f"{link.name} is now a {raw.kind or 'link of unknown kind'}, not a veth")
    if link.mac is not None and raw.mac is not None and raw.mac != link.mac:
        return Outcome.changed(f"{link.name} now has MAC {raw.mac}, not {link.mac}")
    return None
