"""CNI DEL from the libcni result cache: the teardown the runtime should have run for a dead sandbox.

Going through the real plugins (rather than deleting their state by hand) lets each plugin undo exactly
what it did: IPAM release, the veth, masquerade and hostport chains, whatever a third-party plugin keeps.
"""

from __future__ import annotations

import base64
import binascii
import errno
import json
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodegc.hostio.cni_files import CACHE_KIND, MAX_CACHE_BYTES, MAX_RESERVATION_BYTES, parse_reservation
from nodegc.hostio.files import FileReadError, read_small_file
from nodegc.inventory.netns import not_followed, runtime_netns_dir
from nodegc.model.resources import CNICacheEntry
from nodegc.planning.owners import CRI_NETNS_SUBDIR
from nodegc.reclaim.cni_exec import CNIError, exec_plugin, find_plugin, plugin_env, plugin_stdin
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import Roots

_PREV_RESULT_SINCE = (0, 4, 0)
"""libcni hands the cached result to DEL only from CNI 0.4.0 on; older plugins do not expect it."""


@dataclass
class DelProgress:
    """How far DELs of one cache entry got: the number of plugins, in DEL order, whose DEL succeeded. A DEL
    handed the same progress again resumes at the plugin that failed."""

    plugins_done: int = 0
    failed_plugin: str | None = None


def cni_del(entry: CNICacheEntry, *, roots: Roots, timeout: float = 30.0, keep_cache: bool = False,
            runtime_state_dir: Path | None = None, progress: DelProgress | None = None) -> Outcome:
    """Run DEL through every plugin of the cached configuration (in reverse), then drop the cache file
    (unless `keep_cache`: the engine removes it last, since it is the evidence that ties the sandbox's
    netns and chains to the pod if a crash interrupts the rest; see `remove_cache_entry`).

    The cache file is re-read first and must still be the same file (inode) for the same container:
    a runtime that recreated the sandbox under the same id would have rewritten it.

    host-local releases by container id (and ifname), never by address: if the address was handed to
    a new sandbox meanwhile, the new reservation names another container id and survives this DEL.

    With `progress`, the plugins whose DEL already succeeded for this entry are not run again (their
    state is gone; a firewall DEL repeated after host-local released the addresses could cut the rules
    of a pod handed one of them since), and the count moves on with each plugin that succeeds.
    """
    progress = progress if progress is not None else DelProgress()
    deadline = time.monotonic() + timeout
    try:
        cached = reread(entry)
    except Gone:
        return Outcome.gone("cache entry already removed")
    except Changed as e:
        return Outcome.changed(str(e))
    except ValueError as e:
        return Outcome.failed(f"cache entry unreadable: {e}")
    if entry.config_json is None:
        return Outcome.failed("cache entry has no network configuration; cannot run CNI DEL")
    try:
        name, version, plugins = plugins_of(entry.config_json)
        capability_args = _capability_args(entry.capability_args_json)
    except ValueError as e:
        return Outcome.failed(f"cached configuration unusable: {e}")
    pending = list(reversed(plugins))[progress.plugins_done:]
    unsafe = _files_not_ours(name, pending, entry, roots) or _addresses_not_ours(entry, pending, roots)
    if unsafe:
        return Outcome.failed(f"CNI DEL not run, cache entry kept: {unsafe}")
    prev_result = cached.get("result") if _version(version) >= _PREV_RESULT_SINCE else None
    env = plugin_env(
        command="DEL",
        container_id=entry.container_id,
        netns=netns_for_del(entry, roots, runtime_state_dir),
        ifname=entry.ifname,
        cni_args=entry.cni_args,
        cni_path=roots.cni_bin_dirs,
    )
    try:
        for plugin in pending:
            progress.failed_plugin = str(plugin.get("type", ""))
            stdin = plugin_stdin(
                plugin,
                name=name,
                cni_version=version,
                prev_result=prev_result if isinstance(prev_result, dict) else None,
                capability_args=capability_args,
            )
            exec_plugin(
                find_plugin(str(plugin.get("type", "")), roots.cni_bin_dirs),
                stdin=stdin,
                env=env,
                host_netns=roots.net_ns,
                timeout=deadline - time.monotonic(),
            )
            progress.plugins_done += 1
        progress.failed_plugin = None
    except CNIError as e:
        return Outcome.failed(f"CNI DEL failed, cache entry kept: {e}")
    if keep_cache:
        return Outcome.done("CNI DEL done; cache entry kept until the sandbox's other leftovers are gone")
    return remove_cache_entry(entry)


HOST_LOCAL_DEFAULT_DIR = "/var/lib/cni/networks"


def _files_not_ours(name: str, plugins: list[Mapping[str, Any]], entry: CNICacheEntry, roots: Roots) -> str | None:
    """host-local's DEL makes `<dataDir>/<network name>`, then walks that whole tree and removes every file
    whose content names the container (the id alone, when no file names it with the interface). The cached
    configuration is the cache file's (anyone who can write the data dir can plant one): the plugins run
    only when every host-local of it keeps its files in nodegc's `<cni data dir>/networks/<network>`, the
    network the entry names, which is where the scan read its reservations."""
    ours = os.path.join(os.fsdecode(roots.cni_data_dir), "networks")
    for plugin in plugins:
        ipam = plugin.get("ipam")
        if not isinstance(ipam, dict) or ipam.get("type") != "host-local":
            continue
        if name != entry.network or "/" in name or "\0" in name or name in ("", ".", ".."):
            return f"host-local's network {name!r} is not the cache entry's directory {entry.network!r}"
        data_dir = ipam.get("dataDir") or HOST_LOCAL_DEFAULT_DIR
        if not isinstance(data_dir, str) or not is_data_dir(data_dir, ours):
            return f"host-local keeps its files in {data_dir!r}, not in {ours}"
    return None


def is_data_dir(spelt: str, ours: str) -> bool:
    """Whether a cached configuration's host-local `dataDir` is nodegc's networks dir `ours`, as configured or
    resolved. Compared as spelt: the cached path is never looked up (its file system may never answer)."""
    path = os.path.normpath(spelt)
    return path == os.path.normpath(ours) or path == os.path.realpath(ours)


def _addresses_not_ours(entry: CNICacheEntry, plugins: list[Mapping[str, Any]], roots: Roots) -> str | None:
    """The firewall plugin's DEL removes the rules of the cached addresses, which name only the address. It
    runs before host-local's release, so while every cached address is still reserved by this container
    no ADD can be handed one of them first. An address already released (an earlier DEL got that far) or
    reserved by another container may now be a live pod's: then the plugins' DEL must not run (the engine
    falls back to reclaiming the parts one by one, which checks each rule's address under the lock)."""
    if not any(p.get("type") == "firewall" for p in plugins) or not entry.ips:
        return None
    networks = roots.cni_data_dir / "networks" / entry.network
    for ip in entry.ips:
        path = networks / ip.split("/", 1)[0]
        try:
            holder = parse_reservation(read_small_file(str(path), limit=MAX_RESERVATION_BYTES).content)[0]
        except (FileReadError, OSError, ValueError):
            return f"{ip} is no longer reserved by this container (a firewall DEL could cut a live pod's rules)"
        if holder != entry.container_id:
            return f"{ip} is now reserved by container {(holder or '?')[:12]}"
        # Another network with an overlapping range may have handed the same address to a live pod.
        for other in _other_networks(networks):
            if os.path.lexists(other / ip.split("/", 1)[0]):
                return f"{ip} is also reserved in network {other.name}"
    return None


def _other_networks(own: Path) -> list[Path]:
    try:
        with os.scandir(own.parent) as it:
            return [Path(e.path) for e in it if e.is_dir(follow_symlinks=False) and e.name != own.name]
    except OSError:
        return []


def netns_for_del(entry: CNICacheEntry, roots: Roots, runtime_state_dir: Path | None = None) -> str:
    """The plugins enter CNI_NETNS and delete the interface there, so only a namespace file of this
    node's netns directory (as nodegc sees it) is passed on. Anything else, a /proc/<pid>/ns/net path
    whose pid may be reused by now above all, becomes "": DEL then skips the interface, and the netns
    executor deals with the namespace. A file of the runtime's state dir (`.../io.containerd.grpc.v1.cri/
    netns/<name>`) is never the netns directory's file of that name: it is passed on as the same name in
    the configured state dir's netns directory (reached without a symlink), or not at all."""
    if not entry.netns:
        return ""
    head, _, name = entry.netns.rstrip("/").rpartition("/")
    if not name or not head.endswith("/netns") or name in (".", ".."):
        return ""
    candidate = roots.netns_dir / name
    in_state_dir = head.endswith("/" + CRI_NETNS_SUBDIR)
    if in_state_dir != os.fsdecode(roots.netns_dir).rstrip("/").endswith("/" + CRI_NETNS_SUBDIR):
        if not in_state_dir or runtime_state_dir is None or not_followed(runtime_state_dir) is not None:
            return ""
        candidate = runtime_netns_dir(runtime_state_dir) / name
    try:
        st = os.lstat(candidate)
    except (OSError, ValueError):  # ValueError: a NUL in the cached path
        return ""
    return str(candidate) if stat.S_ISREG(st.st_mode) else ""


class Gone(Exception):
    pass


class Changed(Exception):
    pass


def reread(entry: CNICacheEntry) -> dict[str, Any]:
    try:
        small = read_small_file(entry.path, limit=MAX_CACHE_BYTES)
    except FileReadError as e:
        cause = e.__cause__
        if isinstance(cause, OSError) and cause.errno == errno.ENOENT:
            raise Gone from e
        raise ValueError(str(e)) from e
    if small.inode != entry.inode:
        raise Changed(f"cache file replaced (inode {small.inode}, expected {entry.inode})")
    try:
        doc = json.loads(small.content.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"not JSON: {e}") from e
    except RecursionError as e:  # rewritten since the scan into brackets nested too deep to decode
        raise ValueError("not JSON: nested too deeply") from e
    if not isinstance(doc, dict) or doc.get("kind") != CACHE_KIND:
        raise ValueError(f"not a {CACHE_KIND} document")
    found = (doc.get("containerId"), doc.get("networkName"), doc.get("ifName"))
    wanted = (entry.container_id, entry.network, entry.ifname)
    if found != wanted:
        raise Changed(f"cache file now names container {found[0]!r} (expected {entry.container_id!r})")
    raw_config = doc.get("config")
    if entry.config_json is not None and isinstance(raw_config, str):
        try:
            same = base64.b64decode(raw_config, validate=True).decode("utf-8") == entry.config_json
        except (binascii.Error, UnicodeDecodeError):
            same = False
        if not same:
            raise Changed("cached network configuration changed since the scan")
    # libcni rewrites the file in place: the capability args (port mappings...) are part of what DEL uses.
    scanned = json.loads(entry.capability_args_json) if entry.capability_args_json else None
    if (doc.get("capabilityArgs") or None) != (scanned or None):
        raise Changed("cached capability args changed since the scan")
    return doc


def plugins_of(config_json: str) -> tuple[str, str, list[Mapping[str, Any]]]:
    """A conflist runs all its plugins; a single network config (a .conf) is a list of one."""
    try:
        conf = json.loads(config_json)
    except ValueError as e:
        raise ValueError(f"not JSON: {e}") from e
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(conf, dict):
        raise ValueError("not an object")
    name = conf.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("no network name")
    version = str(conf.get("cniVersion") or "0.1.0")
    if "plugins" in conf:
        plugins = conf["plugins"]
        if not isinstance(plugins, list) or not plugins or not all(isinstance(p, dict) for p in plugins):
            raise ValueError("plugins is not a non-empty list of objects")
        return name, version, plugins
    if not isinstance(conf.get("type"), str):
        raise ValueError("neither a plugin list nor a plugin type")
    return name, version, [conf]


def _capability_args(raw: str | None) -> Mapping[str, Any]:
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as e:
        raise ValueError(f"capabilityArgs not JSON: {e}") from e
    except RecursionError:
        raise ValueError("capabilityArgs nested too deeply") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("capabilityArgs is not an object")
    return value


def _version(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def remove_cache_entry(entry: CNICacheEntry) -> Outcome:
    """What libcni does after a successful DEL; the file is still checked to be the one we verified."""
    path = Path(entry.path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Outcome.gone("cache entry already removed")
    except OSError as e:
        return Outcome.failed(f"CNI DEL done, cannot stat cache entry: {e.strerror or e}")
    if not stat.S_ISREG(st.st_mode) or st.st_ino != entry.inode:
        return Outcome.changed("CNI DEL done, but the cache file was replaced meanwhile; kept")
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        return Outcome.failed(f"CNI DEL done, cannot remove cache entry: {e.strerror or e}")
    return Outcome.done("CNI DEL done, cache entry removed")
