"""IP range usage and the time to exhaustion (pure: samples in, numbers out; no I/O, no clock).

Model (docs/monitoring.md explains it at length). A range set's reservations are of two sorts:
- held: in use by live pods, or kept (young, unknown, conflicts). Their number is bounded by the pods a
  node may run (the kubelet's maxPods) and moves up and down with churn and rollouts; it does not trend
  towards the capacity, so it is not extrapolated: its peak over the window is what competes with leaks.
- leaked: reservations of dead sandboxes. They accumulate while nothing reclaims them (reclaim blocked,
  failing, or no nodegc at all) and only they can fill a range that is larger than maxPods.
Time to exhaustion = (capacity - peak held - leaked now) / leak rate, where the leak rate is the
Theil-Sen slope (median of pairwise slopes) of the leaked count over the window: net of what nodegc
reclaims, and robust to the steps a reclaim or a burst of deletions makes. The baseline it is measured
against is Prometheus' predict_linear on the reserved count (least squares over the same window):
`bench/forecast.py` runs both on synthetic series with known exhaustion times.
"""

from __future__ import annotations

import ipaddress
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodegc.model.findings import Finding, FindingClass
from nodegc.model.ipranges import HostLocalRange, RangeForecast, RangeStatus, RangeUsage
from nodegc.model.memo import remembered
from nodegc.model.resources import Inventory, Kind

UNKNOWN_RANGE = "unknown"
"""Range label of reservations that no configuration describes (capacity unknown)."""
DEFAULT_WINDOW_SECONDS = 3600.0
MAX_FIT_POINTS = 120
"""Theil-Sen is quadratic in the points; a longer series is thinned evenly to this many."""


# -- usage -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Bounds:
    version: int
    low: int
    high: int


def _bounds(r: HostLocalRange) -> list[_Bounds]:
    out: list[_Bounds] = []
    for a in r.ranges:
        net = ipaddress.ip_network(a.subnet)
        out.append(_Bounds(net.version, int(net.network_address), int(net.broadcast_address)))
    return out


def range_usage(inventory: Inventory, findings: Iterable[Finding]) -> tuple[RangeUsage, ...]:
    """Every known range set, and every network's reservations outside them, with who holds what."""
    cls_by_id = {f.id: f.cls for f in findings if f.kind is Kind.IP_RESERVATION}
    by_network: dict[str, list[tuple[str, list[_Bounds]]]] = {}
    for r in inventory.ip_ranges:
        by_network.setdefault(r.network, []).append((r.label, _bounds(r)))
    reserved: dict[tuple[str, str], set[str]] = {(r.network, r.label): set() for r in inventory.ip_ranges}
    live: dict[tuple[str, str], int] = {}
    leaked: dict[tuple[str, str], set[str]] = {}
    capacity: dict[tuple[str, str], int | None] = {(r.network, r.label): r.capacity for r in inventory.ip_ranges}
    for res in inventory.ip_reservations:
        key = (res.network, _range_of(res.ip, by_network.get(res.network, ())))
        capacity.setdefault(key, None)
        reserved.setdefault(key, set()).add(res.ip)
        cls = cls_by_id.get(f"{res.network}/{res.ip}")
        if cls is FindingClass.IN_USE:
            live[key] = live.get(key, 0) + 1
        elif cls is FindingClass.LEAKED_IP:
            leaked.setdefault(key, set()).add(res.ip)
    return tuple(
        RangeUsage(network=net, range=label, capacity=capacity[(net, label)], reserved=len(ips),
                   live=live.get((net, label), 0), leaked=len(leaked.get((net, label), ())),
                   leaked_ips=frozenset(leaked.get((net, label), ())), reserved_ips=frozenset(ips))
        for (net, label), ips in sorted(reserved.items())
    )


def _range_of(ip: str, candidates: Iterable[tuple[str, list[_Bounds]]]) -> str:
    version, value = _as_int(ip)
    for label, bounds in candidates:
        for b in bounds:
            if b.version == version and b.low <= value <= b.high:
                return label
    return UNKNOWN_RANGE


@remembered(65536)
def _as_int(ip: str) -> tuple[int, int]:
    """(version, integer) of an address, remembered: a node's addresses come back every scan."""
    addr = ipaddress.ip_address(ip)
    return addr.version, int(addr)


# -- fitting -----------------------------------------------------------------------------------------

Point = tuple[float, float]


def _thin(points: Sequence[Point], limit: int = MAX_FIT_POINTS) -> Sequence[Point]:
    if len(points) <= limit:
        return points
    step = (len(points) - 1) / (limit - 1)
    return [points[round(i * step)] for i in range(limit)]


def theil_sen_slope(points: Sequence[Point]) -> float:
    """Median of the slopes between every pair of points (0 with fewer than two distinct times)."""
    pts = _thin(points)
    slopes = [(y2 - y1) / (t2 - t1) for i, (t1, y1) in enumerate(pts) for t2, y2 in pts[i + 1:] if t2 != t1]
    return _median(slopes) if slopes else 0.0


def _median(values: list[float]) -> float:
    """statistics.median's value (the mean of the middle two of an even count), without importing the
    statistics module and the fractions and decimal modules it brings (a third of a megabyte)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def least_squares(points: Sequence[Point]) -> tuple[float, float]:
    """(slope, value at the last point's time) of the least-squares line, as predict_linear fits it."""
    n = len(points)
    if n < 2:
        return 0.0, points[-1][1] if points else 0.0
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return 0.0, my
    slope = sum((t - mt) * (y - my) for t, y in points) / var
    return slope, my + slope * (points[-1][0] - mt)


def linear_exhaustion(points: Sequence[Point], capacity: float) -> float:
    """The baseline: seconds until predict_linear of the reserved count reaches the capacity."""
    slope, now_value = least_squares(points)
    if now_value >= capacity:
        return 0.0
    return math.inf if slope <= 0 else (capacity - now_value) / slope


def leak_exhaustion(*, capacity: float, held_peak: float, leaked_now: float, leak_rate: float) -> float:
    """nodegc's model: what is left after the peak of held addresses, eaten at the net leak rate."""
    headroom = capacity - held_peak - leaked_now
    if headroom <= 0:
        return 0.0
    return math.inf if leak_rate <= 0 else headroom / leak_rate


# -- the series of one range, and all of them --------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    at: float
    reserved: int
    held: int
    leaked: int
    allocated: int = 0
    """Reservations that were not there at the previous sample."""
    new_leaks: int = 0
    """Leaked addresses that were not leaked at the previous sample."""


def forecast(samples: Sequence[Sample], capacity: int | None) -> RangeForecast:
    if len(samples) < 2 or samples[-1].at <= samples[0].at:
        left = math.inf
        if capacity is not None and samples and samples[-1].reserved >= capacity:
            left = 0.0
        return RangeForecast(leak_rate=0.0, new_leak_rate=0.0, allocation_rate=0.0, seconds_to_exhaustion=left,
                             samples=len(samples))
    span = samples[-1].at - samples[0].at
    rate = theil_sen_slope([(s.at, float(s.leaked)) for s in samples])
    left = math.inf
    if capacity is not None:
        left = leak_exhaustion(capacity=capacity, held_peak=max(s.held for s in samples),
                               leaked_now=samples[-1].leaked, leak_rate=rate)
    return RangeForecast(
        leak_rate=rate,
        new_leak_rate=sum(s.new_leaks for s in samples[1:]) / span,
        allocation_rate=sum(s.allocated for s in samples[1:]) / span,
        seconds_to_exhaustion=left,
        samples=len(samples),
    )


class RangeTracker:
    """The window of samples per range set, fed once per scan. State, but no I/O: the agent keeps a copy
    in its state directory (`snapshot`, `restore`), so a restart does not empty the window.

    The window belongs to one node (`node`), as the ledger does: its samples were judged against that node's
    pods, so a copy carried to another node (a state directory on a re-attached disk, a disk image) is
    another node's history. `own` starts it afresh for a node other than the one recorded."""

    def __init__(self, *, window_seconds: float = DEFAULT_WINDOW_SECONDS) -> None:
        self.window = window_seconds
        self._series: dict[tuple[str, str], deque[Sample]] = {}
        self._last: dict[tuple[str, str], RangeUsage] = {}
        self.node: str | None = None
        """The node the samples were taken on; None: not known yet (a new window, or one restored from a copy
        written before the node was recorded), taken as the next `own`'s."""

    def own(self, node: str) -> int:
        """Make the window `node`'s before it is fed: one recorded for another node is emptied. Returns how
        many samples of another node were dropped (0: the window was `node`'s, or had no node yet)."""
        dropped = 0
        if self.node is not None and self.node != node:
            dropped = sum(len(series) for series in self._series.values())
            self._series.clear()
            self._last.clear()
        self.node = node
        return dropped

    def observe(self, usages: Iterable[RangeUsage], now: float) -> tuple[RangeStatus, ...]:
        statuses: list[RangeStatus] = []
        seen: set[tuple[str, str]] = set()
        for u in usages:
            seen.add(u.key)
            series = self._series.setdefault(u.key, deque())
            previous = self._last.get(u.key)
            sample = Sample(
                at=now, reserved=u.reserved, held=u.held, leaked=u.leaked,
                allocated=len(u.reserved_ips - previous.reserved_ips) if previous else 0,
                new_leaks=len(u.leaked_ips - previous.leaked_ips) if previous else 0,
            )
            if series and series[-1].at >= now:
                series.pop()  # the clock did not move (or stepped back): keep one sample per instant
            series.append(sample)
            while series and series[0].at < now - self.window:
                series.popleft()
            self._last[u.key] = u
            statuses.append(RangeStatus(usage=u, forecast=forecast(list(series), u.capacity)))
        for gone in set(self._series) - seen:
            del self._series[gone]
            self._last.pop(gone, None)
        return tuple(statuses)

    def snapshot(self) -> dict[str, Any]:
        """The window as plain data (JSON-ready): the node it belongs to (when known) and, per range set, its
        samples."""
        return {"version": 1, **({"node": self.node} if self.node is not None else {}), "series": [
            {"network": net, "range": label,
             "samples": [[x.at, x.reserved, x.held, x.leaked, x.allocated, x.new_leaks] for x in series]}
            for (net, label), series in sorted(self._series.items())]}

    def restore(self, doc: object, now: float) -> int:
        """Samples of a snapshot that are inside the window as of `now` (none from the future: a clock that
        stepped back); anything malformed is skipped, and a snapshot whose node is not a name is not taken at
        all. The snapshot's node becomes the window's (none: the window's is kept, and the next `own` takes
        the samples as its node's). Returns how many samples were taken."""
        taken = 0
        series_list = doc.get("series") if isinstance(doc, dict) and doc.get("version") == 1 else None
        node = doc.get("node") if isinstance(doc, dict) else None
        if node is not None and not (isinstance(node, str) and node):
            return 0
        if node is not None and series_list is not None:
            self.node = node
        for entry in series_list if isinstance(series_list, list) else []:
            if not isinstance(entry, dict):
                continue
            net, label, raw = entry.get("network"), entry.get("range"), entry.get("samples")
            if not (isinstance(net, str) and isinstance(label, str) and isinstance(raw, list)):
                continue
            samples = [_sample(row) for row in raw]
            kept = sorted((x for x in samples if x is not None and now - self.window <= x.at <= now),
                          key=lambda x: x.at)
            if kept:
                self._series[(net, label)] = deque(kept)
                taken += len(kept)
        return taken


def _sample(row: object) -> Sample | None:
    if not (isinstance(row, list) and len(row) == 6 and all(isinstance(v, int | float) for v in row)):
        return None
    at, reserved, held, leaked, allocated, new_leaks = row
    try:
        if not all(math.isfinite(v) and v >= 0 for v in row):
            return None
    except OverflowError:  # an int too big for a float: no count of addresses is
        return None
    return Sample(at=float(at), reserved=int(reserved), held=int(held), leaked=int(leaked),
                  allocated=int(allocated), new_leaks=int(new_leaks))


# -- what the forecast is used for -------------------------------------------------------------------


def reclaim_urgency(statuses: Iterable[RangeStatus]) -> Mapping[str, tuple[float, float]]:
    """For each reserved address (`network/ip`): (seconds to exhaustion of its range, minus the share of
    the range in use). Sorted ascending, the addresses of the range closest to running out come first,
    and among ranges that are not running out, those of the fullest. The engine reclaims in that order
    when the rate limit holds work back."""
    out: dict[str, tuple[float, float]] = {}
    for s in statuses:
        u = s.usage
        share = u.reserved / u.capacity if u.capacity else 0.0
        for ip in u.reserved_ips:
            out[f"{u.network}/{ip}"] = (s.seconds_to_exhaustion, -share)
    return out


NOT_URGENT = (math.inf, 0.0)
"""The urgency of what is not an address of a known range."""
