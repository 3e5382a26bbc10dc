"""Roots and tunables, injected everywhere with production defaults so tests can point them at a sandbox."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Roots:
    kubelet_root: Path = Path("/var/lib/kubelet")
    cni_conf_dir: Path = Path("/etc/cni/net.d")
    cni_bin_dirs: tuple[Path, ...] = (Path("/opt/cni/bin"),)
    cni_data_dir: Path = Path("/var/lib/cni")
    netns_dir: Path = Path("/run/netns")
    proc_root: Path = Path("/proc")
    static_pod_dir: Path = Path("/etc/kubernetes/manifests")
    """The kubelet's staticPodPath: pods declared there run without (or before) a mirror in the API."""
    pod_log_dir: Path = Path("/var/log/pods")
    """The kubelet's per-pod log directories (`<namespace>_<name>_<uid>`)."""
    net_ns: Path | None = None
    """Network namespace whose links and iptables are read; None is the one nodegc runs in."""


@dataclass(frozen=True)
class ScanOptions:
    command_timeout: float = 30.0
    """Upper bound for one external command (iptables-save)."""
    iptables_save: tuple[str, ...] = ("iptables-save", "ip6tables-save")
    min_age_seconds: float = 60.0
    """Resources younger than this are protected: the creation race (reservation before pod status)."""
    extra: dict[str, str] = field(default_factory=dict)


def in_net_ns(argv: list[str], net_ns: Path | None) -> list[str]:
    """The command run in `net_ns` (through nsenter), or as it is when None: the namespace nodegc runs in."""
    return argv if net_ns is None else ["nsenter", f"--net={net_ns}", *argv]
