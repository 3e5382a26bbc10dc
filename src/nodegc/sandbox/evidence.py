"""What a live pod holds on a sandbox node, read with the system's own tools (`ip`, `iptables-save`, the
files) rather than nodegc's readers, so that a test or a soak cannot be fooled by the code it checks."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from nodegc.sandbox.node import SandboxNode, SandboxPod


def _bytes(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def held(node: SandboxNode, pod: SandboxPod, rules: list[str] | None = None) -> dict[str, Any]:
    """Everything of the pod that a false reclaim would take: compare before and after. `rules` is one
    `iptables-save` of the node, read here when not given (pass it in to check many pods at once)."""
    if rules is None:
        rules = node.node_exec("iptables-save").splitlines()
    eth0 = subprocess.run(["nsenter", f"--net={pod.netns_path}", "ip", "-o", "addr", "show", "dev", "eth0"],
                          capture_output=True, text=True, timeout=30, check=False)
    return {
        "pod_dir": pod.pod_dir.is_dir(),
        "mounted_volumes": sorted(str(p) for p in pod.volume_paths if os.path.ismount(p)),
        "cache_entry": _bytes(node.cache_path(pod)),
        "ip_file": _bytes(node.ipam_path(pod)),
        "netns": pod.netns_path.exists(),
        "eth0": " ".join(eth0.stdout.split()[1:4]) if eth0.returncode == 0 else f"missing: {eth0.stderr.strip()}",
        "host_veth": node.link_exists(pod.host_veth) if pod.host_veth else None,
        "rules": sorted(r for r in rules if pod.container_id in r),
    }
