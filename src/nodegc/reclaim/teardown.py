"""CNI DEL without the plugin processes, for the plugin chains whose DEL nodegc knows completely.

A CNI DEL of the reference plugins (bridge with host-local IPAM, portmap, firewall, loopback, tuning,
bandwidth) changes a known, small set of things on the host: the host-local reservation files of the
container, the veth pair, the bridge's masquerade chain (`CNI-<hash>` and its POSTROUTING jump), portmap's
`CNI-DN-<hash>` (and old `CNI-SN-<hash>`) chains and the jumps into them, the firewall plugin's two rules per
address in `CNI-FORWARD`, and bandwidth's ifb device `bwp<hash>`. Run once per attachment, each DEL starts
several processes and every iptables call in them reloads the whole table, so reclaiming a few hundred
attachments takes minutes. Done here for a whole batch, the same changes take one netlink socket for every
link, one iptables-save and one iptables-restore per family for every rule, and one lock per host-local
network directory for every reservation.

An attachment takes this path only when every plugin of its cached configuration is one of these, its
binary on the CNI path introduces itself as that reference plugin, and the configuration uses no option
whose DEL does something else (tuning restoring a saved interface state, a firewall backend other than
iptables, host-local with a data directory other than nodegc's ...). Anything else goes through the real
plugins. The checks are the ones CNI DEL gets: the cache file is re-read and must be the same file naming
the same container, network and configuration; a reservation is removed only while it names the container;
a link only while its name, kind and MAC are the cached ones (and a veth only while its peer is in the namespace
the entry names, the only one the bridge plugin's DEL acts in); a chain only while no other container's
comment claims it; a firewall rule only while the attachment's own reservation holds its address and no
other container's does.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodegc.hostio.cni_files import IPAM_LOCK_NAME, LAST_RESERVED_PREFIX, MAX_RESERVATION_BYTES, parse_reservation
from nodegc.hostio.files import FileReadError, read_small_file
from nodegc.hostio.netlink import NetlinkError, NetnsFile, RawLink, RtnlSocket, delete_together, open_netns
from nodegc.model.resources import CNICacheEntry
from nodegc.planning.owners import CRI_NETNS_SUBDIR
from nodegc.reclaim.cni_del import (
    HOST_LOCAL_DEFAULT_DIR,
    Changed,
    Gone,
    is_data_dir,
    netns_for_del,
    plugins_of,
    reread,
)
from nodegc.reclaim.cni_exec import CNIError, find_plugin
from nodegc.reclaim.ipam import lock_network_dir
from nodegc.reclaim.outcomes import Outcome
from nodegc.reclaim.rules import RuleTarget, remove_targets
from nodegc.settings import Roots

_HASH_NAME_MAX = 28
_IFB_NAME_MAX = 15
_COMMON_KEYS = frozenset({"type", "name", "cniVersion", "capabilities", "runtimeConfig", "args", "prevResult"})
_KNOWN_KEYS: Mapping[str, frozenset[str]] = {
    "bridge": frozenset({"bridge", "isGateway", "isDefaultGateway", "forceAddress", "ipMasq", "mtu",
                         "hairpinMode", "promiscMode", "vlan", "preserveDefaultVlan", "enabledad", "ipam"}),
    "host-local": frozenset({"ranges", "subnet", "rangeStart", "rangeEnd", "gateway", "routes", "dataDir",
                             "resolvConf"}),
    "portmap": frozenset({"snat", "markMasqBit", "externalSetMarkChain", "conditionsV4", "conditionsV6"}),
    "firewall": frozenset({"backend", "iptablesAdminChainName"}),
    "loopback": frozenset(),
    "tuning": frozenset({"sysctl", "dataDir"}),
    "bandwidth": frozenset({"ingressRate", "ingressBurst", "egressRate", "egressBurst"}),
}
"""Options whose DEL this module reproduces; any other option sends the attachment through the plugins."""
_FORWARD_CHAIN = "CNI-FORWARD"
_ABOUT_TIMEOUT = 5.0

Identify = Callable[[str], str | None]
"""Plugin type -> None when its binary is the reference plugin, else why not."""


def _hashed(network: str, container_id: str) -> str:
    return hashlib.sha512((network + container_id).encode()).hexdigest()


def chain_name(network: str, container_id: str, prefix: str = "") -> str:
    """libcni's FormatChainName / the plugins' MustFormatHashWithPrefix, as the bridge and portmap use it."""
    head = "CNI-" + prefix
    return head + _hashed(network, container_id)[: _HASH_NAME_MAX - len(head)]


def ifb_name(network: str, container_id: str) -> str:
    """The bandwidth plugin's ifb device for one container."""
    return "bwp" + _hashed(network, container_id)[: _IFB_NAME_MAX - 3]


@dataclass(frozen=True)
class Teardown:
    """What the reference plugins' DEL of one attachment removes from the host."""

    entry: CNICacheEntry
    plugins: tuple[str, ...]
    ipam_dir: str | None = None
    """host-local's directory of this network, when the chain allocates through it."""
    bridge: str | None = None
    chains: tuple[str, ...] = ()
    firewall: bool = False
    ifb: str | None = None


def plan(entry: CNICacheEntry, *, roots: Roots, identify: Identify) -> Teardown | str:
    """The teardown of `entry`, or why it must go through the plugins."""
    try:
        return _plan(entry, roots=roots, identify=identify)
    except ValueError as e:  # a NUL in a cached path, say: the plugins' DEL decides (and fails cleanly)
        return f"cached configuration unusable: {e}"


def _plan(entry: CNICacheEntry, *, roots: Roots, identify: Identify) -> Teardown | str:
    if entry.config_json is None:
        return "no cached network configuration"
    try:
        network, _version, plugins = plugins_of(entry.config_json)
    except ValueError as e:
        return f"cached configuration unusable: {e}"
    if network != entry.network:
        return f"configuration names network {network!r}, the cache entry {entry.network!r}"
    types: list[str] = []
    td: dict[str, Any] = {"chains": []}
    for plugin in plugins:
        kind = plugin.get("type")
        if not isinstance(kind, str) or kind not in _KNOWN_KEYS:
            return f"plugin {kind!r} is not one nodegc tears down itself"
        why = _odd_options(kind, plugin) or identify(kind)
        if why:
            return why
        types.append(kind)
        if kind == "bridge":
            why = _bridge(plugin, entry, roots=roots, identify=identify, td=td)
            if why:
                return why
            if td.get("ipam_dir"):
                types.append("host-local")
        elif kind == "portmap":
            td["chains"] += [chain_name(network, entry.container_id, "DN-"),
                             chain_name(network, entry.container_id, "SN-")]
        elif kind == "firewall":
            if plugin.get("backend") != "iptables":
                return "firewall backend is not iptables (without one, the plugin picks firewalld when it runs)"
            td["firewall"] = True
        elif kind == "tuning":
            changes = {"mac", "mtu", "promisc", "allmulti", "txQLen"} & set(plugin)
            declared = plugin.get("capabilities") or {}
            if changes or (isinstance(declared, dict) and declared.get("mac")):
                return "tuning changes the interface and restores it on DEL"
        elif kind == "bandwidth":
            td["ifb"] = ifb_name(network, entry.container_id)
    return Teardown(entry=entry, plugins=tuple(types), ipam_dir=td.get("ipam_dir"), bridge=td.get("bridge"),
                    chains=tuple(td["chains"]), firewall=bool(td.get("firewall")), ifb=td.get("ifb"))


def _odd_options(kind: str, plugin: Mapping[str, Any]) -> str | None:
    odd = sorted(set(plugin) - _COMMON_KEYS - _KNOWN_KEYS[kind])
    return f"{kind} option(s) {odd} not known to nodegc" if odd else None


def _bridge(plugin: Mapping[str, Any], entry: CNICacheEntry, *, roots: Roots, identify: Identify,
            td: dict[str, Any]) -> str | None:
    bridge = plugin.get("bridge") or "cni0"
    if not isinstance(bridge, str):
        return "bridge name is not a string"
    td["bridge"] = bridge
    if plugin.get("ipMasq"):
        td["chains"].append(chain_name(entry.network, entry.container_id))
    ipam = plugin.get("ipam")
    if ipam is None:
        return None
    if not isinstance(ipam, dict) or ipam.get("type") != "host-local":
        return f"IPAM {ipam.get('type') if isinstance(ipam, dict) else ipam!r} is not host-local"
    why = _odd_options("host-local", ipam) or identify("host-local")
    if why:
        return why
    data_dir = ipam.get("dataDir") or HOST_LOCAL_DEFAULT_DIR
    if not isinstance(data_dir, str):
        return "host-local dataDir is not a string"
    ours = os.path.join(os.fsdecode(roots.cni_data_dir), "networks")
    if not is_data_dir(data_dir, ours):
        return f"host-local keeps its files in {data_dir}, not in {ours}"
    if "/" in entry.network or "\0" in entry.network or entry.network in ("", ".", ".."):
        return f"network name {entry.network!r} is no directory name"
    td["ipam_dir"] = os.path.join(ours, entry.network)
    return None


# --- which binaries are the reference plugins -----------------------------------------------------------


def identifier(cni_bin_dirs: Sequence[Path]) -> Identify:
    """An `Identify` over these directories. A reference plugin run without CNI_COMMAND prints
    `CNI <type> plugin <version>` (on stderr); the answer is kept per binary (path, inode, size, mtime)."""

    def identify(kind: str) -> str | None:
        try:
            binary = find_plugin(kind, cni_bin_dirs)
            st = os.stat(binary)
        except (CNIError, OSError) as e:
            return f"plugin {kind}: {e}"
        return _about(str(binary), kind, st.st_ino, st.st_size, st.st_mtime_ns)

    return identify


@functools.lru_cache(maxsize=64)
def _about(binary: str, kind: str, _inode: int, _size: int, _mtime_ns: int) -> str | None:
    try:
        proc = subprocess.run([binary], env={}, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=_ABOUT_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"plugin {kind}: cannot ask {binary} what it is: {e}"
    about = proc.stderr or proc.stdout  # skel prints it on stderr
    if proc.returncode != 0 or not about.startswith(f"CNI {kind} plugin ".encode()):
        return f"{binary} does not introduce itself as the reference {kind} plugin"
    return None


# --- doing it, for a whole batch ------------------------------------------------------------------------


@dataclass
class _Progress:
    teardown: Teardown
    result: Mapping[str, Any] | None = None
    done: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    final: Outcome | None = None
    """Set when the attachment was not touched at all (gone, changed, unreadable)."""


def tear_down(teardowns: Sequence[Teardown], *, roots: Roots, timeout: float = 30.0,
              iptables_backend: str = "auto", runtime_state_dir: Path | None = None) -> list[Outcome]:
    """Undo each attachment as its plugins' DEL would, all at once; one outcome per teardown, in order.

    Steps go in the order the plugins' DEL takes (firewall, portmap, bridge with host-local last), with
    host-local's lock of each network directory held from the survey of who holds which address until the
    reservations are released: the links and rules go first, and no ADD can be handed an address while its
    old rules are still being removed (the firewall rules name only the address). A step that fails for
    one attachment fails that attachment only (the engine retries it), never the others, and an attachment
    that failed a step keeps its reservations.
    """
    deadline = time.monotonic() + timeout
    work = [_Progress(t) for t in teardowns]
    for p in work:
        _verify(p)
    live = [p for p in work if p.final is None]
    with _NetworkLocks(live, deadline=deadline) as locks:
        ready = [p for p in live if not p.failures]
        _delete_links(ready, roots=roots, runtime_state_dir=runtime_state_dir)
        _remove_rules(ready, locks, net_ns=roots.net_ns, deadline=deadline, backend=iptables_backend)
        locks.release([p for p in ready if not p.failures])
    out: list[Outcome] = []
    for p in work:
        if p.final is not None:
            out.append(p.final)
        elif p.failures:
            out.append(Outcome.failed("direct teardown incomplete, cache entry kept: " + "; ".join(p.failures)))
        else:
            what = ", ".join(p.done) if p.done else "nothing was left"
            out.append(Outcome.done(f"torn down directly as {'+'.join(p.teardown.plugins)} DEL would: {what}; "
                                    "cache entry kept until the sandbox's other leftovers are gone"))
    return out


def _verify(p: _Progress) -> None:
    try:
        doc = reread(p.teardown.entry)
    except Gone:
        p.final = Outcome.gone("cache entry already removed")
        return
    except Changed as e:
        p.final = Outcome.changed(str(e))
        return
    except ValueError as e:
        p.final = Outcome.failed(f"cache entry unreadable: {e}")
        return
    result = doc.get("result")
    p.result = result if isinstance(result, dict) else None


LOCK_TIMEOUT = 10.0
"""At most this long for one host-local lock: a busy network must not spend the whole batch's time."""


class _NetworkLocks:
    """host-local's lock of every network directory of the batch (sorted, so two nodegc batches never
    deadlock; an ADD takes one directory's lock only), held across the survey, the links and rules steps
    and the release. `holders[dir][ip]` is who holds each address that stays reserved (an unreadable file
    counts as held by someone)."""

    def __init__(self, work: Sequence[_Progress], *, deadline: float) -> None:
        self.deadline = deadline
        self.by_dir: dict[str, list[_Progress]] = {}
        for p in work:
            if p.teardown.ipam_dir is not None:
                self.by_dir.setdefault(p.teardown.ipam_dir, []).append(p)
        # Every other network's directory too: the firewall plugin's rules name only an address, which
        # another network with an overlapping range may have handed to a live pod.
        for parent in {os.path.dirname(d) for d in self.by_dir}:
            try:
                with os.scandir(parent) as it:
                    others = [e.name for e in it if e.is_dir(follow_symlinks=False)]
            except OSError:
                others = []
            for name in others:
                self.by_dir.setdefault(os.path.join(parent, name), [])
        self.fds: dict[str, tuple[int, int]] = {}
        self.holders: dict[str, dict[str, str]] = {}
        self.ours: dict[str, list[tuple[str, _Progress]]] = {}
        self.unsurveyed: list[str] = []
        """Directories whose reservations could not be read: who holds an address there is not known."""

    def holders_of(self, ip: str) -> list[str]:
        """Who else holds `ip` in any network directory after the release."""
        return [held[ip] for held in self.holders.values() if ip in held]

    def reserves(self, p: _Progress, ip: str) -> bool:
        """Whether the attachment's own reservation of `ip` is in its network directory (to be released)."""
        return any(name == ip and owner is p for name, owner in self.ours.get(p.teardown.ipam_dir or "", ()))

    def __enter__(self) -> _NetworkLocks:
        try:
            for net_dir in sorted(self.by_dir):
                self._lock_and_survey(net_dir, self.by_dir[net_dir])
        except BaseException:
            self._unlock()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._unlock()

    def _unlock(self) -> None:
        for fds in self.fds.values():
            for fd in fds[::-1]:  # the lock first, then its directory; one failed close must not keep the rest
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fds.clear()

    def _lock_and_survey(self, net_dir: str, members: Sequence[_Progress]) -> None:
        wanted: dict[str, list[_Progress]] = {}
        for p in members:
            wanted.setdefault(p.teardown.entry.container_id, []).append(p)
        held: dict[str, str] = {}
        self.holders[net_dir] = held
        try:
            locked = lock_network_dir(net_dir, timeout=max(min(self.deadline - time.monotonic(), LOCK_TIMEOUT), 0.1))
        except FileNotFoundError:
            return  # no directory, no reservation
        except OSError as e:
            self.unsurveyed.append(net_dir)
            for p in members:
                p.failures.append(f"cannot lock {net_dir}: {e.strerror or e}")
            return
        if locked is None:
            self.unsurveyed.append(net_dir)
            for p in members:
                p.failures.append(f"host-local lock of {net_dir} busy")
            return
        self.fds[net_dir] = locked
        dir_fd = locked[0]
        ours: list[tuple[str, _Progress]] = []
        self.ours[net_dir] = ours
        try:
            with os.scandir(dir_fd) as it:
                names = sorted(e.name for e in it if e.is_file(follow_symlinks=False))
        except OSError as e:
            self.unsurveyed.append(net_dir)
            for p in members:
                p.failures.append(f"cannot list {net_dir}: {e.strerror or e}")
            return
        for name in names:
            if name == IPAM_LOCK_NAME or name.startswith(LAST_RESERVED_PREFIX):
                continue
            path = os.path.join(net_dir, name)
            try:
                small = read_small_file(path, limit=MAX_RESERVATION_BYTES)
                cid, ifname, legacy = parse_reservation(small.content)
            except (FileReadError, ValueError):
                held[name] = "?"  # unreadable: someone may hold it
                continue
            # Two attachments of one container (one per interface) each own only their interface's files; a
            # legacy file that names no interface is ours only when the container has one attachment here.
            mine = [p for p in wanted.get(cid or "", []) if ifname == p.teardown.entry.ifname]
            if legacy and not mine and len(wanted.get(cid or "", [])) == 1:
                mine = wanted[cid or ""]
            owner = mine[0] if len(mine) == 1 else None
            if owner is None:
                held[name] = cid or "?"
                continue
            ours.append((name, owner))

    def release(self, done: Sequence[_Progress]) -> None:
        """host-local's ReleaseByID for the attachments whose links and rules went, still under the lock."""
        keep = {id(p) for p in done}
        for net_dir, ours in self.ours.items():
            dir_fd = self.fds[net_dir][0]
            for name, owner in ours:
                if id(owner) not in keep:
                    self.holders[net_dir][name] = owner.teardown.entry.container_id
                    continue
                try:
                    os.unlink(name, dir_fd=dir_fd)
                except FileNotFoundError:
                    continue
                except OSError as e:
                    owner.failures.append(f"cannot release {name}: {e.strerror or e}")
                    continue
                owner.done.append(f"released {name}")


def _cached_links(p: _Progress) -> list[tuple[str, str | None, str]]:
    """(name, MAC, kind) of the host devices the attachment's plugins made: the bridge's veth from the cached
    result, and the bandwidth plugin's ifb."""
    out: list[tuple[str, str | None, str]] = []
    td = p.teardown
    if td.bridge is not None and p.result is not None:
        for iface in p.result.get("interfaces") or []:
            if isinstance(iface, dict) and "sandbox" not in iface and iface.get("name") != td.bridge:
                name, mac = iface.get("name"), iface.get("mac")
                if isinstance(name, str) and name:
                    out.append((name, mac.lower() if isinstance(mac, str) else None, "veth"))
                break
    if td.ifb is not None:
        out.append((td.ifb, None, "ifb"))
    return out


def _delete_links(work: Sequence[_Progress], *, roots: Roots, runtime_state_dir: Path | None) -> None:
    wanted = [(p, name, mac, kind) for p in work for name, mac, kind in _cached_links(p)]
    if not wanted:
        return
    try:
        with RtnlSocket.open(roots.net_ns) as rtnl:
            links, _unreadable = rtnl.dump_links()
            by_name: dict[str, RawLink] = {link.name: link for link in links if link.name is not None}
            peer_ids: dict[str, int | str] = {}
            todo: list[tuple[_Progress, str, RawLink]] = []
            for p, name, mac, kind in wanted:
                link = by_name.get(name)
                if link is None:
                    continue  # gone with its namespace, or never made
                if link.kind != kind or (mac is not None and link.mac is not None and link.mac != mac):
                    p.done.append(f"left {name} alone (now a {link.kind or 'link'} {link.mac or ''}, not ours)")
                    continue
                if kind == "veth":
                    why = _peer_elsewhere(rtnl, link, p.teardown.entry, roots=roots,
                                          runtime_state_dir=runtime_state_dir, known=peer_ids)
                    if why is not None:
                        p.done.append(f"left {name} alone ({why})")
                        continue
                todo.append((p, name, link))
            answers = delete_together(rtnl, [link for _, _, link in todo])
    except (NetlinkError, OSError) as e:
        for p in {id(p): p for p, *_ in wanted}.values():
            p.failures.append(f"netlink: {e}")
        return
    for (p, name, _), answer in zip(todo, answers, strict=True):
        if answer is None:
            p.done.append(f"deleted {name}")
        elif answer.code not in (errno.ENODEV, errno.ENOENT):
            p.failures.append(f"cannot delete {name}: {answer}")


_NSID_MAX = 2**31 - 1


def _peer_elsewhere(rtnl: RtnlSocket, link: RawLink, entry: CNICacheEntry, *, roots: Roots,
                    runtime_state_dir: Path | None, known: dict[str, int | str]) -> str | None:
    """Why the host veth `link` is not the one the bridge plugin's DEL would take away, or None.

    That DEL deletes the container's interface inside the namespace the entry names; the host end goes
    with it. A veth whose peer lives anywhere else (a copy of a live pod's entry planted under another
    container id names the live pod's veth by name and MAC) is not the entry's. The namespace is the one
    CNI DEL would be given (`cni_del.netns_for_del`: a file of the netns dir, or of the runtime's state dir
    when one is configured), opened without following a symlink below its directory; a namespace that
    cannot be reached proves nothing, and its veth is left to its own item (judged by its peer's namespace).
    """
    path = netns_for_del(entry, roots, runtime_state_dir)
    if not path:
        return f"its namespace {entry.netns or '(none)'} is not a file nodegc can reach"
    if path not in known:
        # The netns dir is trusted as configured, as is the state dir: what lies below either is not followed.
        depth = 1 if Path(path).parent == roots.netns_dir else len(CRI_NETNS_SUBDIR.split("/")) + 1
        try:
            fd = open_netns(NetnsFile(Path(path), depth=depth))
        except OSError as e:
            known[path] = f"namespace {path} cannot be opened: {e.strerror or e}"
        else:
            try:
                (answer,) = rtnl.netnsids([fd])
            finally:
                os.close(fd)
            known[path] = answer if isinstance(answer, int) else f"no id for namespace {path}: {answer}"
    found = known[path]
    if isinstance(found, str):
        return found
    if not 0 <= found <= _NSID_MAX or link.link_netnsid != found:
        return f"its peer is not in {path}"
    return None


def _remove_rules(work: Sequence[_Progress], locks: _NetworkLocks, *, net_ns: Path | None,
                  deadline: float, backend: str) -> None:
    targets: list[RuleTarget] = []
    owner_of: dict[str, _Progress] = {}
    for p in work:
        entry = p.teardown.entry
        key = entry.path  # one attachment: a container may have several (one per interface)
        owner_of[key] = p
        for name in p.teardown.chains:
            targets.append(RuleTarget(key=key, owner=(entry.network, entry.container_id), chain=name))
        if p.teardown.firewall:
            if locks.unsurveyed:
                p.failures.append(f"reservations of {locks.unsurveyed[0]} unreadable: its firewall rules are kept")
                continue
            for ip in entry.ips:
                others = [h for h in locks.holders_of(ip) if h != entry.container_id]
                if others:
                    p.done.append(f"kept the firewall rules of {ip} (now held by {others[0][:12]})")
                    continue
                if not locks.reserves(p, ip):
                    # The rules name only the address: one this attachment does not reserve may be another
                    # attachment's (a secondary network's, a static address). Left to their own items.
                    p.done.append(f"kept the firewall rules of {ip} (not reserved by this attachment)")
                    continue
                targets += [RuleTarget(key=key, owner=None, rule=r, family=fam) for fam, r in _firewall_rules(ip)]
    if not targets:
        return
    for key, outcome in remove_targets(targets, net_ns=net_ns, deadline=deadline, backend=backend).items():
        p = owner_of[key]
        if outcome.ok:
            if not outcome.already_gone:
                p.done.append(outcome.detail)
        elif outcome.identity_changed:
            p.done.append(f"left a rule alone: {outcome.detail}")
        else:
            p.failures.append(outcome.detail)


def _firewall_rules(ip: str) -> list[tuple[int, str]]:
    """The firewall plugin's two rules per address, as iptables-save prints them."""
    family, plen = (1, 128) if ":" in ip else (0, 32)
    return [
        (family, f"-A {_FORWARD_CHAIN} -d {ip}/{plen} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"),
        (family, f"-A {_FORWARD_CHAIN} -s {ip}/{plen} -j ACCEPT"),
    ]

