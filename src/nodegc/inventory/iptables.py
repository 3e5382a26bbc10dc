"""CNI iptables chains and hostport rules of the node, from one iptables-save per address family.

See `nodegc.hostio.iptables` for what counts as a per-container chain and a hostport rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nodegc.hostio.iptables import parse_iptables_save, read_iptables_save
from nodegc.model.resources import HostportRule, IptablesChain, Kind, ReadProblem


def scan_iptables(
    *,
    net_ns: Path | None = None,
    commands: Sequence[str] = ("iptables-save", "ip6tables-save"),
    timeout: float = 30.0,
) -> tuple[tuple[IptablesChain, ...], tuple[HostportRule, ...], tuple[ReadProblem, ...]]:
    text, problems = read_iptables_save(commands=commands, net_ns=net_ns, timeout=timeout)
    chains, hostport, skipped = parse_iptables_save(text)
    where = "iptables-save output"
    parse_problems = tuple(ReadProblem(Kind.IPTABLES_CHAIN, where, reason) for reason in skipped)
    return chains, hostport, problems + parse_problems
