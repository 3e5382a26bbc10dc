"""Every command-line flag of nodegc. Light on purpose: `--help` and `--version` import only this.

A new flag goes here, in the group of the commands that take it, with its default from nodegc/defaults.py;
nodegc/wiring.py turns it into a setting (see the note at the top of that module).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from nodegc import __version__, defaults
from nodegc.model.resources import Kind

DESCRIPTION = "nodegc: find and reclaim what dead pods leave behind on a Kubernetes node."
KINDS = tuple(k.value for k in Kind)
LOG_LEVELS = ["debug", "info", "warning", "error"]
LOG_FORMATS = ["auto", "json", "console"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nodegc", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"nodegc {__version__}")
    parser.add_argument("--log-level", default=None, choices=LOG_LEVELS,
                        help="default: info for agent and controller (their audit trail), warning otherwise")
    parser.add_argument("--log-format", default="auto", choices=LOG_FORMATS)
    # The logging flags are accepted after the subcommand too; there they override the global ones.
    logs = argparse.ArgumentParser(add_help=False)
    logs.add_argument("--log-level", default=argparse.SUPPRESS, choices=LOG_LEVELS)
    logs.add_argument("--log-format", default=argparse.SUPPRESS, choices=LOG_FORMATS)
    sub = parser.add_subparsers(dest="command", required=True)

    scan = sub.add_parser("scan", parents=[logs], help="inventory the node and report residue (read only)")
    add_source_flags(scan)
    add_root_flags(scan)
    scan.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")
    scan.add_argument("--all", action="store_true", help="table: also list resources in use")
    scan.add_argument("--min-age", type=float, default=defaults.MIN_AGE_SECONDS, metavar="SECONDS",
                      help="resources younger than this are protected (default: %(default)s)")
    scan.add_argument("--command-timeout", type=float, default=defaults.COMMAND_TIMEOUT_SECONDS,
                      metavar="SECONDS")
    add_runtime_flags(scan)

    clean = sub.add_parser("clean", parents=[logs], help="one shot: plan the reclaim of residue; --apply does it")
    add_source_flags(clean)
    add_root_flags(clean)
    add_engine_flags(clean)
    add_runtime_flags(clean, engine=True)
    clean.add_argument("--apply", action="store_true", help="reclaim for real (default: print the plan only)")
    clean.add_argument("-o", "--output", choices=["table", "json"], default="table")

    agent = sub.add_parser("agent", parents=[logs],
                           help="the node agent: scan every interval, advance phases, reclaim")
    add_source_flags(agent)
    add_root_flags(agent)
    add_engine_flags(agent)
    add_runtime_flags(agent, engine=True)
    add_agent_flags(agent)

    add_controller_parser(sub, [logs])

    history = sub.add_parser("history", parents=[logs], help="the ledger's audit trail")
    history.add_argument("--state-dir", type=Path, default=Path(defaults.STATE_DIR))
    history.add_argument("--item", help="item key or part of a resource id")
    history.add_argument("--kind", choices=list(KINDS))
    history.add_argument("--owner", help="part of the owner (namespace/name, uid or container id)")
    history.add_argument("--since", type=duration, metavar="DURATION", help="e.g. 30m, 2h, 1d")
    history.add_argument("--limit", type=int, default=defaults.HISTORY_LIMIT)
    history.add_argument("-o", "--output", choices=["table", "json"], default="table")

    explain = sub.add_parser("explain", parents=[logs], help="why an item is, or is not, being reclaimed")
    explain.add_argument("item", help="item key (kind:id) or part of a resource id")
    explain.add_argument("--state-dir", type=Path, default=Path(defaults.STATE_DIR))
    return parser


# -- groups shared by several commands --------------------------------------------------------------


def add_root_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("node roots (defaults are the production paths)")
    g.add_argument("--kubelet-root", type=Path, default=Path(defaults.KUBELET_ROOT), metavar="DIR")
    g.add_argument("--cni-conf-dir", type=Path, default=Path(defaults.CNI_CONF_DIR), metavar="DIR")
    g.add_argument("--cni-bin-dir", type=Path, action="append", metavar="DIR",
                   help=f"repeatable (default: {', '.join(defaults.CNI_BIN_DIRS)})")
    g.add_argument("--cni-data-dir", type=Path, default=Path(defaults.CNI_DATA_DIR), metavar="DIR")
    g.add_argument("--netns-dir", type=Path, default=Path(defaults.NETNS_DIR), metavar="DIR")
    g.add_argument("--proc-root", type=Path, default=Path(defaults.PROC_ROOT), metavar="DIR")
    g.add_argument("--static-pod-dir", type=Path, default=Path(defaults.STATIC_POD_DIR), metavar="DIR",
                   help="the kubelet's staticPodPath: what a manifest there declares is never reclaimed"
                        f" (default: {defaults.STATIC_POD_DIR})")
    g.add_argument("--pod-log-dir", type=Path, default=Path(defaults.POD_LOG_DIR), metavar="DIR",
                   help=f"the kubelet's per-pod log directories (default: {defaults.POD_LOG_DIR})")
    g.add_argument("--net-ns", type=Path, default=None, metavar="FILE",
                   help="read links and iptables in this network namespace (default: the one nodegc runs in)")


def add_runtime_flags(p: argparse.ArgumentParser, *, engine: bool = False) -> None:
    g = p.add_argument_group("container runtime (CRI)")
    g.add_argument("--runtime-endpoint", default=defaults.RUNTIME_ENDPOINT, metavar="ENDPOINT",
                   help="CRI socket, as crictl and the kubelet take it (default: %(default)s; CRI-O: "
                        "unix:///var/run/crio/crio.sock; 'none': read no runtime)")
    g.add_argument("--runtime-timeout", type=float, default=defaults.RUNTIME_TIMEOUT_SECONDS, metavar="SECONDS",
                   help="upper bound for one CRI call (default: %(default)s)")
    if not engine:
        return
    g.add_argument("--running-orphan-grace", type=float, default=defaults.RUNNING_ORPHAN_GRACE_SECONDS,
                   metavar="SECONDS", help="a READY sandbox whose pod is absent from the API this long is reported"
                                           " (Event, metric; counted from when this process first saw it;"
                                           " default: %(default)s)")
    g.add_argument("--stop-running-orphans", action="store_true",
                   help="also stop such sandboxes through CRI (their workload is still running; default: report)")


def add_source_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("desired state")
    g.add_argument("--node", default=None,
                   help="node name (default: $NODE_NAME, else inferred from --pods-from, else the hostname)")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--pods-from", type=Path, metavar="FILE",
                     help="pods snapshot as printed by `kubectl get pods -o json` (or -o yaml)")
    src.add_argument("--kubeconfig", type=Path, metavar="FILE",
                     help="kubeconfig (default: in-cluster config, then $KUBECONFIG or ~/.kube/config)")


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("safety")
    g.add_argument("--state-dir", type=Path, default=Path(defaults.STATE_DIR),
                   help="holds the ledger (ledger.db) and its lock (default: %(default)s)")
    g.add_argument("--min-age", type=float, default=defaults.MIN_AGE_SECONDS, metavar="SECONDS",
                   help="resources younger than this are protected (default: %(default)s)")
    g.add_argument("--max-share", type=float, default=defaults.MAX_SHARE, metavar="FRACTION",
                   help="refuse to act when more than this share of the node's owners look orphaned")
    g.add_argument("--allow-empty-desired", action="store_true",
                   help="act even when the desired state lists no pods for a node with pod directories")
    g.add_argument("--max-desired-age", type=float, default=defaults.MAX_DESIRED_AGE_SECONDS, metavar="SECONDS",
                   help="a desired state older than this is stale: nothing destructive happens")
    g.add_argument("--reclaims-per-minute", type=float, default=defaults.RECLAIMS_PER_MINUTE)
    g.add_argument("--command-timeout", type=float, default=defaults.COMMAND_TIMEOUT_SECONDS, metavar="SECONDS")


def add_agent_flags(agent: argparse.ArgumentParser) -> None:
    agent.add_argument("--interval", type=float, default=defaults.AGENT_INTERVAL_SECONDS, metavar="SECONDS")
    agent.add_argument("--consecutive-scans", type=int, default=defaults.CONSECUTIVE_SCANS, metavar="K",
                       help="scans in a row a resource must be orphaned before it is marked (default: %(default)s)")
    agent.add_argument("--grace", type=float, default=defaults.GRACE_SECONDS, metavar="SECONDS",
                       help="and this long since first seen orphaned (default: %(default)s)")
    agent.add_argument("--mark-rule", action="append", type=mark_rule, default=[], metavar="KIND=K,SECONDS",
                       help="per-kind K and grace, repeatable, e.g. volume_mount=5,600")
    agent.add_argument("--dry-run", action="store_true", help="run every phase but reclaim nothing")
    agent.add_argument("--metrics-address", default=defaults.AGENT_METRICS_ADDRESS, metavar="HOST:PORT",
                       help="Prometheus metrics endpoint; empty to disable (default: %(default)s)")
    agent.add_argument("--ledger-retention", type=retention, default=defaults.LEDGER_RETENTION_SECONDS,
                       metavar="DURATION",
                       help="prune closed items and history older than this, e.g. 30d, 12h (default: 30d)")
    agent.add_argument("--max-cycles", type=int, default=0, help=argparse.SUPPRESS)


def add_controller_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                          parents: list[argparse.ArgumentParser]) -> None:
    import os

    p = sub.add_parser("controller", parents=parents,
                       help="the cluster controller: remove stale EndpointSlice endpoints (leader elected)")
    p.add_argument("--kubeconfig", type=Path, metavar="FILE",
                   help="kubeconfig (default: in-cluster config, then $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE") or "default",
                   help="namespace of the leader election Lease (default: $POD_NAMESPACE, else default)")
    p.add_argument("--lease-name", default=defaults.CONTROLLER_LEASE_NAME, help="default: %(default)s")
    p.add_argument("--identity", default=None,
                   help="leader election identity (default: $POD_NAME, else the hostname)")
    p.add_argument("--interval", type=float, default=defaults.CONTROLLER_INTERVAL_SECONDS, metavar="SECONDS",
                   help="seconds between passes while leader (default: %(default)s)")
    p.add_argument("--lease-duration", type=float, default=defaults.LEASE_DURATION_SECONDS, metavar="SECONDS",
                   help="a follower takes over after the Lease went unrenewed this long "
                        "(default: %(default)s); the leader stops acting after 2/3 of it without a renew")
    p.add_argument("--dry-run", action="store_true",
                   help="find and log stale endpoints, write nothing (no patches, no Events)")
    p.add_argument("--max-patches-per-pass", type=int, default=defaults.MAX_PATCHES_PER_PASS, metavar="N",
                   help="slices patched per pass at most; the rest wait for the next pass "
                        "(default: %(default)s)")
    p.add_argument("--events-per-minute", type=int, default=defaults.CONTROLLER_EVENTS_PER_MINUTE, metavar="N",
                   help="Event writes per minute at most (default: %(default)s)")
    p.add_argument("--metrics-address", default=defaults.CONTROLLER_METRICS_ADDRESS, metavar="HOST:PORT",
                   help="Prometheus metrics endpoint; empty to disable (default: %(default)s)")
    p.add_argument("--max-passes", type=int, default=0, help=argparse.SUPPRESS)


# -- value types ------------------------------------------------------------------------------------


def mark_rule(text: str) -> tuple[Kind, tuple[int, float]]:
    try:
        kind, _, rule = text.partition("=")
        k, _, grace = rule.partition(",")
        return Kind(kind), (int(k), float(grace))
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"expected KIND=K,SECONDS with KIND one of {', '.join(KINDS)}: {text!r}") from e


def duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text[-1:] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 30m, 2h)") from e



def retention(text: str) -> float:
    seconds = duration(text)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"a retention must be a positive duration: {text!r}")
    return seconds
