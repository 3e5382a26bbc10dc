"""Which iptables backend holds the node's rules: legacy (x_tables) or nft, decided as kube-proxy's
iptables-wrapper and Calico's `Auto` mode decide it, so one image serves both kinds of node.

The commands of one backend see only that backend's rules: an image whose `iptables-save` is the nft
flavour reads an empty ruleset on a legacy node, and its chains would never be found (or, worse, an
iptables-restore into the wrong backend would leave the real rules in place). The decision:
1. the hint chains kube-proxy and the kubelet create (KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY) in the
   mangle table of one backend name it (nft first, as the wrapper checks);
2. else the backend with more rules wins (IPv4 and IPv6 counted together);
3. else (no rules anywhere, or a backend's tools missing) the image's own `iptables-save`, whatever its
   alternatives point at.
The answer is cached per network namespace for the life of the process (a node does not switch backends
under a running kube-proxy), except a guess made when neither backend holds a rule (a booting node, before
kube-proxy and the first pod): the next call looks again.
"""

from __future__ import annotations

import dataclasses
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from nodegc.settings import in_net_ns

BACKENDS = ("auto", "legacy", "nft", "default")
HINT_CHAINS = ("KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY")


@dataclass(frozen=True)
class Commands:
    """The save and restore commands of one backend, per address family."""

    backend: str
    save: tuple[str, str]
    restore: tuple[str, str]
    reason: str = "asked for"


_COMMANDS = {
    "legacy": Commands("legacy", ("iptables-legacy-save", "ip6tables-legacy-save"),
                       ("iptables-legacy-restore", "ip6tables-legacy-restore")),
    "nft": Commands("nft", ("iptables-nft-save", "ip6tables-nft-save"),
                    ("iptables-nft-restore", "ip6tables-nft-restore")),
    "default": Commands("default", ("iptables-save", "ip6tables-save"), ("iptables-restore", "ip6tables-restore")),
}
DEFAULT_COMMANDS = _COMMANDS["default"]
IPV6_SAVES = frozenset(c.save[1] for c in _COMMANDS.values())
"""The IPv6 dump commands: a node without them has no IPv6 rules nodegc could see (no problem)."""

NO_RULES = "no rules in either backend"
"""How `detect` words a decision made on no rules at all: not cached, the rules may come later."""
_cache: dict[tuple[str, str | None], Commands] = {}
_lock = threading.Lock()


def commands(backend: str, *, net_ns: Path | None = None, timeout: float = 30.0) -> Commands:
    """The commands for `backend` ("auto" detects, once per network namespace and process)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown iptables backend {backend!r} (one of {', '.join(BACKENDS)})")
    if backend != "auto":
        return _COMMANDS[backend]
    key = (backend, str(net_ns) if net_ns is not None else None)
    with _lock:
        found = _cache.get(key)
    if found is not None:
        return found
    chosen, why = detect(net_ns=net_ns, timeout=timeout)
    found = dataclasses.replace(_COMMANDS[chosen], reason=f"detected: {why}")
    if why.startswith(NO_RULES):
        return found  # a guess on an empty ruleset (a booting node): looked at again next time, never kept
    with _lock:
        _cache[key] = found
    return found


class BackendUnknown(Exception):
    """A probe could not finish (timed out): which ruleset holds the node's rules is not known, and
    nothing may be judged absent from a dump of a guessed one. Never cached: the next call probes again."""


def forget() -> None:
    """Drop the cached decisions (tests that build one node after another)."""
    with _lock:
        _cache.clear()


def detect(*, net_ns: Path | None = None, timeout: float = 30.0) -> tuple[str, str]:
    """("legacy" | "nft" | "default", why)."""
    dumps: dict[str, str | None] = {}
    deadline = time.monotonic() + timeout
    for name in ("nft", "legacy"):
        v4 = _dump(_COMMANDS[name].save[0], net_ns, max(deadline - time.monotonic(), 0.1))
        v6 = _dump(_COMMANDS[name].save[1], net_ns, max(deadline - time.monotonic(), 0.1)) if v4 is not None else None
        dumps[name] = None if v4 is None else v4 + (v6 or "")
    available = {k: v for k, v in dumps.items() if v is not None}
    if len(available) < len(dumps):
        missing = sorted(set(dumps) - set(available))
        if not available:
            return "default", "neither iptables-nft-save nor iptables-legacy-save runs here"
        only = next(iter(available))
        return only, f"iptables-{missing[0]}-save does not run here"
    for name in ("nft", "legacy"):
        text = available[name]
        for hint in HINT_CHAINS:
            if f":{hint} " in text:
                return name, f"{hint} chain found in the {name} ruleset"
    counts = {name: _rules(text) for name, text in available.items()}
    if counts["legacy"] > counts["nft"]:
        return "legacy", f"{counts['legacy']} legacy rules, {counts['nft']} nft rules"
    if counts["nft"] > counts["legacy"]:
        return "nft", f"{counts['nft']} nft rules, {counts['legacy']} legacy rules"
    return "default", f"{NO_RULES} ({counts['nft']}): the image's iptables-save"


def _dump(cmd: str, net_ns: Path | None, timeout: float) -> str | None:
    """The dump, or None when the command does not run here; BackendUnknown when it did not finish."""
    try:
        proc = subprocess.run(in_net_ns([cmd], net_ns), capture_output=True, timeout=timeout, check=False)
    except OSError:
        return None
    except subprocess.TimeoutExpired as e:
        raise BackendUnknown(f"{cmd} did not finish in {timeout:g}s; the iptables backend is not known") from e
    if proc.returncode != 0:
        return None
    return proc.stdout.decode("utf-8", "replace")


def _rules(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith("-A "))
