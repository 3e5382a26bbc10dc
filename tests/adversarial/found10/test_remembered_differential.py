"""Correlations taken again (`planning.remembered`) against correlations from scratch, decision by decision.

A node scanned again and again, as the agent does, with random small changes between scans (one record's
age moved near the minimum age, a record gone or back, a file re-created under the same name with another
inode, a namespace replaced under the same path, a pod's phase or address changed, a pod gone, re-created
under its name with a new UID or added, every pod listed as a new equal object or in another order),
random time steps (none, sub-second, the scan interval, a wall clock stepped back, a photograph from the
future) and detect's two passes: whatever the memo answers is what a correlation from scratch makes.

With a runtime's view too (complete and incomplete lists, containerd's leftovers): its time of reading moves
on its own (read with the scan, a moment before it, after it, long before it), sandboxes are born around the
view's horizon, re-created under their id, go NotReady or READY, go away; leftovers and shims come and go and
age around the horizon; the policy's shim opt-in and the sandboxes the runtime gave up on change.
"""

from __future__ import annotations

import random
from dataclasses import fields, replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from nodegc.model.pods import DesiredState
from nodegc.model.resources import Inventory
from nodegc.model.runtime import RuntimeContainer, RuntimeLeftover, RuntimeSandbox, RuntimeView
from nodegc.planning.context import CorrelationPolicy
from nodegc.planning.correlate import correlate
from nodegc.planning.remembered import Correlations
from tests.unit.bigscan import BigScan, big_scan, with_addresses_read
from tests.unit.factories import NOW, OLD

_STEPS = (0.0, 0.0, 0.0, 0.0, 0.25, 1.0, 30.0, 30.0, 30.0, -1.0, -30.0, 59.5)
_LAGS = (0.0, 0.5, 2.0, 2.0, 45.0, -3.0)


def _records(inv: Inventory) -> list[str]:
    return [f.name for f in fields(Inventory)
            if isinstance(getattr(inv, f.name), tuple) and getattr(inv, f.name)
            and hasattr(getattr(inv, f.name)[0], "mtime")]


def _aged(inv: Inventory, mtime: float) -> Inventory:
    changes: dict[str, Any] = {name: tuple(replace(r, mtime=mtime) for r in getattr(inv, name))
                               for name in _records(inv)}
    return replace(inv, **changes)


def _change(rnd: random.Random, inv: Inventory, desired: DesiredState, base: Inventory, *, now: float,
            min_age: float) -> tuple[Inventory, DesiredState]:
    """One small random change of a quiet node (or none)."""
    roll = rnd.random()
    if roll < 0.35:
        return inv, desired
    names = _records(inv)
    name = rnd.choice(names)
    records = list(getattr(inv, name))
    i = rnd.randrange(len(records))
    r = records[i]
    if roll < 0.55:  # an age moved to around the threshold
        records[i] = replace(r, mtime=now - min_age + rnd.choice((-31.0, -1.0, -0.25, 0.0, 0.25, 1.0, 29.0)))
    elif roll < 0.62:  # gone
        del records[i]
    elif roll < 0.68:  # back as the base scan had it
        return replace(inv, **{name: getattr(base, name)}), desired
    elif roll < 0.76 and hasattr(r, "inode"):  # re-created under the same name: another inode
        records[i] = replace(r, inode=r.inode + 1_000_000)
    elif roll < 0.82 and name == "netns":  # another namespace bind-mounted at the same path
        records[i] = replace(r, ns_inode=(r.ns_inode or 0) + 7, file_inode=(r.file_inode or 0) + 7)
    else:
        pods = list(desired.pods)
        j = rnd.randrange(len(pods))
        choice = rnd.random()
        if choice < 0.3:
            pods[j] = replace(pods[j], phase=rnd.choice(("Running", "Pending", "Succeeded", "Failed", None)))
        elif choice < 0.5:
            pods[j] = replace(pods[j], pod_ips=("10.244.9.9",))
        elif choice < 0.6:  # re-created under its name with a new UID (a StatefulSet's pod), its address kept
            pods[j] = replace(pods[j], uid=f"{pods[j].uid}-again", phase=rnd.choice(("Running", "Pending")))
        elif choice < 0.7:  # every pod listed as a new object (a list, a snapshot parsed again)
            pods = [replace(p) for p in pods]
        elif choice < 0.75:
            rnd.shuffle(pods)
        elif choice < 0.85:  # a pod added, claiming another's address
            pods.append(replace(pods[j], uid=f"added-{rnd.randrange(10**6)}", name=f"added-{j}"))
        else:
            del pods[j]
        return inv, replace(desired, pods=tuple(pods))
    return replace(inv, **{name: tuple(records)}), desired  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(4))
def test_a_remembered_correlation_is_a_fresh_one_decision_by_decision(seed: int) -> None:
    rnd = random.Random(seed)  # noqa: S311 (a test scenario, not a secret)
    scan = big_scan(seed, sandboxes=60, runtime=seed % 2 == 1)
    base = _aged(scan.inventory, OLD)
    memo = Correlations()
    policy = CorrelationPolicy(min_age_seconds=60.0)
    inv, desired = base, scan.desired
    now = NOW.timestamp()
    taken = made = 0
    lag = 0.0
    for step in range(60):
        now += rnd.choice(_STEPS)
        when = NOW + timedelta(seconds=now - NOW.timestamp())
        inv, desired = _change(rnd, inv, desired, base, now=now, min_age=policy.min_age_seconds)
        lag = lag if rnd.random() < 0.5 else rnd.choice(_LAGS)  # a photograph kept (a proof, a snapshot)
        photo = replace(desired, fetched_at=when - timedelta(seconds=lag))
        if step % 17 == 16:
            policy = replace(policy, min_age_seconds=policy.min_age_seconds + rnd.choice((0.0, 0.5)))
        before = memo.taken_again
        found, first = memo.correlate(inv, photo, now=when, policy=policy)
        assert found == correlate(inv, photo, now=when, policy=policy), step
        read = with_addresses_read(BigScan(inv, photo, scan.unread_netns), seed)
        again, _ = memo.correlate(read, photo, now=when, policy=policy, previous=first)
        assert again == correlate(read, photo, now=when, policy=policy), step
        taken += memo.taken_again - before
        made += 2 - (memo.taken_again - before)
    assert taken and made  # both paths were taken: the comparison has teeth


_READ_LAGS = (0.0, 0.0, 0.2, 1.5, 30.0, -2.0, None)
"""How long before the scan's time the runtime's view was read (negative: after it; None: undated)."""
_NEAR = (-31.0, -1.0, -0.25, 0.0, 0.25, 1.0, 29.0)


def _with_leftovers(view: RuntimeView, rnd: random.Random) -> RuntimeView:
    """containerd's state dir and process table: shims of READY sandboxes (so the table is the node's), and
    directories and shims of ids the runtime does not list, some under a listed sandbox."""
    ready = [sb for sb in view.sandboxes if sb.ready]
    left: list[RuntimeLeftover] = [
        RuntimeLeftover("shim", sb.id, f"/proc/{100 + i}", pid=100 + i, mtime=OLD, start_time=1000 + i)
        for i, sb in enumerate(ready[:8])]
    for i in range(12):
        lid = f"{i:02d}" + "d" * 62
        what = rnd.choice(("sandbox_dir", "task_dir", "shim"))
        if what == "shim":
            left.append(RuntimeLeftover("shim", lid, f"/proc/{500 + i}", pid=500 + i, mtime=OLD, start_time=9 + i))
            continue
        parent = ("io.containerd.grpc.v1.cri/sandboxes" if what == "sandbox_dir"
                  else "io.containerd.runtime.v2.task/k8s.io")
        sandbox = rnd.choice(view.sandboxes).id if what == "task_dir" and rnd.random() < 0.3 else None
        left.append(RuntimeLeftover(what, lid, f"/run/containerd/{parent}/{lid}", mounted=rnd.random() < 0.5,
                                    inode=7000 + i, mtime=OLD, sandbox_id=sandbox))
    return replace(view, state_dir="/run/containerd", leftovers=tuple(left))


def _sandbox_aged(view: RuntimeView) -> RuntimeView:
    old = NOW - timedelta(seconds=3600)
    return replace(view, sandboxes=tuple(replace(sb, created_at=old) for sb in view.sandboxes))


def _change_view(rnd: random.Random, view: RuntimeView, base: RuntimeView, desired: DesiredState, *,
                 horizon: float) -> RuntimeView:
    """One small random change of what the runtime lists (or none); `horizon`: the view's read time less
    the minimum age, around which ages are moved."""
    roll = rnd.random()
    if roll < 0.5:
        return view
    boxes = list(view.sandboxes)
    left = list(view.leftovers)
    near = horizon + rnd.choice(_NEAR)
    when = NOW + timedelta(seconds=near - NOW.timestamp())
    if roll < 0.5 and boxes:  # a sandbox's birth moved around the horizon
        i = rnd.randrange(len(boxes))
        boxes[i] = replace(boxes[i], created_at=when)
    elif roll < 0.56 and boxes:  # gone
        del boxes[rnd.randrange(len(boxes))]
    elif roll < 0.64:  # born: a pod's new sandbox (or one of a pod not in the API), around the horizon
        pod = rnd.choice(desired.pods)
        uid = pod.uid if rnd.random() < 0.7 else "not-in-the-api"
        sid = f"{rnd.randrange(10**6):06d}" + "b" * 58
        boxes.append(RuntimeSandbox(id=sid, pod_uid=uid, pod_name=pod.name, pod_namespace=pod.namespace, attempt=3,
                                    ready=rnd.random() < 0.5, created_at=when, ips=pod.pod_ips[:1],
                                    netns_path=None, status_read=True))
    elif roll < 0.7 and boxes:  # re-created under its id: another creation time
        i = rnd.randrange(len(boxes))
        boxes[i] = replace(boxes[i], created_at=when, attempt=boxes[i].attempt + 1)
    elif roll < 0.76 and boxes:  # READY <-> NotReady
        i = rnd.randrange(len(boxes))
        boxes[i] = replace(boxes[i], ready=not boxes[i].ready)
    elif roll < 0.84 and left:  # a leftover's age (a shim's start) moved around the horizon
        i = rnd.randrange(len(left))
        left[i] = replace(left[i], mtime=near)
    elif roll < 0.88 and left:  # a leftover gone (its shim exited, its directory removed)
        del left[rnd.randrange(len(left))]
    elif roll < 0.92:  # the leftovers as the base view had them
        left = list(base.leftovers)
    elif boxes:  # one of a sandbox's containers started or exited
        sb = rnd.choice(boxes)
        containers = [c for c in view.containers if c.sandbox_id != sb.id]
        if len(containers) == len(view.containers):
            containers.append(RuntimeContainer(id="c" + sb.id[1:], sandbox_id=sb.id, name="app", state="running"))
        return replace(view, containers=tuple(containers))
    return replace(view, sandboxes=tuple(boxes), leftovers=tuple(left))


@pytest.mark.parametrize("seed", range(4))
def test_a_remembered_correlation_with_the_runtimes_view_is_a_fresh_one(seed: int) -> None:  # noqa: PLR0915
    """Even seeds: a list with a sandbox for every running pod (the runtime's word concludes); odd: one
    that misses some (only what it shows protects)."""
    rnd = random.Random(100 + seed)  # noqa: S311 (a test scenario, not a secret)
    scan = big_scan(seed, sandboxes=60, runtime=True)  # every running pod's sandbox listed for even seeds only
    assert scan.inventory.runtime is not None
    base_view = _with_leftovers(_sandbox_aged(scan.inventory.runtime), rnd)
    base = replace(_aged(scan.inventory, OLD), runtime=base_view)
    memo = Correlations()
    policy = CorrelationPolicy(min_age_seconds=60.0)
    inv, desired = base, scan.desired
    now = NOW.timestamp()
    counts = {"taken": 0, "made": 0, "moved": 0}
    lag = 0.0
    read_lag: float | None = 0.0
    last_read: list[float | None] = [None]

    def dated(read: float | None) -> datetime | None:
        return None if read is None else NOW + timedelta(seconds=read - NOW.timestamp())

    def check(inv: Inventory, photo: DesiredState, now: float, policy: CorrelationPolicy) -> None:
        when = NOW + timedelta(seconds=now - NOW.timestamp())
        before = memo.taken_again
        found, first = memo.correlate(inv, photo, now=when, policy=policy)
        assert found == correlate(inv, photo, now=when, policy=policy), now
        read_inv = with_addresses_read(BigScan(inv, photo, scan.unread_netns), seed)
        again, _ = memo.correlate(read_inv, photo, now=when, policy=policy, previous=first)
        assert again == correlate(read_inv, photo, now=when, policy=policy), now
        got = memo.taken_again - before
        counts["taken"] += got
        counts["made"] += 2 - got
        read = _read(inv)
        counts["moved"] += got if read != last_read[0] else 0
        last_read[0] = read

    for step in range(90):
        now += rnd.choice(_STEPS)
        if rnd.random() < 0.5:  # the records and pods changed less often: the view's time moves on its own
            inv, desired = _change(rnd, inv, desired, base, now=now, min_age=policy.min_age_seconds)
        read_lag = read_lag if rnd.random() < 0.4 else rnd.choice(_READ_LAGS)
        read = None if read_lag is None else now - read_lag
        view = inv.runtime
        assert view is not None
        view = _change_view(rnd, view, base_view, desired,
                            horizon=(now if read is None else read) - policy.min_age_seconds)
        inv = replace(inv, runtime=replace(view, read_at=dated(read)))
        lag = lag if rnd.random() < 0.5 else rnd.choice(_LAGS)
        photo = replace(desired, fetched_at=NOW + timedelta(seconds=now - lag - NOW.timestamp()))
        if step % 13 == 12:
            policy = replace(policy, stop_orphan_shims=not policy.stop_orphan_shims)
        if step % 17 == 16:
            gave_up = {sb.id for sb in view.sandboxes if not sb.ready and rnd.random() < 0.3}
            policy = replace(policy, runtime_gave_up=frozenset(gave_up))
        check(inv, photo, now, policy)
        for _ in range(rnd.choice((0, 1, 2))):  # scanned again at once, nothing changed but the times
            later = now + rnd.choice((0.0, 0.25, 1.0, 30.0))
            again = None if read is None and rnd.random() < 0.5 else later - rnd.choice((0.0, 0.2, 1.5, 30.0, -2.0))
            check(replace(inv, runtime=replace(view, read_at=dated(again))), photo, later, policy)
    assert counts["taken"] and counts["made"]  # both paths were taken: the comparison has teeth
    assert counts["moved"]  # taken again with the view read at another time than the remembered one's
    print(f"seed {seed}: {counts}")


def _read(inv: Inventory) -> float | None:
    view = inv.runtime
    return view.read_at.timestamp() if view is not None and view.read_at is not None else None
