"""One process that holds host-local's lock of a network (a hung plugin, a stuck ADD) stalls a cycle for
`10 s x reservations`: HostExecutor.reclaim calls release_ip once per reservation, each waiting its own
10 s lock timeout (reclaim/ipam.py:25, default `lock_timeout=10.0`), with no budget for the batch and no
memory that the lock of that network was just found busy. With the burst of 200 reclaims a cycle that is
over half an hour, during which the agent neither scans nor reports (its /healthz goes stale). The
expectation: reservations of a network whose lock stayed busy fail at once for the rest of the batch."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from nodegc.model.items import Item, Phase, item_key
from nodegc.model.resources import IPReservation, Kind
from nodegc.planning.phases import identity_of
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import Roots

NET = "k8s-pod-network"


def test_a_busy_host_local_lock_costs_one_timeout_per_batch_not_one_per_reservation(tmp_path: Path) -> None:
    net_dir = tmp_path / "cni" / "networks" / NET
    net_dir.mkdir(parents=True)
    batch = []
    for n in range(2, 4):
        ip = f"10.0.0.{n}"
        cid = f"{n:064x}"
        (net_dir / ip).write_text(f"{cid}\r\neth0")
        res = IPReservation(network=NET, ip=ip, path=str(net_dir / ip), inode=(net_dir / ip).stat().st_ino,
                            mtime=0.0, container_id=cid, ifname="eth0")
        item = Item(key=item_key(Kind.IP_RESERVATION, f"{NET}/{ip}"), kind=Kind.IP_RESERVATION,
                    resource_id=f"{NET}/{ip}", phase=Phase.TERMINATING, identity=identity_of(res),
                    finding_class="leaked_ip", owner_uid=None, owner_namespace=None, owner_name=None,
                    container_id=cid, first_seen=0.0, last_seen=0.0, orphan_count=3)
        batch.append((item, res))
    holder = os.open(net_dir / "lock", os.O_RDONLY | os.O_CREAT, 0o644)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another open file description: conflicts like another process
    outcomes: list[Outcome] = []
    try:
        started = time.monotonic()
        HostExecutor(Roots(cni_data_dir=tmp_path / "cni")).execute(batch, on_outcome=lambda i, o: outcomes.append(o))
        spent = time.monotonic() - started
    finally:
        os.close(holder)
    assert [o.ok for o in outcomes] == [False, False]
    assert all((net_dir / r.ip).exists() for _, r in batch)
    assert spent < 15.0, f"{len(batch)} reservations of one busy network took {spent:.0f}s"
