"""`nodegc` command line: flags become settings, settings drive one scan, the report goes to stdout."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from nodegc import __version__
from nodegc.desired.source import DesiredSource, SourceError
from nodegc.model.resources import Kind
from nodegc.observe.logs import configure_logging, get_logger
from nodegc.planning.guards import BlastRadius
from nodegc.settings import Roots, ScanOptions

DEFAULT_STATE_DIR = Path("/var/lib/nodegc")

EXIT_CLEAN = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_RESIDUE = 3
EXIT_SOURCE = 4
EXIT_BLOCKED = 5

log = get_logger("nodegc.cli")


def _add_root_flags(p: argparse.ArgumentParser) -> None:
    d = Roots()
    g = p.add_argument_group("node roots (defaults are the production paths)")
    g.add_argument("--kubelet-root", type=Path, default=d.kubelet_root, metavar="DIR")
    g.add_argument("--cni-conf-dir", type=Path, default=d.cni_conf_dir, metavar="DIR")
    g.add_argument("--cni-bin-dir", type=Path, action="append", metavar="DIR",
                   help=f"repeatable (default: {', '.join(map(str, d.cni_bin_dirs))})")
    g.add_argument("--cni-data-dir", type=Path, default=d.cni_data_dir, metavar="DIR")
    g.add_argument("--netns-dir", type=Path, default=d.netns_dir, metavar="DIR")
    g.add_argument("--proc-root", type=Path, default=d.proc_root, metavar="DIR")
    g.add_argument("--static-pod-dir", type=Path, default=d.static_pod_dir, metavar="DIR",
                   help="the kubelet's staticPodPath: what a manifest there declares is never reclaimed"
                        f" (default: {d.static_pod_dir})")
    g.add_argument("--pod-log-dir", type=Path, default=d.pod_log_dir, metavar="DIR",
                   help=f"the kubelet's per-pod log directories (default: {d.pod_log_dir})")
    g.add_argument("--net-ns", type=Path, default=None, metavar="FILE",
                   help="read links and iptables in this network namespace (default: the one nodegc runs in)")


def _add_source_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("desired state")
    g.add_argument("--node", default=None,
                   help="node name (default: $NODE_NAME, else inferred from --pods-from, else the hostname)")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--pods-from", type=Path, metavar="FILE",
                     help="pods snapshot as printed by `kubectl get pods -o json` (or -o yaml)")
    src.add_argument("--kubeconfig", type=Path, metavar="FILE",
                     help="kubeconfig (default: in-cluster config, then $KUBECONFIG or ~/.kube/config)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nodegc", description=__doc__)
    parser.add_argument("--version", action="version", version=f"nodegc {__version__}")
    parser.add_argument("--log-level", default=None, choices=["debug", "info", "warning", "error"],
                        help="default: info for agent and controller (their audit trail), warning otherwise")
    parser.add_argument("--log-format", default="auto", choices=["auto", "json", "console"])
    # The logging flags are accepted after the subcommand too; there they override the global ones.
    logs = argparse.ArgumentParser(add_help=False)
    logs.add_argument("--log-level", default=argparse.SUPPRESS, choices=["debug", "info", "warning", "error"])
    logs.add_argument("--log-format", default=argparse.SUPPRESS, choices=["auto", "json", "console"])
    sub = parser.add_subparsers(dest="command", required=True)
    scan = sub.add_parser("scan", parents=[logs], help="inventory the node and report residue (read only)")
    _add_source_flags(scan)
    _add_root_flags(scan)
    scan.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")
    scan.add_argument("--all", action="store_true", help="table: also list resources in use")
    scan.add_argument("--min-age", type=float, default=ScanOptions().min_age_seconds, metavar="SECONDS",
                      help="resources younger than this are protected (default: %(default)s)")
    scan.add_argument("--command-timeout", type=float, default=ScanOptions().command_timeout, metavar="SECONDS")

    clean = sub.add_parser("clean", parents=[logs], help="one shot: plan the reclaim of residue; --apply does it")
    _add_source_flags(clean)
    _add_root_flags(clean)
    _add_engine_flags(clean)
    clean.add_argument("--apply", action="store_true", help="reclaim for real (default: print the plan only)")
    clean.add_argument("-o", "--output", choices=["table", "json"], default="table")

    agent = sub.add_parser("agent", parents=[logs], help="the node agent: scan every interval, advance phases, reclaim")
    _add_source_flags(agent)
    _add_root_flags(agent)
    _add_engine_flags(agent)
    agent.add_argument("--interval", type=float, default=30.0, metavar="SECONDS")
    agent.add_argument("--consecutive-scans", type=int, default=3, metavar="K",
                       help="scans in a row a resource must be orphaned before it is marked (default: 3)")
    agent.add_argument("--grace", type=float, default=120.0, metavar="SECONDS",
                       help="and this long since first seen orphaned (default: 120)")
    agent.add_argument("--mark-rule", action="append", type=_mark_rule, default=[], metavar="KIND=K,SECONDS",
                       help="per-kind K and grace, repeatable, e.g. volume_mount=5,600")
    agent.add_argument("--dry-run", action="store_true", help="run every phase but reclaim nothing")
    agent.add_argument("--metrics-address", default="0.0.0.0:9808", metavar="HOST:PORT",
                       help="Prometheus metrics endpoint; empty to disable (default: %(default)s)")
    agent.add_argument("--max-cycles", type=int, default=0, help=argparse.SUPPRESS)

    from nodegc.controller import add_controller_parser

    add_controller_parser(sub, [logs])

    history = sub.add_parser("history", parents=[logs], help="the ledger's audit trail")
    history.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    history.add_argument("--item", help="item key or part of a resource id")
    history.add_argument("--kind", choices=[k.value for k in Kind])
    history.add_argument("--owner", help="part of the owner (namespace/name, uid or container id)")
    history.add_argument("--since", type=_duration, metavar="DURATION", help="e.g. 30m, 2h, 1d")
    history.add_argument("--limit", type=int, default=1000)
    history.add_argument("-o", "--output", choices=["table", "json"], default="table")

    explain = sub.add_parser("explain", parents=[logs], help="why an item is, or is not, being reclaimed")
    explain.add_argument("item", help="item key (kind:id) or part of a resource id")
    explain.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    return parser


def _add_engine_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("safety")
    g.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                   help="holds the ledger (ledger.db) and its lock (default: %(default)s)")
    g.add_argument("--min-age", type=float, default=ScanOptions().min_age_seconds, metavar="SECONDS",
                   help="resources younger than this are protected (default: %(default)s)")
    g.add_argument("--max-share", type=float, default=BlastRadius().max_share, metavar="FRACTION",
                   help="refuse to act when more than this share of the node's owners look orphaned")
    g.add_argument("--allow-empty-desired", action="store_true",
                   help="act even when the desired state lists no pods for a node with pod directories")
    g.add_argument("--max-desired-age", type=float, default=120.0, metavar="SECONDS",
                   help="a desired state older than this is stale: nothing destructive happens")
    g.add_argument("--reclaims-per-minute", type=float, default=600.0)
    g.add_argument("--command-timeout", type=float, default=ScanOptions().command_timeout, metavar="SECONDS")


def _mark_rule(text: str) -> tuple[Kind, tuple[int, float]]:
    try:
        kind, _, rule = text.partition("=")
        k, _, grace = rule.partition(",")
        return Kind(kind), (int(k), float(grace))
    except ValueError as e:
        kinds = ", ".join(k.value for k in Kind)
        raise argparse.ArgumentTypeError(f"expected KIND=K,SECONDS with KIND one of {kinds}: {text!r}") from e


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text[-1:] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 30m, 2h)") from e


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


def source_from_args(args: argparse.Namespace) -> DesiredSource:
    node = args.node or os.environ.get("NODE_NAME")
    if args.pods_from is not None:
        from nodegc.desired.snapshot import SnapshotSource

        return SnapshotSource(args.pods_from, node)
    from nodegc.desired.kube import KubeSource

    return KubeSource(node or socket.gethostname(), kubeconfig=args.kubeconfig)


def cmd_scan(args: argparse.Namespace) -> int:
    from nodegc.engine.detecting import detect
    from nodegc.inventory.scanning import scan_node
    from nodegc.planning.correlate import CorrelationPolicy
    from nodegc.render import Report, render_json, render_table, render_yaml

    roots = roots_from_args(args)
    options = ScanOptions(command_timeout=args.command_timeout, min_age_seconds=args.min_age)
    source = source_from_args(args)
    try:
        desired = source.fetch()
    except SourceError as e:
        log.error("desired state unavailable", source=source.name, error=str(e))
        print(f"nodegc: cannot read the pods bound to this node: {e}", file=sys.stderr)
        return EXIT_SOURCE
    inventory, findings = detect(scan_node(roots, options), desired, now=datetime.now(UTC),
                                 policy=CorrelationPolicy(min_age_seconds=args.min_age))
    report = Report(node=desired.node, source=desired.source, taken_at=inventory.taken_at,
                    findings=findings, problems=inventory.problems)
    for p in inventory.problems:
        log.warning("read problem", kind=p.kind.value, path=p.path, reason=p.reason)
    log.info("scan done", node=desired.node, findings=len(findings), residue=len(report.residue),
             conflicts=len(report.conflicts), problems=len(inventory.problems))
    out = {"json": render_json, "yaml": render_yaml}.get(args.output)
    sys.stdout.write(out(report) if out else render_table(report, show_all=args.all))
    return EXIT_RESIDUE if report.residue or report.conflicts else EXIT_CLEAN


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    fmt = {"auto": None, "json": True, "console": False}[args.log_format]
    level = args.log_level or ("info" if args.command in ("agent", "controller") else "warning")
    configure_logging(level, json_output=fmt)
    from nodegc import agent, commands, controller

    handlers = {"scan": cmd_scan, "clean": commands.cmd_clean, "agent": agent.cmd_agent,
                "history": commands.cmd_history, "explain": commands.cmd_explain,
                "controller": controller.cmd_controller}
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {args.command}")
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
