"""containerd's own things on the host, by the id they name (read only): sandbox state directories under
`<state>/io.containerd.grpc.v1.cri/sandboxes/<id>` (each with its shm mount), task bundles under
`<state>/io.containerd.runtime.v2.task/<namespace>/<id>` (with the rootfs mount), and
`containerd-shim-runc-v2 ... -id <id>` processes. Netns files under `<state>/io.containerd.grpc.v1.cri/netns/`
are network namespaces, read by `inventory.netns.scan_runtime_netns`.

Planning compares the ids with what the runtime lists; symlinks are not followed and nothing is opened
but directories and /proc/<pid>/cmdline.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from nodegc.model.resources import Mount
from nodegc.model.runtime import RuntimeLeftover

_ID = re.compile(r"[0-9a-f]{64}")
_CRI = "io.containerd.grpc.v1.cri"
_TASKS = "io.containerd.runtime.v2.task"
_SHIM = "containerd-shim-runc-v2"
_MAX_CMDLINE = 8192


def _dirs(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return [e for e in it if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def scan_leftovers(state_dir: Path, *, mounts: Iterable[Mount], proc_root: Path = Path("/proc"),
                   socket: str | None = None) -> tuple[RuntimeLeftover, ...]:
    base = os.fsdecode(state_dir)
    points = {m.mount_point for m in mounts}
    out: list[RuntimeLeftover] = []
    sandboxes = os.path.join(base, _CRI, "sandboxes")
    for e in _dirs(sandboxes):
        if _ID.fullmatch(e.name):
            shm = os.path.join(e.path, "shm")
            out.append(RuntimeLeftover("sandbox_dir", e.name, e.path, mounted=shm in points))
    for ns_dir in _dirs(os.path.join(base, _TASKS)):
        for e in _dirs(ns_dir.path):
            if _ID.fullmatch(e.name):
                rootfs = os.path.join(e.path, "rootfs")
                out.append(RuntimeLeftover("task_dir", e.name, e.path, mounted=rootfs in points))
    out += _shims(proc_root, socket)
    return tuple(out)


def _shims(proc_root: Path, socket: str | None) -> list[RuntimeLeftover]:
    found: list[RuntimeLeftover] = []
    try:
        entries = [e for e in os.scandir(proc_root) if e.name.isdigit()]
    except OSError:
        return found
    for e in entries:
        try:
            with open(os.path.join(e.path, "cmdline"), "rb") as f:
                argv = f.read(_MAX_CMDLINE).split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0].endswith(_SHIM.encode()):
            continue
        args = [a.decode("utf-8", "replace") for a in argv]
        sid = args[args.index("-id") + 1] if "-id" in args[:-1] else None
        address = args[args.index("-address") + 1] if "-address" in args[:-1] else None
        if sid and _ID.fullmatch(sid) and (socket is None or address == socket):
            found.append(RuntimeLeftover("shim", sid, f"{proc_root}/{e.name}", pid=int(e.name)))
    return found
