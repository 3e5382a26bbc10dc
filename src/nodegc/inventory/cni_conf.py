"""host-local ranges from the CNI network configuration: the conf dir and the configs cached at ADD.

The conf dir says what the runtime uses now; a cache entry keeps the configuration a sandbox was set up
with, which still describes the range of its reservation after the conf dir changed (a new pod CIDR, a
removed network). Both are read; the same range set seen twice counts once. Capacity follows host-local:
`rangeStart` (default: the subnet's first address after the network address) to `rangeEnd` (default: the
last address, the broadcast address excluded for IPv4), the gateway excluded when it falls inside.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nodegc.hostio.files import FileReadError, irregular, list_top_dir, read_small_file
from nodegc.model.ipranges import AddressRange, HostLocalRange
from nodegc.model.resources import CNICacheEntry, Kind

MAX_CONF_BYTES = 1024 * 1024
CONF_EXTENSIONS = (".conf", ".conflist", ".json")
"""What libcni's ConfFiles picks up in the conf dir."""
_LISTING_KIND = Kind.CNI_CACHE  # only for list_top_dir's signature; the problem is returned as text

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class RangeError(ValueError):
    """A host-local range that host-local itself would refuse."""


def address_range(spec: Mapping[str, Any]) -> AddressRange:
    """One host-local range, canonicalized the way host-local does (range.go Canonicalize)."""
    raw = spec.get("subnet")
    if not isinstance(raw, str):
        raise RangeError("range has no subnet")
    try:
        iface = ipaddress.ip_interface(raw)
    except ValueError as e:
        raise RangeError(f"subnet {raw!r} is not a CIDR") from e
    net: IPNetwork = iface.network
    if net.prefixlen > net.max_prefixlen - 2:
        raise RangeError(f"network {net} too small to allocate from")
    gateway = _address(spec, "gateway", net)
    start = _address(spec, "rangeStart", net) or net.network_address + 1
    last = net.broadcast_address - 1 if net.version == 4 else net.broadcast_address
    end = _address(spec, "rangeEnd", net) or last
    if int(end) < int(start):
        raise RangeError(f"rangeEnd {end} is before rangeStart {start}")
    # host-local claims .1 as the gateway when none is set, and never hands out the gateway.
    gw = gateway if gateway is not None else net.network_address + 1
    capacity = int(end) - int(start) + 1
    if int(start) <= int(gw) <= int(end):
        capacity -= 1
    return AddressRange(subnet=str(net), start=str(start), end=str(end), gateway=str(gw), capacity=capacity)


def _address(spec: Mapping[str, Any], key: str, net: IPNetwork) -> IPAddress | None:
    raw = spec.get(key)
    if raw in (None, ""):
        return None
    if not isinstance(raw, str):
        raise RangeError(f"{key} is not a string")
    try:
        ip = ipaddress.ip_address(raw)
    except ValueError as e:
        raise RangeError(f"{key} {raw!r} is not an IP address") from e
    if ip not in net:
        raise RangeError(f"{key} {ip} is not in {net}")
    return ip


def host_local_ranges(doc: Mapping[str, Any], *, source: str) -> tuple[tuple[HostLocalRange, ...], list[str]]:
    """Range sets of every host-local IPAM in a network config (.conf) or list (.conflist)."""
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        return (), ["network configuration has no name"]
    plugins = doc.get("plugins")
    configs: list[Any] = plugins if isinstance(plugins, list) else [doc]
    found: list[HostLocalRange] = []
    errors: list[str] = []
    for plugin in configs:
        ipam = plugin.get("ipam") if isinstance(plugin, dict) else None
        if not isinstance(ipam, dict) or ipam.get("type") != "host-local":
            continue
        data_dir = ipam.get("dataDir") if isinstance(ipam.get("dataDir"), str) else None
        sets = ipam.get("ranges")
        if sets is None and "subnet" in ipam:
            sets = [[{k: ipam[k] for k in ("subnet", "rangeStart", "rangeEnd", "gateway") if k in ipam}]]
        if not isinstance(sets, list):
            errors.append(f"network {name}: host-local has no ranges")
            continue
        for range_set in sets:
            if not isinstance(range_set, list) or not range_set:
                errors.append(f"network {name}: a range set is not a non-empty list")
                continue
            try:
                ranges = tuple(address_range(r if isinstance(r, dict) else {}) for r in range_set)
            except RangeError as e:
                errors.append(f"network {name}: {e}")
                continue
            found.append(HostLocalRange(network=name, ranges=ranges, source=source, data_dir=data_dir))
    return tuple(found), errors


def _parse(content: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"not a JSON network configuration: {type(e).__name__}") from e
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc


def scan_ranges(
    cni_conf_dir: Path, cache: Iterable[CNICacheEntry], *, networks_dir: Path | None = None
) -> tuple[tuple[HostLocalRange, ...], tuple[str, ...]]:
    """Every host-local range set the node's CNI configuration (current, or cached at ADD) describes.

    Problems come back as text ("<path>: <reason>"), not as ReadProblems of a resource kind: a bad
    configuration file says nothing about whether the reservations or cache entries could be read.
    A range whose host-local `dataDir` is not `networks_dir` (where the reservations are read) is left out
    with a problem: its reservations are elsewhere, and an empty-looking range would mislead."""
    problems: list[str] = []
    found: dict[tuple[str, str], HostLocalRange] = {}

    def add(doc: dict[str, Any], source: str, path: str) -> None:
        ranges, errors = host_local_ranges(doc, source=source)
        problems.extend(f"{path}: {e}" for e in errors)
        for r in ranges:
            if networks_dir is not None and r.data_dir and os.path.normpath(r.data_dir) != os.path.normpath(
                    os.fsdecode(networks_dir)):
                problems.append(f"{path}: network {r.network} keeps its reservations in {r.data_dir}, not in "
                                f"{os.fsdecode(networks_dir)}; range {r.label} not counted")
                continue
            found.setdefault((r.network, r.label), r)

    entries, problem = list_top_dir(os.fsdecode(cni_conf_dir), kind=_LISTING_KIND)
    if problem is not None:
        problems.append(f"{problem.path}: {problem.reason}")
    for entry in entries:
        if not entry.name.endswith(CONF_EXTENSIONS):
            continue
        if (why := irregular(entry)) is not None:
            problems.append(f"{entry.path}: {why}")
            continue
        try:
            add(_parse(read_small_file(entry.path, limit=MAX_CONF_BYTES).content), "conf", entry.path)
        except (FileReadError, ValueError) as e:
            problems.append(f"{entry.path}: {e}")
    seen_configs: set[str] = set()
    for c in cache:
        if c.config_json is None or c.config_json in seen_configs:
            continue
        seen_configs.add(c.config_json)
        try:
            add(_parse(c.config_json.encode()), "cache", c.path)
        except ValueError as e:
            problems.append(f"{c.path}: cached config: {e}")
    return tuple(sorted(found.values(), key=lambda r: (r.network, r.label))), tuple(problems)
