"""A tiny libcni: runs a conflist with the real plugin binaries, the way a container runtime does.

The sandbox needs the residue that real plugins leave (IPAM files, veths, iptables chains, cache
entries) byte for byte, so this mirrors libcni's stdin assembly, environment and result cache format
instead of faking any of them.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CACHE_KIND = "cniCacheV1"
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class CNIError(RuntimeError):
    """A plugin failed, timed out or could not be found; the message carries the plugin's own error."""


def _find_plugin(plugin_type: str, cni_path: Sequence[Path]) -> Path:
    if not plugin_type or "/" in plugin_type:
        raise CNIError(f"invalid plugin type {plugin_type!r}")
    for directory in cni_path:
        candidate = directory / plugin_type
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise CNIError(f"plugin {plugin_type!r} not found in {':'.join(map(str, cni_path))}")


def _plugin_stdin(
    plugin: Mapping[str, Any],
    *,
    name: str,
    cni_version: str,
    prev_result: Mapping[str, Any] | None,
    capability_args: Mapping[str, Any],
) -> bytes:
    """libcni injects only the runtime config a plugin asked for through its `capabilities`."""
    conf: dict[str, Any] = dict(plugin)
    conf["name"] = name
    conf["cniVersion"] = cni_version
    if prev_result is not None:
        conf["prevResult"] = prev_result
    declared = plugin.get("capabilities") or {}
    runtime = {k: v for k, v in capability_args.items() if isinstance(declared, dict) and declared.get(k)}
    if runtime:
        conf["runtimeConfig"] = runtime
    return json.dumps(conf).encode()


def _error_message(stdout: bytes, stderr: bytes) -> str:
    """Plugins report errors as JSON on stdout; fall back to raw output when they do not."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "msg" in doc:
        msg = str(doc["msg"])
        if doc.get("details"):
            msg += f" ({doc['details']})"
        return msg
    text = (stdout or stderr).decode(errors="replace").strip()
    return text[:500] or "no output"


def _exec_plugin(
    binary: Path,
    *,
    stdin: bytes,
    env: Mapping[str, str],
    host_netns: Path,
    timeout: float,
) -> bytes:
    argv = ["nsenter", f"--net={host_netns}", str(binary)]
    try:
        proc = subprocess.run(
            argv, input=stdin, env=dict(env), capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise CNIError(f"{binary.name} {env['CNI_COMMAND']} timed out after {timeout}s") from e
    except OSError as e:
        raise CNIError(f"cannot run {binary.name}: {e}") from e
    if proc.returncode != 0:
        raise CNIError(
            f"{binary.name} {env['CNI_COMMAND']} failed (exit {proc.returncode}): "
            f"{_error_message(proc.stdout, proc.stderr)}"
        )
    return proc.stdout


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
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": netns,
        "CNI_IFNAME": ifname,
        "CNI_PATH": ":".join(str(p) for p in cni_path),
        "CNI_ARGS": ";".join(f"{k}={v}" for k, v in cni_args),
        "PATH": os.environ.get("PATH", _DEFAULT_PATH),
    }
    if command == "ADD":
        result: Mapping[str, Any] | None = None
        for plugin in plugins:
            stdin = _plugin_stdin(
                plugin,
                name=name,
                cni_version=cni_version,
                prev_result=result,
                capability_args=capability_args,
            )
            out = _exec_plugin(
                _find_plugin(str(plugin.get("type", "")), cni_path),
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
        stdin = _plugin_stdin(
            plugin,
            name=name,
            cni_version=cni_version,
            prev_result=prev_result,
            capability_args=capability_args,
        )
        _exec_plugin(
            _find_plugin(str(plugin.get("type", "")), cni_path),
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
