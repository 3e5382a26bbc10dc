"""Deleting a firewall plugin rule of a dead attachment (CNI-FORWARD, one address).

The rule names only an address, so it is deleted only while that address is not reserved by another
container: a reservation file for it in any host-local network directory must be absent, or name the
container the item was verified with. The rule goes before the reservation of the same sandbox (a free
address could otherwise be handed to a new pod whose identical rule this delete would then remove).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from nodegc.hostio.cni_files import MAX_RESERVATION_BYTES, parse_reservation
from nodegc.hostio.files import FileReadError, read_small_file
from nodegc.model.resources import FirewallRule
from nodegc.reclaim.outcomes import Outcome
from nodegc.reclaim.rules import RuleTarget, remove_targets
from nodegc.settings import Roots


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
    holders = _holders(roots.cni_data_dir / "networks", rule.ip)
    if holders is None:
        return Outcome.failed(f"cannot read the reservations of {rule.ip}: the rule is kept")
    others = [h for h in holders if h != container_id]
    if others:
        return Outcome.changed(f"{rule.ip} is now reserved by container {(others[0] or '?')[:12]}")
    target = RuleTarget(key=rule.rule, owner=None, rule=rule.rule, table=rule.table, family=rule.family)
    outcomes = remove_targets([target], net_ns=roots.net_ns, deadline=time.monotonic() + timeout,
                              backend=backend)
    return outcomes.get(rule.rule, Outcome.failed("no outcome reported for it"))


def remove_firewall_rules(rules: Sequence[tuple[FirewallRule, str | None]], *, roots: Roots, timeout: float,
                          backend: str = "auto") -> list[Outcome]:
    """`remove_firewall_rule` for every (rule, container id) of a cycle: the same check per rule, then one
    iptables-save and one iptables-restore per family for all of them."""
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
