"""CNI iptables chains, hostport rules and firewall-plugin rules of the node, from one iptables-save per
address family.

See `nodegc.hostio.iptables` for what counts as a per-container chain and a hostport rule.

On an nf_tables node the dump is skipped when nothing changed: the kernel bumps the ruleset generation on
every committed change, so a generation equal to the one a previous dump was taken at (read before and
after that dump) means the same rules, and that dump's result is returned again. Legacy (x_tables) rules
have no such counter and are dumped every time; then only the rule lines the last parse did not meet are
parsed (`hostio.iptables.RuleMemo`: a line's parse depends on its text alone).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nodegc.hostio.iptables import RuleMemo, parse_iptables_save, read_iptables_save
from nodegc.hostio.netlink import nft_generation
from nodegc.model.resources import FirewallRule, HostportRule, IptablesChain, Kind, ReadProblem

_All = tuple[tuple[IptablesChain, ...], tuple[HostportRule, ...], tuple[FirewallRule, ...], tuple[ReadProblem, ...]]

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
    reuse: bool = True,
) -> tuple[tuple[IptablesChain, ...], tuple[HostportRule, ...], tuple[ReadProblem, ...]]:
    chains, hostport, _firewall, problems = scan_iptables_all(net_ns=net_ns, commands=commands, timeout=timeout,
                                                              reuse=reuse)
    return chains, hostport, problems


def scan_iptables_all(
    *,
    net_ns: Path | None = None,
    commands: Sequence[str] = ("iptables-save", "ip6tables-save"),
    timeout: float = 30.0,
    reuse: bool = True,
) -> _All:
    """scan_iptables plus the firewall plugin's per-address rules, from the same dumps."""
    key = (str(net_ns) if net_ns is not None else None, tuple(commands))
    generation = nft_generation(net_ns) if reuse and all(_is_nft(c) for c in commands) else None
    if generation is not None:
        with _lock:
            last = _last.get(key)
        if last is not None and last.generation == generation:
            return last.result
    text, problems = read_iptables_save(commands=commands, net_ns=net_ns, timeout=timeout)
    chains, hostport, skipped = parse_iptables_save(text, memo=_RULES if reuse else None)
    where = "iptables-save output"
    parse_problems = tuple(ReadProblem(Kind.IPTABLES_CHAIN, where, reason) for reason in skipped)
    result = (chains, hostport, firewall_rules_of(text), problems + parse_problems)
    if generation is not None and not problems and nft_generation(net_ns) == generation:
        with _lock:
            _last[key] = _Dumped(generation, result)
    return result


@dataclass(frozen=True)
class _Dumped:
    generation: int
    result: _All


_last: dict[tuple[str | None, tuple[str, ...]], _Dumped] = {}
_lock = threading.Lock()
_RULES = RuleMemo()
"""The scan's rule lines already parsed (a legacy node is dumped every scan; most lines stay the same)."""


def forget_dumps() -> None:
    """Drop the remembered dumps (tests)."""
    with _lock:
        _last.clear()
    _RULES.clear()


def _is_nft(command: str) -> bool:
    """Whether this iptables-save speaks to nf_tables (`iptables-save v1.8.9 (nf_tables)`); asked once per
    binary (the path it resolves to, its inode and mtime), so a command swapped on PATH is asked again."""
    path = shutil.which(command)
    if path is None:
        return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    return _version_says_nft(path, st.st_ino, st.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _version_says_nft(path: str, _inode: int, _mtime_ns: int) -> bool:
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and b"(nf_tables)" in proc.stdout + proc.stderr
