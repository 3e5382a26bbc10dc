"""What a live pod holds on a sandbox node, read with the system's own tools rather than nodegc's readers,
so an adversarial test cannot be fooled by the code it attacks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from nodegc.sandbox.node import SandboxNode, SandboxPod


def nodegc(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nodegc", *argv], capture_output=True, text=True, timeout=300,
                          check=False, input=stdin)


def root_flags(node: SandboxNode) -> list[str]:
    r = node.roots
    return ["--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir), "--netns-dir",
            str(r.netns_dir), "--net-ns", str(r.net_ns), "--cni-bin-dir", "/usr/lib/cni"]


def _bytes(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def held(node: SandboxNode, pod: SandboxPod) -> dict[str, Any]:
    """Everything of the pod that a false reclaim would take: compare before and after."""
    eth0 = subprocess.run(["nsenter", f"--net={pod.netns_path}", "ip", "-o", "addr", "show", "dev", "eth0"],
                          capture_output=True, text=True, timeout=30, check=False)
    rules = [line for line in node.node_exec("iptables-save").splitlines() if pod.container_id in line]
    return {
        "pod_dir": pod.pod_dir.is_dir(),
        "mounted_volumes": sorted(str(p) for p in pod.volume_paths if os.path.ismount(p)),
        "cache_entry": _bytes(node.cache_path(pod)),
        "ip_file": _bytes(node.ipam_path(pod)),
        "netns": pod.netns_path.exists(),
        "eth0": " ".join(eth0.stdout.split()[1:4]) if eth0.returncode == 0 else f"missing: {eth0.stderr.strip()}",
        "host_veth": node.link_exists(pod.host_veth) if pod.host_veth else None,
        "rules": sorted(rules),
    }
