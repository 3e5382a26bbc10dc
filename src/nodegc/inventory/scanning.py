"""One read-only pass over a node: every reader, in an order that lets later ones reuse earlier reads."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from nodegc.hostio.clock import utcnow
from nodegc.hostio.iptables_backend import DEFAULT_COMMANDS, BackendUnknown
from nodegc.hostio.iptables_backend import commands as iptables_commands
from nodegc.hostio.mountinfo import forget_parses, read_mounts
from nodegc.inventory.cni_cache import forget_parsed_entries, scan_cni_cache
from nodegc.inventory.cni_conf import scan_ranges
from nodegc.inventory.cni_ipam import forget_parsed_reservations, scan_ip_reservations
from nodegc.inventory.cri.runtimes import read_runtime
from nodegc.inventory.iptables import forget_dumps, scan_iptables_all
from nodegc.inventory.links import forget_netnsids, scan_veths
from nodegc.inventory.netns import (
    NetnsReadError,
    count_tasks_in,
    is_runtime_netns_dir,
    netns_file,
    read_netns_addresses_many,
    scan_netns,
    scan_runtime_netns,
)
from nodegc.inventory.pod_dirs import forget_watchers, pod_dir_watcher, scan_pod_dirs
from nodegc.inventory.pod_logs import scan_pod_log_dirs
from nodegc.inventory.static_pods import scan_static_pods
from nodegc.model.resources import (
    FirewallRule,
    HostportRule,
    Inventory,
    IptablesChain,
    Kind,
    NetnsEntry,
    ReadProblem,
)
from nodegc.observe.logs import get_logger
from nodegc.planning.owners import entry_key, netns_key
from nodegc.settings import Roots, ScanOptions

log = get_logger(__name__)
_Rules = tuple[
    tuple[IptablesChain, ...], tuple[HostportRule, ...], tuple[FirewallRule, ...], tuple[ReadProblem, ...]
]


def scan_node(
    roots: Roots,
    options: ScanOptions | None = None,
    *,
    now: Callable[[], datetime] = utcnow,
) -> Inventory:
    options = options or ScanOptions()
    taken_at = now()
    started = time.monotonic()

    # iptables-save runs in its own processes and the runtime answers over its socket: start both first
    # and read the files while they work.
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="scan") as pool:
        backend_problem: ReadProblem | None = None
        try:
            saves = iptables_commands(options.iptables_backend, net_ns=roots.net_ns,
                                      timeout=options.command_timeout).save
        except BackendUnknown as e:
            # The rules are read with the image's iptables-save, and a problem for each kind of rule makes
            # their absence prove nothing (no item of theirs closes or moves on).
            saves = DEFAULT_COMMANDS.save
            backend_problem = ReadProblem(Kind.IPTABLES_CHAIN, "iptables", str(e))
        rules_read = pool.submit(scan_iptables_all, net_ns=roots.net_ns, commands=saves,
                                 timeout=options.command_timeout)
        runtime_read = pool.submit(read_runtime, options)
        inventory = _read_host(roots, taken_at, rules_read, runtime_state_dir=options.runtime_state_dir,
                               watch_pod_dirs=options.watch_pod_dirs)
        runtime = runtime_read.result()
        inventory = dataclasses.replace(inventory, runtime=runtime)
    if runtime is not None and runtime.reachable and options.runtime_state_dir is not None:
        from nodegc.inventory.cri.client import socket_path
        from nodegc.inventory.cri.leftovers import read_leftovers

        leftovers, unread = read_leftovers(options.runtime_state_dir, mounts=inventory.mounts,
                                           proc_root=roots.proc_root, socket=str(socket_path(runtime.endpoint)))
        inventory = dataclasses.replace(inventory, runtime=dataclasses.replace(runtime, leftovers=leftovers),
                                        problems=(*inventory.problems, *unread))
    if runtime is not None and runtime.reachable:
        inventory = _with_tasks(inventory, roots.proc_root)
    inventory = dataclasses.replace(inventory, looked_in=looked_in(roots, options), unread=frozenset(
        (Kind.SANDBOX, Kind.RUNTIME_LEFTOVER) if runtime is None
        else (Kind.RUNTIME_LEFTOVER,) if options.runtime_state_dir is None else ()))
    if backend_problem is not None:
        found = tuple(dataclasses.replace(backend_problem, kind=k)
                      for k in (Kind.IPTABLES_CHAIN, Kind.HOSTPORT_RULE, Kind.FIREWALL_RULE))
        inventory = dataclasses.replace(inventory, problems=(*inventory.problems, *found))
    if runtime is not None and not runtime.reachable:
        # Sandboxes the runtime could not list are not gone: their items must not close or move on.
        found = tuple(ReadProblem(kind, runtime.endpoint, f"runtime unreachable: {runtime.error}")
                      for kind in (Kind.SANDBOX, Kind.RUNTIME_LEFTOVER))
        inventory = dataclasses.replace(inventory, problems=(*inventory.problems, *found))
    inventory = _as_last(inventory)
    log.debug(
        "node scanned",
        seconds=round(time.monotonic() - started, 4),
        pod_dirs=len(inventory.pod_dirs),
        mounts=len(inventory.mounts),
        ip_reservations=len(inventory.ip_reservations),
        cni_cache=len(inventory.cni_cache),
        netns=len(inventory.netns),
        veths=len(inventory.veths),
        chains=len(inventory.chains),
        sandboxes=len(inventory.runtime.sandboxes) if inventory.runtime else None,
        problems=len(inventory.problems),
    )
    return inventory


def looked_in(roots: Roots, options: ScanOptions) -> tuple[tuple[Kind, str], ...]:
    """Where this scan reads the kinds whose resources are paths: an item of another place (left by a run with
    other roots) was not looked for, and its absence from this scan says nothing (`planning.phases.Scope`)."""
    pods = _spellings(roots.kubelet_root / "pods")
    netns = [*_spellings(roots.netns_dir)]
    if options.runtime_state_dir is not None:
        netns += _spellings(options.runtime_state_dir)
    return (*((k, d) for k in (Kind.POD_DIR, Kind.VOLUME_MOUNT) for d in pods),
            *((Kind.CNI_CACHE, d) for d in _spellings(roots.cni_data_dir)),
            *((Kind.NETNS, d) for d in dict.fromkeys(netns)),
            *((Kind.POD_LOG_DIR, d) for d in _spellings(roots.pod_log_dir)))


def _spellings(path: os.PathLike[str]) -> tuple[str, ...]:
    """A configured directory as the readers may spell its entries: as given, normalized, and resolved."""
    given = os.fsdecode(path)
    return tuple(dict.fromkeys(d.rstrip("/") or "/" for d in (
        given, os.path.normpath(given), os.path.normpath(os.path.abspath(given)), os.path.realpath(given))))


_SAME_AS_LAST = ("netns", "veths")
"""The kinds whose readers make every record anew at every scan (the others take a record again from their
reuse while its file, line or watch is unchanged)."""
_last: dict[str, tuple[object, ...]] = {}


def _as_last(inventory: Inventory) -> Inventory:
    """The inventory with each netns and veth record that is equal to the record at its place in the last
    scan replaced by that very object. Equal frozen records are the same to every reader of them, and the
    last correlation's context (`planning.context.Earlier`) still holds the last scan's: at 1,000 pods
    about 0.5 MB of records (their numbers and names with them) were held twice from one cycle to the
    next. Comparing them costs about what the remembered correlation's own comparison saves, since it
    then finds the same objects."""
    changes: dict[str, tuple[object, ...]] = {}
    for name in _SAME_AS_LAST:
        now: tuple[object, ...] = getattr(inventory, name)
        last = _last.get(name, ())
        if len(last) == len(now):
            now = tuple(b if a is not b and a == b else a for a, b in zip(now, last, strict=True))
            changes[name] = now
        _last[name] = now
    return dataclasses.replace(inventory, **changes) if changes else inventory  # type: ignore[arg-type]


def forget_remembered() -> None:
    """Forget every read a later scan takes again while it is provably unchanged (the mount table's
    parse, the iptables dumps, parsed files, pod directory walks, netnsids): the next scan is a process's
    first."""
    forget_parses()
    forget_dumps()
    forget_parsed_entries()
    forget_parsed_reservations()
    forget_watchers()
    forget_netnsids()
    _last.clear()


def _read_host(roots: Roots, taken_at: datetime, rules_read: Future[_Rules], *,
               runtime_state_dir: Path | None = None, watch_pod_dirs: bool = False) -> Inventory:
    problems: list[ReadProblem] = []
    mounts, found = read_mounts(roots.proc_root, reuse=True)
    problems += found
    pod_dirs, found = scan_pod_dirs(roots.kubelet_root, mounts,
                                    watcher=pod_dir_watcher(roots.kubelet_root) if watch_pod_dirs else None)
    problems += found
    reservations, found = scan_ip_reservations(roots.cni_data_dir)
    problems += found
    cache, found = scan_cni_cache(roots.cni_data_dir)
    problems += found
    netns, found = scan_netns(roots.netns_dir, mounts)
    problems += found
    if runtime_state_dir is not None and netns and is_runtime_netns_dir(runtime_state_dir, roots.netns_dir):
        # The state dir's netns folder configured as the netns dir at another path: its files are keyed as
        # the runtime names them (under the state dir), never as /run/netns files of the same name.
        netns = tuple(dataclasses.replace(e, runtime_keyed=True) for e in netns)
    if runtime_state_dir is not None:
        # containerd's netns files under its state dir are network namespaces like any other.
        more, found = scan_runtime_netns(runtime_state_dir, mounts, netns_dir=roots.netns_dir)
        netns += more
        problems += found
    net_ns = os.fsdecode(roots.net_ns) if roots.net_ns is not None else None
    netns, unread = _with_addresses(netns, {k for e in cache if (k := netns_key(e.netns)) is not None}, net_ns)
    problems += unread
    veths, found = scan_veths(netns_entries=netns, net_ns=roots.net_ns)
    problems += found
    static_pods, found = scan_static_pods(roots.static_pod_dir)
    problems += found
    pod_logs, found = scan_pod_log_dirs(roots.pod_log_dir)
    problems += found
    chains, rules, firewall, found = rules_read.result()
    problems += found
    ranges, range_problems = scan_ranges(roots.cni_conf_dir, cache, networks_dir=roots.cni_data_dir / "networks")

    return Inventory(
        taken_at=taken_at,
        pod_dirs=pod_dirs,
        mounts=mounts,
        ip_reservations=reservations,
        cni_cache=cache,
        netns=netns,
        veths=veths,
        chains=chains,
        hostport_rules=rules,
        firewall_rules=firewall,
        static_pods=static_pods,
        pod_logs=pod_logs,
        problems=tuple(problems),
        ip_ranges=ranges,
        ip_range_problems=range_problems,
        net_ns=net_ns,
    )


def _with_tasks(inventory: Inventory, proc_root: Path) -> Inventory:
    """The tasks inside each mounted namespace no sandbox and no cache entry names (a dead one left by a
    partial teardown, if none is inside), and inside the READY sandboxes' (the witness that the process
    table is the node's). Only when there is such a namespace: a node without one walks no table."""
    runtime = inventory.runtime
    if runtime is None:
        return inventory
    named = {k for sb in runtime.sandboxes if (k := netns_key(sb.netns_path))}
    ready = {k for sb in runtime.sandboxes if sb.ready and (k := netns_key(sb.netns_path))}
    cached = {k for e in inventory.cni_cache if (k := netns_key(e.netns))}
    countable = [i for i, e in enumerate(inventory.netns) if e.mounted and e.ns_inode is not None
                 and e.ns_dev is not None]
    tied = named | cached
    alone = [i for i in countable if entry_key(inventory.netns[i]) not in tied]
    if not alone:
        return inventory
    picked = alone + [i for i in countable if entry_key(inventory.netns[i]) in ready]
    ids = {i: (inventory.netns[i].ns_dev or 0, inventory.netns[i].ns_inode or 0) for i in picked}
    counts = count_tasks_in(proc_root, set(ids.values()))
    if isinstance(counts, str):
        log.warning("tasks in namespaces not counted", reason=counts)
        return inventory
    netns = list(inventory.netns)
    for i, key in ids.items():
        netns[i] = dataclasses.replace(netns[i], tasks=counts[key])
    return dataclasses.replace(inventory, netns=tuple(netns))


def with_netns_addresses(inventory: Inventory, paths: set[str]) -> Inventory:
    """The same inventory with the addresses of the named namespaces read (mounted ones not read yet).

    Reading a namespace costs a setns and a netlink dump, so a scan reads only the namespaces no cache
    entry names; before anything acts inside a namespace, the engine asks for its addresses here.
    """
    # One key per namespace that may still be read: the named ones and every other file of the same key.
    unread = [(i, entry_key(e)) for i, e in enumerate(inventory.netns) if e.mounted and not e.addresses_read]
    wanted = {key for i, key in unread if inventory.netns[i].path in paths}
    if not wanted:
        return inventory
    netns, problems = _read_addresses(inventory.netns, [i for i, key in unread if key in wanted], inventory.net_ns)
    return dataclasses.replace(inventory, netns=netns, problems=inventory.problems + tuple(problems))


def _with_addresses(
    entries: tuple[NetnsEntry, ...], referenced: set[str], net_ns: str | None
) -> tuple[tuple[NetnsEntry, ...], list[ReadProblem]]:
    """Only a namespace no cache entry names needs its addresses: they are its last link to a pod."""
    return _read_addresses(entries, [i for i, entry in enumerate(entries)
                                     if entry.mounted and not entry.addresses_read
                                     and entry_key(entry) not in referenced], net_ns)


def _read_addresses(
    entries: tuple[NetnsEntry, ...], wanted: list[int], net_ns: str | None
) -> tuple[tuple[NetnsEntry, ...], list[ReadProblem]]:
    if not wanted:
        return entries, []
    read = read_netns_addresses_many([netns_file(entries[i]) for i in wanted],
                                     node_ns=Path(net_ns) if net_ns is not None else None)
    out = list(entries)
    problems: list[ReadProblem] = []
    for i, found in zip(wanted, read, strict=True):
        if isinstance(found, NetnsReadError):
            problems.append(ReadProblem(Kind.NETNS, entries[i].path, f"cannot read addresses: {found}",
                                        found.cause))
        else:
            out[i] = dataclasses.replace(entries[i], addresses=found, addresses_read=True)
    return tuple(out), problems
