"""A tiny libcni: runs a conflist with the real plugin binaries, the way a container runtime does.

The sandbox needs the residue that real plugins leave (IPAM files, veths, iptables chains, cache
entries) byte for byte, so this mirrors libcni's stdin assembly, environment and result cache format
instead of faking any of them.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nodegc.hostio.cni_files import CACHE_KIND
from nodegc.reclaim.cni_exec import CNIError, exec_plugin, find_plugin, plugin_env, plugin_stdin

__all__ = ["CACHE_KIND", "CNIError", "cache_entry_path", "run_conflist", "write_cache_entry"]


def run_conflist(
    *,
    command: str,
    conflist: Mapping[str, Any],
    container_id: str,
    netns: str,
    ifname: str,
    cni_args: Sequence[tuple[str, str]],
    capability_args: Mapping[str, Any],
    cni_path: Sequence[Path],
    host_netns: Path,
    prev_result: Mapping[str, Any] | None = None,
    timeout: float = 30,
) -> dict[str, Any] | None:
    """ADD returns the last plugin's result (what libcni caches); DEL returns None.

    For DEL, `prev_result` is the cached ADD result, handed to every plugin as libcni does.
    Plugins run in `host_netns` (the node), which is where they create bridges, veths and chains.
    """
    if command not in ("ADD", "DEL"):
        raise CNIError(f"unsupported CNI command {command!r}")
    plugins = conflist.get("plugins")
    if not isinstance(plugins, list) or not plugins:
        raise CNIError("conflist has no plugins")
    name = str(conflist.get("name", ""))
    cni_version = str(conflist.get("cniVersion", "1.0.0"))
    env = plugin_env(
        command=command,
        container_id=container_id,
        netns=netns,
        ifname=ifname,
        cni_args=cni_args,
        cni_path=cni_path,
    )
    if command == "ADD":
        result: Mapping[str, Any] | None = None
        for plugin in plugins:
            stdin = plugin_stdin(
                plugin,
                name=name,
                cni_version=cni_version,
                prev_result=result,
                capability_args=capability_args,
            )
            out = exec_plugin(
                find_plugin(str(plugin.get("type", "")), cni_path),
                stdin=stdin,
                env=env,
                host_netns=host_netns,
                timeout=timeout,
            )
            try:
                parsed = json.loads(out)
            except ValueError as e:
                raise CNIError(f"{plugin.get('type')} ADD returned invalid JSON") from e
            if not isinstance(parsed, dict):
                raise CNIError(f"{plugin.get('type')} ADD returned a non-object result")
            result = parsed
        return dict(result) if result is not None else None
    for plugin in reversed(plugins):
        stdin = plugin_stdin(
            plugin,
            name=name,
            cni_version=cni_version,
            prev_result=prev_result,
            capability_args=capability_args,
        )
        exec_plugin(
            find_plugin(str(plugin.get("type", "")), cni_path),
            stdin=stdin,
            env=env,
            host_netns=host_netns,
            timeout=timeout,
        )
    return None


def cache_entry_path(*, cni_data_dir: Path, network: str, container_id: str, ifname: str) -> Path:
    return cni_data_dir / "results" / f"{network}-{container_id}-{ifname}"


def write_cache_entry(
    *,
    cni_data_dir: Path,
    network: str,
    container_id: str,
    ifname: str,
    netns: str,
    conflist_bytes: bytes,
    cni_args: Sequence[tuple[str, str]],
    capability_args: Mapping[str, Any],
    result: Mapping[str, Any],
) -> Path:
    """Write what libcni writes after a successful ADD; nodegc later reads it to tie an IP to a pod."""
    path = cache_entry_path(
        cni_data_dir=cni_data_dir, network=network, container_id=container_id, ifname=ifname
    )
    doc: dict[str, Any] = {
        "kind": CACHE_KIND,
        "containerId": container_id,
        "config": base64.b64encode(conflist_bytes).decode("ascii"),
        "ifName": ifname,
        "networkName": network,
        "netns": netns,
        "cniArgs": [[k, v] for k, v in cni_args],
        "capabilityArgs": dict(capability_args),
        "result": dict(result),
    }
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(json.dumps(doc).encode())
    os.replace(tmp, path)
    return path
