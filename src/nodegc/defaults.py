"""Every default of nodegc, once. The flags, the agent's config file and the settings classes read them here.

Only constants, and no imports at all: every layer (the pure ones included) and the command line's `--help`
can use it without pulling in anything. Paths are strings here; the settings classes make them `Path`s.
"""

from __future__ import annotations

# -- node roots ------------------------------------------------------------------------------------
KUBELET_ROOT = "/var/lib/kubelet"
CNI_CONF_DIR = "/etc/cni/net.d"
CNI_BIN_DIRS: tuple[str, ...] = ("/opt/cni/bin",)
CNI_DATA_DIR = "/var/lib/cni"
NETNS_DIR = "/run/netns"
PROC_ROOT = "/proc"
STATIC_POD_DIR = "/etc/kubernetes/manifests"
"""The kubelet's staticPodPath: pods declared there run without (or before) a mirror in the API."""
POD_LOG_DIR = "/var/log/pods"
"""The kubelet's per-pod log directories (`<namespace>_<name>_<uid>`)."""

# -- state -----------------------------------------------------------------------------------------
STATE_DIR = "/var/lib/nodegc"
LEDGER_FILE = "ledger.db"

LEDGER_RETENTION_SECONDS = 30 * 86400.0
"""The agent prunes closed items and history rows older than this (--ledger-retention)."""

# -- scan ------------------------------------------------------------------------------------------
MIN_AGE_SECONDS = 60.0
"""Resources younger than this are protected: the creation race (reservation before pod status)."""
ADD_SETTLE_SECONDS = 300.0
"""A host-local reservation without a cache entry is kept at least this long: the entry is written when
CNI ADD ends, and an ADD may run until the kubelet's runtime request timeout (2 minutes by default)."""
COMMAND_TIMEOUT_SECONDS = 30.0
"""Upper bound for one external command (iptables-save, a CNI plugin)."""
IPTABLES_BACKEND = "auto"
"""Which iptables holds the node's rules: detected (hint chains, then rule counts), as kube-proxy does."""

# -- container runtime (CRI) -----------------------------------------------------------------------
RUNTIME_ENDPOINT = "unix:///run/containerd/containerd.sock"
"""The kubelet's and crictl's default; CRI-O: unix:///var/run/crio/crio.sock."""
RUNTIME_TIMEOUT_SECONDS = 10.0
"""Upper bound for one CRI call."""
RUNTIME_STATE_DIR = "/run/containerd"
"""containerd's state directory (sandbox dirs, task bundles, shim sockets); its leftovers are reported."""
RUNC_ROOT = "/run/containerd/runc"
"""runc's state root as containerd's runc shim runs it (`<root>/<namespace>/<id>`): a reclaimed task bundle's
state dir goes with it."""
CGROUP_ROOT = "/sys/fs/cgroup"
"""Where the cgroup hierarchies are mounted: a reclaimed task bundle's empty container cgroups go with it."""
RUNNING_ORPHAN_GRACE_SECONDS = 600.0
"""A READY sandbox's pod must be absent from the API this long before it is reported (and, on opt-in, stopped)."""

# -- safety ----------------------------------------------------------------------------------------
MAX_SHARE = 0.5
"""Largest share of the node's owners (pods and sandboxes) one scan may find orphaned."""
MIN_OWNERS = 10
"""Below this many orphaned owners the share rule does not apply (a small node can lose half)."""
MAX_DESIRED_AGE_SECONDS = 120.0
"""A desired state older than this is stale: nothing destructive proceeds on it."""
RECLAIMS_PER_MINUTE = 600.0
RECLAIM_BURST = 200

# -- phases ----------------------------------------------------------------------------------------
CONSECUTIVE_SCANS = 3
"""K: scans in a row that must see a resource orphaned before it is marked."""
GRACE_SECONDS = 120.0
"""And this long since it was first seen orphaned."""

# -- the agent -------------------------------------------------------------------------------------
AGENT_INTERVAL_SECONDS = 30.0
AGENT_METRICS_ADDRESS = "0.0.0.0:9808"
WATCH_POD_DIRS = True
"""The agent watches pod directories with inotify and walks again only those that changed (--watch-pod-dirs)."""
AGENT_CONFIG_FILE: str | None = None
"""No config file unless one is named (--config)."""

# -- the controller --------------------------------------------------------------------------------
CONTROLLER_INTERVAL_SECONDS = 30.0
CONTROLLER_METRICS_ADDRESS = "0.0.0.0:9809"
CONTROLLER_LEASE_NAME = "nodegc-controller"
CONTROLLER_EVENTS_PER_MINUTE = 30
LEASE_DURATION_SECONDS = 15.0
"""client-go's 15 s; the renew deadline and retry period scale with it."""
MAX_PATCHES_PER_PASS = 50
"""EndpointSlices patched per pass at most; the rest wait for the next pass."""

# -- the API ---------------------------------------------------------------------------------------
REQUEST_TIMEOUT_SECONDS = 10.0
"""One request to the API server, at most."""

# -- history ---------------------------------------------------------------------------------------
HISTORY_LIMIT = 1000
