"""host-local IP ranges: what a node can hand out, what it has handed out, and to whom.

A range here is a host-local *range set*: the list of ranges one allocation draws from (host-local takes
one address per range set, trying its ranges in order), so it runs out only when all of its ranges do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class AddressRange:
    """One host-local range: addresses `start`..`end` of `subnet`, the gateway excluded."""

    subnet: str
    start: str
    end: str
    gateway: str | None
    capacity: int


@dataclass(frozen=True)
class HostLocalRange:
    """A range set of one network, as the CNI configuration describes it."""

    network: str
    ranges: tuple[AddressRange, ...]
    source: str
    """Where it was read: a conflist in the CNI conf dir, or a libcni cache entry's cached config."""
    data_dir: str | None = None
    """host-local's `dataDir` when the configuration sets one (None: the default, <cni data>/networks)."""

    @property
    def label(self) -> str:
        """The range set as it appears in metrics and reports: its subnets, comma separated."""
        return ",".join(r.subnet for r in self.ranges)

    @property
    def capacity(self) -> int:
        return sum(r.capacity for r in self.ranges)


@dataclass(frozen=True)
class RangeUsage:
    """One range set at one scan: reserved = live + leaked + held (protected, unknown, conflicts)."""

    network: str
    range: str
    capacity: int | None
    """None when no configuration describes the range (its reservations are still counted)."""
    reserved: int
    live: int
    leaked: int
    leaked_ips: frozenset[str] = frozenset()
    reserved_ips: frozenset[str] = frozenset()

    @property
    def held(self) -> int:
        """Reserved and not leaked: what is in use or kept (young, unknown, conflicts)."""
        return self.reserved - self.leaked

    @property
    def key(self) -> tuple[str, str]:
        return self.network, self.range


@dataclass(frozen=True)
class RangeForecast:
    """Rates over the window and the time left before the range set is full (inf: not running out)."""

    leak_rate: float
    """Net growth of leaked addresses, per second (robust slope; negative while reclaim outpaces leaks)."""
    new_leak_rate: float
    """Addresses that became leaked, per second (gross: as if nothing were reclaimed)."""
    allocation_rate: float
    """New reservations, per second."""
    seconds_to_exhaustion: float = math.inf
    samples: int = 0


@dataclass(frozen=True)
class RangeStatus:
    usage: RangeUsage
    forecast: RangeForecast

    @property
    def seconds_to_exhaustion(self) -> float:
        return self.forecast.seconds_to_exhaustion
