"""Helpers for the adversarial host tests: nodegc as a user runs it, and what a live pod holds
(`nodegc.sandbox.evidence.held`, read with the system's own tools)."""

from __future__ import annotations

import subprocess
import sys

from nodegc.sandbox.evidence import held
from nodegc.sandbox.node import SandboxNode

__all__ = ["held", "nodegc", "root_flags"]


def nodegc(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nodegc", *argv], capture_output=True, text=True, timeout=300,
                          check=False, input=stdin)


def root_flags(node: SandboxNode) -> list[str]:
    r = node.roots
    return ["--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir), "--netns-dir",
            str(r.netns_dir), "--net-ns", str(r.net_ns), "--cni-bin-dir", "/usr/lib/cni"]

