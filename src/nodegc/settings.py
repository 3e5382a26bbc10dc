"""Roots and tunables, injected everywhere with production defaults so tests can point them at a sandbox."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nodegc import defaults


@dataclass(frozen=True)
class Roots:
    kubelet_root: Path = Path(defaults.KUBELET_ROOT)
    cni_conf_dir: Path = Path(defaults.CNI_CONF_DIR)
    cni_bin_dirs: tuple[Path, ...] = tuple(Path(d) for d in defaults.CNI_BIN_DIRS)
    cni_data_dir: Path = Path(defaults.CNI_DATA_DIR)
    netns_dir: Path = Path(defaults.NETNS_DIR)
    proc_root: Path = Path(defaults.PROC_ROOT)
    static_pod_dir: Path = Path(defaults.STATIC_POD_DIR)
    """The kubelet's staticPodPath: pods declared there run without (or before) a mirror in the API."""
    pod_log_dir: Path = Path(defaults.POD_LOG_DIR)
    """The kubelet's per-pod log directories (`<namespace>_<name>_<uid>`)."""
    net_ns: Path | None = None
    """Network namespace whose links and iptables are read; None is the one nodegc runs in."""


@dataclass(frozen=True)
class ScanOptions:
    command_timeout: float = defaults.COMMAND_TIMEOUT_SECONDS
    """Upper bound for one external command (iptables-save)."""
    iptables_backend: str = defaults.IPTABLES_BACKEND
    """legacy, nft, default (the image's iptables-save) or auto: detected as kube-proxy does."""
    min_age_seconds: float = defaults.MIN_AGE_SECONDS
    """Resources younger than this are protected: the creation race (reservation before pod status)."""
    runtime_endpoint: str | None = None
    """CRI endpoint (unix:///run/containerd/containerd.sock); None reads no runtime (today's rules)."""
    runtime_timeout: float = 10.0
    """Upper bound for one CRI call."""
    runtime_state_dir: Path | None = None
    """The runtime's state directory (containerd's `state`, /run/containerd), for its leftovers."""
    pod_log_dir: Path | None = None
    """Where the kubelet keeps pod logs (/var/log/pods); None reads none."""
    watch_pod_dirs: bool = False
    """Keep inotify watches on the pod directories so that a later scan takes an unchanged directory's
    walk again (the agent, scan after scan); see nodegc.inventory.pod_dirs.PodDirWatcher."""


def in_net_ns(argv: list[str], net_ns: Path | None) -> list[str]:
    """The command run in `net_ns` (through nsenter), or as it is when None: the namespace nodegc runs in."""
    return argv if net_ns is None else ["nsenter", f"--net={net_ns}", *argv]
