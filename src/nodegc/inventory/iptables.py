"""CNI iptables chains and hostport rules of the node, from one iptables-save per address family.

See `nodegc.hostio.iptables` for what counts as a per-container chain and a hostport rule.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from pathlib import Path

from nodegc.hostio.iptables import parse_iptables_save, read_iptables_save
from nodegc.model.resources import FirewallRule, HostportRule, IptablesChain, Kind, ReadProblem

_FIREWALL_RULE = re.compile(
    r"^-A CNI-FORWARD -(?P<dir>[ds]) (?P<ip>[0-9a-fA-F.:]+)/(?P<plen>32|128)"
    r"(?: -m conntrack --ctstate RELATED,ESTABLISHED)? -j ACCEPT$"
)


def firewall_rules_of(text: str) -> tuple[FirewallRule, ...]:
    """The firewall plugin's per-address rules (exactly its two shapes; anything else in CNI-FORWARD is
    not one of them and is left out)."""
    out: list[FirewallRule] = []
    table = ""
    for raw in text.split("\n"):
        line = raw.strip()
        if line.startswith("*"):
            table = line[1:].strip()
            continue
        if table != "filter" or not line.startswith("-A CNI-FORWARD "):
            continue
        m = _FIREWALL_RULE.match(line)
        if m is None:
            continue
        try:
            ip = ipaddress.ip_address(m["ip"])
        except ValueError:
            continue
        family = 1 if ip.version == 6 else 0
        if (m["plen"] == "128") != (family == 1) or (m["dir"] == "d") != ("conntrack" in line):
            continue
        out.append(FirewallRule(table=table, chain="CNI-FORWARD", rule=line, ip=str(ip), family=family))
    return tuple(out)


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


def scan_iptables_all(
    *,
    net_ns: Path | None = None,
    commands: Sequence[str] = ("iptables-save", "ip6tables-save"),
    timeout: float = 30.0,
) -> tuple[tuple[IptablesChain, ...], tuple[HostportRule, ...], tuple[FirewallRule, ...], tuple[ReadProblem, ...]]:
    """scan_iptables plus the firewall plugin's per-address rules, from the same dumps."""
    text, problems = read_iptables_save(commands=commands, net_ns=net_ns, timeout=timeout)
    chains, hostport, skipped = parse_iptables_save(text)
    where = "iptables-save output"
    parse_problems = tuple(ReadProblem(Kind.IPTABLES_CHAIN, where, reason) for reason in skipped)
    return chains, hostport, firewall_rules_of(text), problems + parse_problems
