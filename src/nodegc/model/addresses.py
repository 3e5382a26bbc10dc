"""IP address spelling: one canonical text per address, so that every source compares alike.

Pure (stdlib `ipaddress` only), so the readers, the planner and the desired-state parsers share it.
"""

from __future__ import annotations

import ipaddress
import sys

from nodegc.model.memo import remembered


@remembered(65536)
def normalized_ip(text: str) -> str:
    """str(ip_address(text)), remembered: a node's few thousand addresses come back every scan.
    ValueError when `text` is not exactly an address. Interned: every reader's records spell it alike."""
    return sys.intern(str(ipaddress.ip_address(text)))


@remembered(65536)
def interface_ip(text: str) -> str:
    """The address of `addr/prefix` (or of a bare address), canonical; ValueError otherwise."""
    return sys.intern(str(ipaddress.ip_interface(text).ip))
