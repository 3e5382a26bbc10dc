"""Deleting a firewall plugin rule of a dead attachment (CNI-FORWARD, one address).

The rule names only an address, so it is deleted only while that address is not reserved by another
container: a reservation file for it in any host-local network directory must be absent, or name the
container the item was verified with. The rule goes before the reservation of the same sandbox (a free
address could otherwise be handed to a new pod whose identical rule this delete would then remove), and
host-local's lock of every network directory is held from that check until the delete is done, so no ADD
can be handed the address in between.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from nodegc.hostio.cni_files import MAX_RESERVATION_BYTES, parse_reservation
from nodegc.hostio.files import FileReadError, read_small_file
from nodegc.model.resources import FirewallRule
from nodegc.reclaim.ipam import lock_network_dir
from nodegc.reclaim.outcomes import Outcome
from nodegc.reclaim.rules import RuleTarget, remove_targets
from nodegc.settings import Roots

LOCK_TIMEOUT = 10.0


@contextmanager
def _networks_locked(networks: Path, *, timeout: float) -> Iterator[str | None]:
    """Hold host-local's lock of every network directory (sorted: one order for every holder); yields
    None when all are held, else why not (nothing may then be deleted)."""
    held: list[tuple[int, int]] = []
    why: str | None = None
    try:
        try:
            names = sorted(e.name for e in os.scandir(networks) if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            names = []
        deadline = time.monotonic() + timeout
        for name in names:
            try:
                locked = lock_network_dir(os.path.join(networks, name), timeout=max(deadline - time.monotonic(), 0.1))
            except FileNotFoundError:
                continue
            if locked is None:
                why = f"host-local lock of {name} busy"
                break
            held.append(locked)
    except OSError as e:
        why = f"cannot lock the host-local directories: {e.strerror or e}"
    try:
        yield why
    finally:
        for dir_fd, lock_fd in held:
            os.close(lock_fd)
            os.close(dir_fd)


def _holders(networks: Path, ip: str) -> list[str | None] | None:
    """Container ids of the reservations of `ip` in every network directory; None when unreadable."""
    try:
        names = [e.name for e in os.scandir(networks) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []
    except OSError:
        return None
    found: list[str | None] = []
    for name in names:
        path = os.path.join(networks, name, ip)
        if not os.path.lexists(path):
            continue
        try:
            found.append(parse_reservation(read_small_file(path, limit=MAX_RESERVATION_BYTES).content)[0])
        except (FileReadError, OSError, ValueError):
            return None
    return found


def remove_firewall_rule(rule: FirewallRule, *, container_id: str | None, roots: Roots, timeout: float,
                         backend: str = "auto") -> Outcome:
    return remove_firewall_rules([(rule, container_id)], roots=roots, timeout=timeout, backend=backend)[0]


def remove_firewall_rules(rules: Sequence[tuple[FirewallRule, str | None]], *, roots: Roots, timeout: float,
                          backend: str = "auto") -> list[Outcome]:
    """`remove_firewall_rule` for every (rule, container id) of a cycle: the same check per rule, then one
    iptables-save and one iptables-restore per family for all of them, under host-local's locks."""
    if not rules:
        return []
    with _networks_locked(roots.cni_data_dir / "networks", timeout=min(timeout, LOCK_TIMEOUT)) as busy:
        if busy is not None:
            return [Outcome.failed(f"{busy}: the rule is kept") for _ in rules]
        return _remove_unlocked(rules, roots=roots, timeout=timeout, backend=backend)


def _remove_unlocked(rules: Sequence[tuple[FirewallRule, str | None]], *, roots: Roots, timeout: float,
                     backend: str) -> list[Outcome]:
    outcomes: list[Outcome | None] = []
    targets: list[RuleTarget] = []
    for rule, container_id in rules:
        holders = _holders(roots.cni_data_dir / "networks", rule.ip)
        if holders is None:
            outcomes.append(Outcome.failed(f"cannot read the reservations of {rule.ip}: the rule is kept"))
            continue
        others = [h for h in holders if h != container_id]
        if others:
            outcomes.append(Outcome.changed(f"{rule.ip} is now reserved by container {(others[0] or '?')[:12]}"))
            continue
        outcomes.append(None)
        targets.append(RuleTarget(key=rule.rule, owner=None, rule=rule.rule, table=rule.table, family=rule.family))
    done = remove_targets(targets, net_ns=roots.net_ns, deadline=time.monotonic() + timeout,
                          backend=backend) if targets else {}
    return [o if o is not None else done.get(rule.rule, Outcome.failed("no outcome reported for it"))
            for (rule, _), o in zip(rules, outcomes, strict=True)]
