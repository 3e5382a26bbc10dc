"""A scan's netns and veth records equal to the last scan's, at the same place, are those very objects."""

from __future__ import annotations

from datetime import UTC, datetime

from nodegc.inventory import scanning
from nodegc.model.resources import Inventory, NetnsEntry, VethLink


def _inventory(*names: str, mtime: float = 1.0) -> Inventory:
    netns = tuple(NetnsEntry(name=n, path=f"/run/netns/{n}", mounted=True, ns_inode=7, mtime=mtime) for n in names)
    veths = tuple(VethLink(name=f"veth-{n}", index=i, mac=None, master="cni0", peer_netnsid=i, peer_ifindex=2,
                           peer_netns_path=f"/run/netns/{n}") for i, n in enumerate(names))
    return Inventory(taken_at=datetime(2026, 1, 1, tzinfo=UTC), netns=netns, veths=veths)


def test_equal_records_are_the_last_scans_objects() -> None:
    scanning.forget_remembered()
    first = scanning._as_last(_inventory("a", "b"))
    again = scanning._as_last(_inventory("a", "b"))
    assert again == first
    assert all(x is y for x, y in zip(again.netns, first.netns, strict=True))
    assert all(x is y for x, y in zip(again.veths, first.veths, strict=True))


def test_a_changed_record_is_its_own() -> None:
    scanning.forget_remembered()
    first = scanning._as_last(_inventory("a", "b"))
    changed = _inventory("a", "b")
    changed = Inventory(taken_at=changed.taken_at, netns=(changed.netns[0], NetnsEntry(
        name="b", path="/run/netns/b", mounted=True, ns_inode=8, mtime=1.0)), veths=changed.veths)
    again = scanning._as_last(changed)
    assert again.netns[0] is first.netns[0]
    assert again.netns[1] is changed.netns[1]
    assert again.netns[1].ns_inode == 8


def test_another_count_takes_nothing_and_forgetting_forgets() -> None:
    scanning.forget_remembered()
    first = scanning._as_last(_inventory("a", "b"))
    more = _inventory("a", "b", "c")
    assert scanning._as_last(more).netns[0] is more.netns[0]
    scanning.forget_remembered()
    again = _inventory("a", "b", "c")
    assert scanning._as_last(again).netns[0] is again.netns[0]
    assert first.netns[0] == again.netns[0]
