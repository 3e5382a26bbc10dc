"""The one place where flags become settings, and settings become the parts: source, ledger, executor, engine.

The entry points (cli.py dispatches to commands.py, agent.py) never read the argparse namespace: they
take the typed settings built here. Nothing here imports an entry point, so there is no loop.

Where a new flag goes:
1. its default: one constant in nodegc/defaults.py (the settings class field uses the same constant);
2. the flag: nodegc/flags.py, in the group of the commands that take it, `default=defaults.X`;
3. its setting: a field of the settings dataclass below (or of a settings class of the layer that uses it,
   e.g. EngineSettings), filled in the matching `*_from_args`; validate its range there too;
4. its use: the builder below that makes the part that needs it (`make_source`, `make_engine_settings`,
   `make_executor`, ...). Commands call builders; they do not construct parts themselves;
5. an `agent` flag is also a key of the agent's config file (camelCase, nodegc/config.py) with no code:
   add that key to `agent.config` in deploy/chart/nodegc/values.schema.json (tests/deploy checks it), and a
   line to the README's flag tables.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from nodegc import defaults
from nodegc.desired.source import DesiredSource
from nodegc.engine.cycle import EngineSettings
from nodegc.exitcodes import EXIT_USAGE as EXIT_USAGE_CODE
from nodegc.ledger.store import Ledger
from nodegc.model.pods import Pod
from nodegc.model.resources import Kind
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.guards import BlastRadius
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import DryRunExecutor, Executor, HostExecutor
from nodegc.settings import Roots, ScanOptions

if TYPE_CHECKING:
    import lightkube

    from nodegc.desired.reflector import PodReflector
    from nodegc.kube.events import EventRecorder
    from nodegc.kube.nodes import NodeConditionWriter

# -- settings ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceSettings:
    """Where the desired state comes from: a snapshot file, or the API (kubeconfig or in-cluster)."""

    node: str | None = None
    """--node; None: $NODE_NAME, else inferred from the snapshot, else the hostname."""
    pods_from: Path | None = None
    kubeconfig: Path | None = None
    context: str | None = None
    """--context: a kubeconfig context other than the current one."""
    request_timeout: float = defaults.REQUEST_TIMEOUT_SECONDS
    """--request-timeout: one API request at most."""

    def node_name(self) -> str:
        """The node the API is asked about (a snapshot may instead name it itself)."""
        return self.node or os.environ.get("NODE_NAME") or socket.gethostname()


@dataclass(frozen=True)
class SafetySettings:
    """The engine's guards, as `clean` and `agent` take them."""

    state_dir: Path = Path(defaults.STATE_DIR)
    min_age_seconds: float = defaults.MIN_AGE_SECONDS
    max_share: float = defaults.MAX_SHARE
    allow_empty_desired: bool = False
    max_desired_age_seconds: float = defaults.MAX_DESIRED_AGE_SECONDS
    reclaims_per_minute: float = defaults.RECLAIMS_PER_MINUTE
    command_timeout: float = defaults.COMMAND_TIMEOUT_SECONDS
    runtime_endpoint: str | None = None
    """CRI endpoint; None reads no runtime (the flags default to the containerd socket)."""
    runtime_timeout: float = defaults.RUNTIME_TIMEOUT_SECONDS
    iptables_backend: str = defaults.IPTABLES_BACKEND
    running_orphan_grace_seconds: float = defaults.RUNNING_ORPHAN_GRACE_SECONDS
    stop_running_orphans: bool = False
    runtime_state_dir: Path | None = None
    runc_root: Path | None = Path(defaults.RUNC_ROOT)
    """--runc-root: runc's state root, whose state dir of a reclaimed task bundle goes with it; None: kept."""
    cgroup_root: Path | None = Path(defaults.CGROUP_ROOT)
    """--cgroup-root: where the cgroup hierarchies are mounted, whose empty container cgroups of a reclaimed
    task bundle go with it; None: kept."""
    stop_orphan_shims: bool = False
    """--stop-orphan-shims: a shim whose id the runtime no longer lists is stopped, not only reported."""

    @property
    def ledger_path(self) -> Path:
        return self.state_dir / defaults.LEDGER_FILE


@dataclass(frozen=True)
class ScanSettings:
    roots: Roots
    source: SourceSettings
    options: ScanOptions
    output: str = "table"
    show_all: bool = False


@dataclass(frozen=True)
class CleanSettings:
    roots: Roots
    source: SourceSettings
    safety: SafetySettings
    apply: bool = False
    output: str = "table"


@dataclass(frozen=True)
class AgentSettings:
    roots: Roots
    source: SourceSettings
    safety: SafetySettings
    phases: PhasePolicy = field(default_factory=PhasePolicy)
    interval: float = defaults.AGENT_INTERVAL_SECONDS
    dry_run: bool = False
    metrics_address: str = defaults.AGENT_METRICS_ADDRESS
    max_cycles: int = 0
    ledger_retention_seconds: float = defaults.LEDGER_RETENTION_SECONDS
    watch_pod_dirs: bool = defaults.WATCH_POD_DIRS


@dataclass(frozen=True)
class HistorySettings:
    state_dir: Path = Path(defaults.STATE_DIR)
    item: str | None = None
    kind: str | None = None
    owner: str | None = None
    since_seconds: float | None = None
    limit: int = defaults.HISTORY_LIMIT
    output: str = "table"

    @property
    def ledger_path(self) -> Path:
        return self.state_dir / defaults.LEDGER_FILE


@dataclass(frozen=True)
class ExplainSettings:
    item: str
    state_dir: Path = Path(defaults.STATE_DIR)
    output: str = "table"

    @property
    def ledger_path(self) -> Path:
        return self.state_dir / defaults.LEDGER_FILE


# -- flags -> settings ------------------------------------------------------------------------------


def roots_from_args(args: argparse.Namespace) -> Roots:
    return Roots(
        kubelet_root=args.kubelet_root,
        cni_conf_dir=args.cni_conf_dir,
        cni_bin_dirs=tuple(args.cni_bin_dir) if args.cni_bin_dir else Roots().cni_bin_dirs,
        cni_data_dir=args.cni_data_dir,
        netns_dir=args.netns_dir,
        proc_root=args.proc_root,
        static_pod_dir=args.static_pod_dir,
        pod_log_dir=args.pod_log_dir,
        net_ns=args.net_ns,
    )


def source_from_args(args: argparse.Namespace) -> SourceSettings:
    return SourceSettings(node=args.node, pods_from=args.pods_from, kubeconfig=args.kubeconfig,
                          context=args.context, request_timeout=args.request_timeout)


def safety_from_args(args: argparse.Namespace) -> SafetySettings:
    return SafetySettings(
        state_dir=args.state_dir,
        min_age_seconds=args.min_age,
        max_share=args.max_share,
        allow_empty_desired=args.allow_empty_desired,
        max_desired_age_seconds=args.max_desired_age,
        reclaims_per_minute=args.reclaims_per_minute,
        command_timeout=args.command_timeout,
        runtime_endpoint=runtime_endpoint_from_args(args),
        runtime_timeout=args.runtime_timeout,
        iptables_backend=args.iptables_backend,
        running_orphan_grace_seconds=getattr(args, "running_orphan_grace", defaults.RUNNING_ORPHAN_GRACE_SECONDS),
        stop_running_orphans=getattr(args, "stop_running_orphans", False),
        runtime_state_dir=runtime_state_dir_from_args(args),
        runc_root=getattr(args, "runc_root", Path(defaults.RUNC_ROOT)),
        cgroup_root=getattr(args, "cgroup_root", Path(defaults.CGROUP_ROOT)),
        stop_orphan_shims=getattr(args, "stop_orphan_shims", False),
    )


def runtime_state_dir_from_args(args: argparse.Namespace) -> Path | None:
    text = str(getattr(args, "runtime_state_dir", "") or "").strip()
    return None if text.lower() in ("", "none") else Path(text)


def runtime_endpoint_from_args(args: argparse.Namespace) -> str | None:
    """--runtime-endpoint, checked now so a bad one is a usage error; 'none' or empty reads no runtime."""
    endpoint = str(getattr(args, "runtime_endpoint", "") or "").strip()
    if endpoint.lower() in ("", "none"):
        return None
    from nodegc.inventory.cri.client import EndpointError, socket_path

    try:
        socket_path(endpoint)
    except EndpointError as e:
        print(f"nodegc: {e}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE_CODE) from e
    return endpoint


def scan_from_args(args: argparse.Namespace) -> ScanSettings:
    return ScanSettings(
        roots=roots_from_args(args),
        source=source_from_args(args),
        options=ScanOptions(command_timeout=args.command_timeout, min_age_seconds=args.min_age,
                            runtime_endpoint=runtime_endpoint_from_args(args), runtime_timeout=args.runtime_timeout,
                            runtime_state_dir=runtime_state_dir_from_args(args),
                            iptables_backend=args.iptables_backend),
        output=args.output,
        show_all=args.all,
    )


def clean_from_args(args: argparse.Namespace) -> CleanSettings:
    return CleanSettings(roots=roots_from_args(args), source=source_from_args(args),
                         safety=safety_from_args(args), apply=args.apply, output=args.output)


def agent_from_args(args: argparse.Namespace) -> AgentSettings:
    mark_rules: dict[Kind, tuple[int, float]] = dict(args.mark_rule)
    return AgentSettings(
        roots=roots_from_args(args),
        source=source_from_args(args),
        safety=safety_from_args(args),
        phases=PhasePolicy(consecutive_scans=args.consecutive_scans, grace_seconds=args.grace,
                           per_kind=mark_rules),
        interval=args.interval,
        dry_run=args.dry_run,
        metrics_address=args.metrics_address,
        max_cycles=args.max_cycles,
        ledger_retention_seconds=args.ledger_retention,
        watch_pod_dirs=args.watch_pod_dirs,
    )


def history_from_args(args: argparse.Namespace) -> HistorySettings:
    return HistorySettings(state_dir=args.state_dir, item=args.item, kind=args.kind, owner=args.owner,
                           since_seconds=args.since, limit=args.limit, output=args.output)


def explain_from_args(args: argparse.Namespace) -> ExplainSettings:
    return ExplainSettings(item=args.item, state_dir=args.state_dir, output=args.output)


# -- settings -> parts ------------------------------------------------------------------------------


def make_source(source: SourceSettings, *, prove_current: bool = True) -> DesiredSource:
    """One list per fetch (scan, clean); the agent watches instead (make_reflector). `prove_current`: an
    API list must prove it is current (the node Lease) before it may drive destructive steps."""
    node = source.node or os.environ.get("NODE_NAME")
    if source.pods_from is not None and str(source.pods_from) == STDIN:
        return stdin_snapshot(node)
    if source.pods_from is not None:
        from nodegc.desired.snapshot import SnapshotSource

        return SnapshotSource(source.pods_from, node)
    from nodegc.desired.kube import KubeSource

    # The client is built here (with --context and --request-timeout): a SourceError now if it cannot be.
    return KubeSource(source.node_name(), client=make_api_client(source), timeout=source.request_timeout,
                      prove_current=prove_current)


STDIN = "-"


def reads_stdin(source: SourceSettings) -> bool:
    return source.pods_from is not None and str(source.pods_from) == STDIN


def stdin_snapshot(node: str | None) -> DesiredSource:
    """`--pods-from -`: stdin read once, kept in a private file dated when it was read. Nobody knows when a
    piped list was taken, so it never drives a destructive step: a scan reports on it, a dry run plans on
    it (marked stale), and `clean --apply` and the agent refuse it (`reads_stdin`)."""
    import atexit
    import shutil
    import sys
    import tempfile

    from nodegc.desired.snapshot import MAX_SNAPSHOT_BYTES, SnapshotSource

    scratch = Path(tempfile.mkdtemp(prefix="nodegc-stdin-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    path = scratch / "pods"
    # Bounded: an endless stdin stops one byte past the limit, and the snapshot refuses the size.
    path.write_bytes(sys.stdin.buffer.read(MAX_SNAPSHOT_BYTES + 1))
    source = SnapshotSource(path, node)
    source.name = "snapshot:-"
    return source


def make_api_client(source: SourceSettings) -> lightkube.Client:
    """The process's one API client (watch, live GETs, Events); SourceError when it cannot be set up."""
    from nodegc.api.client import make_client
    from nodegc.api.errors import KubeError
    from nodegc.desired.source import SourceError

    try:
        return make_client(source.kubeconfig, context=source.context, timeout=source.request_timeout)
    except KubeError as e:
        raise SourceError(str(e)) from e


def make_reflector(
    source: SourceSettings, *, on_delete: Callable[[Pod], None], client: lightkube.Client | None = None
) -> PodReflector:
    """A started watch on the node's pods; the caller stops it (`.stop()`), and closes `client`."""
    from nodegc.desired.reflector import PodReflector

    return PodReflector(source.node_name(), kubeconfig=source.kubeconfig, client=client,
                        on_delete=on_delete).start()


def make_event_recorder(
    source: SourceSettings, *, node: str, client: lightkube.Client | None = None
) -> EventRecorder:
    """An EventRecorder on the API the source reads (not started); raises KubeError without a client."""
    from nodegc.api.client import make_client
    from nodegc.kube.events import EventRecorder

    if client is None:
        client = make_client(source.kubeconfig, context=source.context, timeout=source.request_timeout)
    return EventRecorder(client, component="nodegc", instance=node, host=node)


def make_node_conditions(*, node: str, client: lightkube.Client) -> NodeConditionWriter:
    """nodegc's NodeConditions on its Node, through the process's API client."""
    from nodegc.kube.nodes import NodeConditionWriter

    return NodeConditionWriter(client, node)


def make_engine_settings(safety: SafetySettings, phases: PhasePolicy) -> EngineSettings:
    return EngineSettings(
        phases=phases,
        correlation=CorrelationPolicy(min_age_seconds=safety.min_age_seconds,
                                      stop_orphan_shims=safety.stop_orphan_shims),
        blast_radius=BlastRadius(max_share=safety.max_share, allow_empty_desired=safety.allow_empty_desired),
        scan=ScanOptions(command_timeout=safety.command_timeout, min_age_seconds=safety.min_age_seconds,
                         runtime_endpoint=safety.runtime_endpoint, runtime_timeout=safety.runtime_timeout,
                         runtime_state_dir=safety.runtime_state_dir, iptables_backend=safety.iptables_backend),
        max_desired_age_seconds=safety.max_desired_age_seconds,
        reclaims_per_minute=safety.reclaims_per_minute,
        running_orphan_grace_seconds=safety.running_orphan_grace_seconds,
        stop_running_orphans=safety.stop_running_orphans,
    )


def agent_engine_settings(safety: SafetySettings, phases: PhasePolicy, *,
                          watch_pod_dirs: bool = defaults.WATCH_POD_DIRS) -> EngineSettings:
    """The agent's: scan after scan of one tree, unchanged pod directories are not walked again (inotify
    proves it) unless `watch_pod_dirs` is off. bench/scan.py measures the scan with these very settings."""
    settings = make_engine_settings(safety, phases)
    return replace(settings, scan=replace(settings.scan, watch_pod_dirs=watch_pod_dirs))


ONE_SHOT_PHASES = PhasePolicy(consecutive_scans=1, grace_seconds=0)
"""`clean` has no earlier scans to count: K=1 and no grace; the minimum age still protects."""


def make_executor(roots: Roots, *, dry_run: bool, timeout: float, runtime_endpoint: str | None = None,
                  runtime_timeout: float = defaults.RUNTIME_TIMEOUT_SECONDS,
                  iptables_backend: str = defaults.IPTABLES_BACKEND,
                  runtime_state_dir: Path | None = None, runc_root: Path | None = Path(defaults.RUNC_ROOT),
                  cgroup_root: Path | None = Path(defaults.CGROUP_ROOT)) -> Executor:
    if dry_run:
        return DryRunExecutor()
    # StopPodSandbox runs the runtime's CNI DEL: it gets the longer of the two bounds.
    return HostExecutor(roots, timeout=timeout, runtime_endpoint=runtime_endpoint,
                        runtime_timeout=max(timeout, runtime_timeout), iptables_backend=iptables_backend,
                        runtime_state_dir=runtime_state_dir, runc_root=runc_root, cgroup_root=cgroup_root)


def iptables_backend(roots: Roots, safety: SafetySettings) -> str:
    """Which backend the node's rules are read from and removed in, and why (for the start-up log)."""
    from nodegc.hostio.iptables_backend import commands

    c = commands(safety.iptables_backend, net_ns=roots.net_ns, timeout=safety.command_timeout)
    return f"{c.backend} ({c.reason})"


@contextmanager
def open_ledger(path: Path | str, *, lock: bool = True, retention_seconds: float | None = None) -> Iterator[Ledger]:
    """`retention_seconds`: the agent's pruning age; None (one-shot runs, readers) never prunes."""
    ledger = Ledger(path, lock=lock, retention_seconds=retention_seconds)
    try:
        yield ledger
    finally:
        ledger.close()
