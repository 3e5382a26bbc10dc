"""Clean releases id-only reservations (and those whose DEL already ran) per network, not per address:
host-local's lock of a network is taken once for all of its reservations in a batch, each file is still
compared (same inode, same container and interface) before it goes, and one answer per reservation comes
back in order."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from nodegc.model.items import Item, Phase, item_key
from nodegc.model.resources import IPReservation, Kind
from nodegc.planning.phases import identity_of
from nodegc.reclaim import ipam
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import Roots


def _reservation(root: Path, network: str, ip: str, cid: str) -> IPReservation:
    net_dir = root / "networks" / network
    net_dir.mkdir(parents=True, exist_ok=True)
    (net_dir / ip).write_text(f"{cid}\r\neth0")
    return IPReservation(network=network, ip=ip, path=str(net_dir / ip), inode=(net_dir / ip).stat().st_ino,
                         mtime=0.0, container_id=cid, ifname="eth0")


def _item(res: IPReservation) -> Item:
    return Item(key=item_key(Kind.IP_RESERVATION, f"{res.network}/{res.ip}"), kind=Kind.IP_RESERVATION,
                resource_id=f"{res.network}/{res.ip}", phase=Phase.TERMINATING, identity=identity_of(res),
                finding_class="leaked_ip", owner_uid=None, owner_namespace=None, owner_name=None,
                container_id=res.container_id, first_seen=0.0, last_seen=0.0, orphan_count=3)


def test_one_lock_per_network_and_every_file_still_compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cni"
    a = [_reservation(root, "net-a", f"10.0.0.{n}", f"{n:064x}") for n in range(2, 6)]
    b = [_reservation(root, "net-b", f"10.1.0.{n}", f"{n:064x}") for n in range(2, 4)]
    (root / "networks" / "net-a" / "10.0.0.3").write_text(f"{'f' * 64}\r\neth0")  # handed to a new container
    (root / "networks" / "net-a" / "10.0.0.4").unlink()  # already released
    locks: list[int] = []
    real = ipam._lock

    def counting(dir_fd: int, *, timeout: float) -> int | None:
        locks.append(dir_fd)
        return real(dir_fd, timeout=timeout)

    monkeypatch.setattr(ipam, "_lock", counting)
    batch = [(_item(r), r) for r in (a[0], b[0], a[1], a[2], b[1], a[3])]
    outcomes: list[tuple[str, Outcome]] = []
    HostExecutor(Roots(cni_data_dir=root)).execute(batch, on_outcome=lambda i, o: outcomes.append((i.resource_id, o)))
    assert len(locks) == 2  # one per network, not one per reservation
    got = {rid: (o.ok, o.identity_changed, o.already_gone) for rid, o in outcomes}
    assert got == {
        "net-a/10.0.0.2": (True, False, False), "net-a/10.0.0.3": (False, True, False),
        "net-a/10.0.0.4": (True, False, True), "net-a/10.0.0.5": (True, False, False),
        "net-b/10.1.0.2": (True, False, False), "net-b/10.1.0.3": (True, False, False),
    }
    assert (root / "networks" / "net-a" / "10.0.0.3").exists()
    left = sorted(p.name for d in (root / "networks").iterdir() for p in d.iterdir() if p.name != "lock")
    assert left == ["10.0.0.3"]


def test_a_busy_network_fails_its_own_reservations_only(tmp_path: Path) -> None:
    root = tmp_path / "cni"
    a = _reservation(root, "net-a", "10.0.0.2", "2" * 64)
    b = _reservation(root, "net-b", "10.1.0.2", "3" * 64)
    holder = os.open(root / "networks" / "net-a" / "lock", os.O_RDONLY | os.O_CREAT, 0o644)
    fcntl.flock(holder, fcntl.LOCK_EX)  # a stuck ADD on net-a
    try:
        outcomes = ipam.release_ips([a, b], roots=Roots(cni_data_dir=root), lock_timeout=0.2)
    finally:
        os.close(holder)
    assert [o.ok for o in outcomes] == [False, True]
    assert "busy" in outcomes[0].detail
    assert Path(a.path).exists() and not Path(b.path).exists()


def test_a_reservation_outside_the_data_dir_is_refused_alone(tmp_path: Path) -> None:
    root = tmp_path / "cni"
    good = _reservation(root, "net-a", "10.0.0.2", "2" * 64)
    bad = IPReservation(network="..", ip="etc", path=str(root / "networks" / ".." / "etc"), inode=1, mtime=0.0,
                        container_id="x", ifname="eth0")
    outcomes = ipam.release_ips([bad, good], roots=Roots(cni_data_dir=root))
    assert [o.ok for o in outcomes] == [False, True]
    assert "under the data dir" in outcomes[0].detail
