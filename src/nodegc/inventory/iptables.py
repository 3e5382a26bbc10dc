"""CNI iptables chains and hostport rules of the node, from one iptables-save per address family.

See `nodegc.hostio.iptables` for what counts as a per-container chain and a hostport rule.

On an nf_tables node the dump is skipped when nothing changed: the kernel bumps the ruleset generation on
every committed change, so a generation equal to the one a previous dump was taken at (read before and
after that dump) means the same rules, and that dump's result is returned again. Legacy (x_tables) rules
have no such counter and are dumped every time.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nodegc.hostio.iptables import parse_iptables_save, read_iptables_save
from nodegc.hostio.netlink import nft_generation
from nodegc.model.resources import HostportRule, IptablesChain, Kind, ReadProblem

_Result = tuple[tuple[IptablesChain, ...], tuple[HostportRule, ...], tuple[ReadProblem, ...]]


@dataclass(frozen=True)
class _Dumped:
    generation: int
    result: _Result


_last: dict[tuple[str | None, tuple[str, ...]], _Dumped] = {}
_lock = threading.Lock()


def scan_iptables(
    *,
    net_ns: Path | None = None,
    commands: Sequence[str] = ("iptables-save", "ip6tables-save"),
    timeout: float = 30.0,
    reuse: bool = True,
) -> _Result:
    key = (str(net_ns) if net_ns is not None else None, tuple(commands))
    generation = nft_generation(net_ns) if reuse and all(_is_nft(c) for c in commands) else None
    if generation is not None:
        with _lock:
            last = _last.get(key)
        if last is not None and last.generation == generation:
            return last.result
    text, problems = read_iptables_save(commands=commands, net_ns=net_ns, timeout=timeout)
    chains, hostport, skipped = parse_iptables_save(text)
    where = "iptables-save output"
    parse_problems = tuple(ReadProblem(Kind.IPTABLES_CHAIN, where, reason) for reason in skipped)
    result = (chains, hostport, problems + parse_problems)
    if generation is not None and not problems and nft_generation(net_ns) == generation:
        with _lock:
            _last[key] = _Dumped(generation, result)
    return result


def forget_dumps() -> None:
    """Drop the remembered dumps (tests)."""
    with _lock:
        _last.clear()


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
