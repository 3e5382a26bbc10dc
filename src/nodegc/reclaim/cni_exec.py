"""Running one CNI plugin binary the way libcni does: stdin assembly, environment, error decoding.

Shared by the reclaim side (CNI DEL from the cache) and the sandbox (ADD to build a node), so the
residue the tests create and the teardown nodegc performs go through the very same invocation.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nodegc.settings import in_net_ns

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class CNIError(RuntimeError):
    """A plugin failed, timed out or could not be found; the message carries the plugin's own error."""


def find_plugin(plugin_type: str, cni_path: Sequence[Path]) -> Path:
    """A type with a slash could name any binary on the machine; only a bare name is searched."""
    if not plugin_type or "/" in plugin_type or plugin_type in (".", ".."):
        raise CNIError(f"invalid plugin type {plugin_type!r}")
    for directory in cni_path:
        candidate = directory / plugin_type
        try:
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        except OSError as e:  # a name too long for the file system (ENAMETOOLONG), an unreadable directory
            raise CNIError(f"plugin {plugin_type[:64]!r} cannot be looked for in {directory}: {e.strerror}") from e
    raise CNIError(f"plugin {plugin_type!r} not found in {':'.join(map(str, cni_path))}")


def plugin_stdin(
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


def error_message(stdout: bytes, stderr: bytes) -> str:
    """Plugins report errors as JSON on stdout; fall back to raw output when they do not."""
    try:
        doc = json.loads(stdout)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to be a plugin's error
        doc = None
    if isinstance(doc, dict) and "msg" in doc:
        msg = str(doc["msg"])
        if doc.get("details"):
            msg += f" ({doc['details']})"
        return msg[:500]
    text = (stdout or stderr).decode(errors="replace").strip()
    return text[:500] or "no output"


def plugin_env(
    *,
    command: str,
    container_id: str,
    netns: str,
    ifname: str,
    cni_args: Sequence[tuple[str, str]],
    cni_path: Sequence[Path],
) -> dict[str, str]:
    """Only what libcni passes: a plugin must not see nodegc's own environment (tokens, proxies)."""
    return {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container_id,
        "CNI_NETNS": netns,
        "CNI_IFNAME": ifname,
        "CNI_PATH": ":".join(str(p) for p in cni_path),
        "CNI_ARGS": ";".join(f"{k}={v}" for k, v in cni_args),
        "PATH": os.environ.get("PATH", DEFAULT_PATH),
    }


def exec_plugin(
    binary: Path,
    *,
    stdin: bytes,
    env: Mapping[str, str],
    host_netns: Path | None,
    timeout: float,
) -> bytes:
    """Plugins act on the namespace they start in (bridges, veths, chains): the node's, via nsenter."""
    argv = in_net_ns([str(binary)], host_netns)
    command = env.get("CNI_COMMAND", "?")
    if timeout <= 0:
        raise CNIError(f"{binary.name} {command} not started: time budget spent")
    try:
        proc = subprocess.run(
            argv, input=stdin, env=dict(env), capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise CNIError(f"{binary.name} {command} timed out after {timeout:.1f}s") from e
    except OSError as e:
        raise CNIError(f"cannot run {binary.name}: {e}") from e
    except ValueError as e:  # a NUL in the cached arguments or paths: never a crash
        raise CNIError(f"cannot run {binary.name}: {e}") from e
    if proc.returncode != 0:
        raise CNIError(
            f"{binary.name} {command} failed (exit {proc.returncode}): "
            f"{error_message(proc.stdout, proc.stderr)}"
        )
    return proc.stdout
