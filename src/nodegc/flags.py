"""Every command-line flag of nodegc. Light on purpose: `--help` and `--version` import only this.

A new flag goes here, in the group of the commands that take it, with its default from nodegc/defaults.py
and a value type from the bottom of this module (which validates it: a bad value exits 2 with a message
that names the flag); nodegc/wiring.py turns it into a setting (see the note at the top of that module).
An agent flag is also a key of the agent's config file (nodegc/config.py), in camelCase, with no extra code.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from nodegc import __version__, defaults
from nodegc.model.resources import Kind

DESCRIPTION = "nodegc: find and reclaim what dead pods leave behind on a Kubernetes node."
KINDS = tuple(k.value for k in Kind)
LOG_LEVELS = ["debug", "info", "warning", "error"]
LOG_FORMATS = ["auto", "json", "console"]
OUTPUTS = ["table", "json", "yaml"]

EPILOG = """\
examples:
  nodegc scan                                    # report the residue of this node (asks the API)
  kubectl get pods -A -o json | nodegc scan --pods-from - --node "$(hostname)"
  nodegc clean                                   # print the reclaim plan; changes nothing
  sudo nodegc clean --apply                      # reclaim, step by step
  nodegc agent --config /etc/nodegc/agent.yaml   # the node agent (the DaemonSet runs this)
  nodegc history --since 1h30m -o yaml
  nodegc completion bash > /etc/bash_completion.d/nodegc

exit status: 0 clean, 1 error, 2 usage, 3 residue or conflicts (or a failed step), 4 desired state
unreadable, 5 refused by a safety guard, 6 the scan cannot see the node, 130 interrupted (Ctrl-C).
See `nodegc COMMAND --help` for each command's flags and defaults.
"""

SCAN_EPILOG = """\
examples:
  nodegc scan                                    # pods from the API (in-cluster, --kubeconfig, $KUBECONFIG)
  nodegc scan --context prod --node ip-10-0-1-7 -o json
  nodegc scan --pods-from pods.json -o yaml      # offline: a `kubectl get pods -A -o json` snapshot
  kubectl get pods -A -o json --field-selector spec.nodeName=$(hostname) | nodegc scan --pods-from -

exit status: 0 nothing to reclaim, 3 residue or conflicts, 4 desired state unreadable, 6 the scan cannot
see the node (kubelet root or CNI data missing, no pod directory although pods run here), 2 usage
(including not root), 130 interrupted.
"""

CLEAN_EPILOG = """\
examples:
  nodegc clean                                   # the plan: what --apply would do, in order
  nodegc clean -o yaml > plan.yaml
  sudo nodegc clean --apply                      # reclaim; each step is printed as it happens

Without --apply nothing changes (an in-memory ledger and the dry-run executor); the plan prints even
when the desired state is stale, marked STALE. --apply waits for the rate limiter instead of stopping.
exit status: 0 nothing left (or every step succeeded), 3 a plan exists or a step failed, 4 desired state
unreadable, 5 refused by a guard (stale, blast radius, the ledger held by a running agent), 130 interrupted.
"""

AGENT_EPILOG = """\
examples:
  nodegc agent                                   # the defaults: K=3 scans, 2m grace, every 30s
  nodegc agent --config /etc/nodegc/agent.yaml --dry-run
  nodegc agent --interval 1m --mark-rule volume_mount=5,10m

A config file (YAML, `kind: AgentConfig`) takes every flag of this command under its camelCase name
(--consecutive-scans is consecutiveScans); a flag on the command line overrides the file.
exit status: 0 stopped by SIGTERM or SIGINT, 2 usage or bad config, 4 the pods cannot be watched,
5 another nodegc holds the ledger.
"""

HISTORY_EPILOG = """\
examples:
  nodegc history --since 2h
  nodegc history --owner shop/api-7d9f-x2x -o json
  nodegc history --kind ip_reservation --since 1d --limit 50
"""

EXPLAIN_EPILOG = """\
examples:
  nodegc explain k8s-pod-network/10.244.0.6
  nodegc explain ip_reservation:k8s-pod-network/10.244.0.6 -o yaml
"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Epilogs keep their layout; every flag with a default says it (once)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if ("%(default)" in text or "default:" in text
                or action.default in (None, False, [], argparse.SUPPRESS)):
            return text
        if action.option_strings and action.nargs != 0:
            return f"{text} (default: %(default)s)" if text else "default: %(default)s"
        return text


class Parser(argparse.ArgumentParser):
    """A usage error is one line naming the flag and one pointing at --help (kubectl's habit), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\nSee '{self.prog} --help'.\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="nodegc", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"nodegc {__version__}")
    parser.add_argument("--log-level", default=None, choices=LOG_LEVELS,
                        help="default: info for agent and controller (their audit trail), error otherwise")
    parser.add_argument("--log-format", default="auto", choices=LOG_FORMATS,
                        help="auto: JSON when stderr is not a terminal")
    # The logging flags are accepted after the subcommand too; there they override the global ones.
    logs = Parser(add_help=False)
    logs.add_argument("--log-level", default=argparse.SUPPRESS, choices=LOG_LEVELS,
                      help="default: info for agent and controller, error otherwise")
    logs.add_argument("--log-format", default=argparse.SUPPRESS, choices=LOG_FORMATS,
                      help="auto: JSON when stderr is not a terminal")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, epilog: str | None = None) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[logs], help=summary, description=summary, epilog=epilog,
                              formatter_class=HelpFormatter)

    scan = command("scan", "inventory the node and report residue (read only)", SCAN_EPILOG)
    add_source_flags(scan)
    add_root_flags(scan)
    add_output_flag(scan)
    scan.add_argument("--all", action="store_true", help="table: also list resources in use")
    scan.add_argument("--min-age", type=seconds(">=", 0), default=defaults.MIN_AGE_SECONDS, metavar="DURATION",
                      help="resources younger than this are protected")
    scan.add_argument("--command-timeout", type=seconds(">", 0), default=defaults.COMMAND_TIMEOUT_SECONDS,
                      metavar="DURATION", help="bound for each external command (iptables-save)")
    add_runtime_flags(scan)

    clean = command("clean", "one shot: plan the reclaim of residue; --apply does it", CLEAN_EPILOG)
    add_source_flags(clean)
    add_root_flags(clean)
    add_engine_flags(clean)
    add_runtime_flags(clean, engine=True)
    clean.add_argument("--apply", action="store_true", help="reclaim for real (default: print the plan only)")
    add_output_flag(clean)

    agent = command("agent", "the node agent: scan every interval, advance phases, reclaim", AGENT_EPILOG)
    add_source_flags(agent)
    add_root_flags(agent)
    add_engine_flags(agent)
    add_runtime_flags(agent, engine=True)
    add_agent_flags(agent)

    add_controller_parser(sub, [logs])

    history = command("history", "the ledger's audit trail (newest rows)", HISTORY_EPILOG)
    history.add_argument("--state-dir", type=Path, default=Path(defaults.STATE_DIR), metavar="DIR",
                         help="holds the ledger (ledger.db)")
    history.add_argument("--item", help="item key or part of a resource id")
    history.add_argument("--kind", choices=list(KINDS))
    history.add_argument("--owner", help="part of the owner (namespace/name, uid or container id)")
    history.add_argument("--since", type=seconds(">", 0), metavar="DURATION", help="e.g. 30m, 2h, 1h30m, 1d")
    history.add_argument("--limit", type=count(1), default=defaults.HISTORY_LIMIT, metavar="N",
                         help="rows at most")
    add_output_flag(history)

    explain = command("explain", "why an item is, or is not, being reclaimed", EXPLAIN_EPILOG)
    explain.add_argument("item", help="item key (kind:id) or part of a resource id")
    explain.add_argument("--state-dir", type=Path, default=Path(defaults.STATE_DIR), metavar="DIR",
                         help="holds the ledger (ledger.db)")
    add_output_flag(explain)

    completion = command("completion", "print a shell completion script (bash, zsh or fish)",
                         "examples:\n  source <(nodegc completion bash)\n"
                         "  nodegc completion zsh > \"${fpath[1]}/_nodegc\"\n"
                         "  nodegc completion fish > ~/.config/fish/completions/nodegc.fish\n")
    completion.add_argument("shell", choices=["bash", "zsh", "fish"])
    return parser


# -- groups shared by several commands --------------------------------------------------------------


def add_output_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=OUTPUTS, default="table",
                   help="a table for people, or a document (apiVersion, kind) for machines")


def add_root_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("node roots (defaults are the production paths)")
    g.add_argument("--kubelet-root", type=Path, default=Path(defaults.KUBELET_ROOT), metavar="DIR",
                   help="the kubelet's root (pods/<uid>/...)")
    g.add_argument("--cni-conf-dir", type=Path, default=Path(defaults.CNI_CONF_DIR), metavar="DIR",
                   help="CNI network configurations")
    g.add_argument("--cni-bin-dir", type=Path, action="append", metavar="DIR",
                   help=f"CNI plugins for CNI DEL, repeatable (default: {', '.join(defaults.CNI_BIN_DIRS)})")
    g.add_argument("--cni-data-dir", type=Path, default=Path(defaults.CNI_DATA_DIR), metavar="DIR",
                   help="host-local networks/ and the libcni results/ cache")
    g.add_argument("--netns-dir", type=Path, default=Path(defaults.NETNS_DIR), metavar="DIR",
                   help="named network namespaces")
    g.add_argument("--proc-root", type=Path, default=Path(defaults.PROC_ROOT), metavar="DIR",
                   help="mountinfo is read from <proc-root>/self/mountinfo")
    g.add_argument("--static-pod-dir", type=Path, default=Path(defaults.STATIC_POD_DIR), metavar="DIR",
                   help="the kubelet's staticPodPath: what a manifest there declares is never reclaimed")
    g.add_argument("--pod-log-dir", type=Path, default=Path(defaults.POD_LOG_DIR), metavar="DIR",
                   help="the kubelet's per-pod log directories")
    g.add_argument("--iptables-backend", choices=["auto", "legacy", "nft", "default"],
                   default=defaults.IPTABLES_BACKEND,
                   help="where the node's rules live; auto detects it as kube-proxy does (its hint chains, else "
                        "the backend with more rules); default: the image's own iptables-save")
    g.add_argument("--net-ns", type=Path, default=None, metavar="FILE",
                   help="read links and iptables in this network namespace (default: the one nodegc runs in)")


def add_runtime_flags(p: argparse.ArgumentParser, *, engine: bool = False) -> None:
    g = p.add_argument_group("container runtime (CRI)")
    g.add_argument("--runtime-endpoint", default=defaults.RUNTIME_ENDPOINT, metavar="ENDPOINT",
                   help="CRI socket, as crictl and the kubelet take it (default: %(default)s; CRI-O: "
                        "unix:///var/run/crio/crio.sock; 'none': read no runtime)")
    g.add_argument("--runtime-timeout", type=seconds(">", 0), default=defaults.RUNTIME_TIMEOUT_SECONDS,
                   metavar="DURATION", help="upper bound for one CRI call (default: %(default)s)")
    g.add_argument("--runtime-state-dir", default=defaults.RUNTIME_STATE_DIR, metavar="DIR",
                   help="containerd's state directory, whose sandbox dirs, task bundles and shims the runtime no"
                        " longer lists are found, and whose netns files are network namespaces (default:"
                        " %(default)s; 'none': not read)")
    if not engine:
        return
    g.add_argument("--runc-root", type=root_dir, default=defaults.RUNC_ROOT, metavar="DIR",
                   help="runc's state root: a reclaimed task bundle's runc state dir (<root>/k8s.io/<id>) goes with"
                        " it, kept while the init process it names runs (default: %(default)s; 'none': not"
                        " touched)")
    g.add_argument("--cgroup-root", type=root_dir, default=defaults.CGROUP_ROOT, metavar="DIR",
                   help="where the cgroup hierarchies are mounted: a reclaimed task bundle's empty container"
                        " cgroups (cgroupfs driver, rmdir only) go with it (default: %(default)s; 'none': not"
                        " touched)")
    g.add_argument("--running-orphan-grace", type=seconds(">=", 0), default=defaults.RUNNING_ORPHAN_GRACE_SECONDS,
                   metavar="DURATION", help="a READY sandbox whose pod is absent from the API this long is reported"
                                           " (Event, metric; counted from when nodegc first saw it so, kept in"
                                           " the ledger across restarts; default: %(default)s)")
    g.add_argument("--stop-running-orphans", action="store_true",
                   help="also stop such sandboxes through CRI (their workload is still running; default: report)")
    g.add_argument("--stop-orphan-shims", action="store_true",
                   help="also stop containerd-shim-runc-v2 processes whose id the runtime no longer lists"
                        " (SIGKILL to the containers they ran first, their init processes pinned before; nothing is"
                        " signalled when a child is in no container's cgroup, a runc call of the shim getting 3 s"
                        " to end first; then SIGTERM, then SIGKILL;"
                        " default: report)")


def add_source_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("desired state (the pods bound to this node)")
    g.add_argument("--node", default=None,
                   help="node name (default: $NODE_NAME, else inferred from --pods-from, else the hostname)")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--pods-from", type=Path, metavar="FILE",
                     help="pods snapshot as printed by `kubectl get pods -o json` (or -o yaml); - reads stdin")
    src.add_argument("--kubeconfig", type=Path, metavar="FILE",
                     help="kubeconfig (default: in-cluster config, then $KUBECONFIG, several files merged as "
                          "kubectl does, or ~/.kube/config)")
    g.add_argument("--context", default=None, metavar="NAME",
                   help="the kubeconfig context to use (default: its current-context)")
    g.add_argument("--request-timeout", type=seconds(">", 0), default=defaults.REQUEST_TIMEOUT_SECONDS,
                   metavar="DURATION", help="one API request at most, e.g. 10s, 1m")


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("safety")
    g.add_argument("--state-dir", type=Path, default=Path(defaults.STATE_DIR), metavar="DIR",
                   help="holds the ledger (ledger.db) and its lock")
    g.add_argument("--min-age", type=seconds(">=", 0), default=defaults.MIN_AGE_SECONDS, metavar="DURATION",
                   help="resources younger than this are protected")
    g.add_argument("--max-share", type=fraction, default=defaults.MAX_SHARE, metavar="FRACTION",
                   help="refuse to act when more than this share of the node's owners look orphaned, in (0, 1]")
    g.add_argument("--allow-empty-desired", action="store_true",
                   help="act even when the desired state lists no pods for a node with pod directories")
    g.add_argument("--max-desired-age", type=seconds(">", 0), default=defaults.MAX_DESIRED_AGE_SECONDS,
                   metavar="DURATION", help="a desired state older than this is stale: nothing destructive happens")
    g.add_argument("--reclaims-per-minute", type=number(">", 0), default=defaults.RECLAIMS_PER_MINUTE,
                   metavar="N", help="reclaim steps per minute at most (burst 200)")
    g.add_argument("--command-timeout", type=seconds(">", 0), default=defaults.COMMAND_TIMEOUT_SECONDS,
                   metavar="DURATION", help="bound for each external command (iptables, CNI plugins)")


def add_agent_flags(agent: argparse.ArgumentParser) -> None:
    agent.add_argument("--config", type=Path, default=None, metavar="FILE",
                       help="YAML config file (kind: AgentConfig); flags override it")
    agent.add_argument("--interval", type=seconds(">", 0), default=defaults.AGENT_INTERVAL_SECONDS,
                       metavar="DURATION", help="time between scans")
    agent.add_argument("--consecutive-scans", type=count(1), default=defaults.CONSECUTIVE_SCANS, metavar="K",
                       help="scans in a row a resource must be orphaned before it is marked")
    agent.add_argument("--grace", type=seconds(">=", 0), default=defaults.GRACE_SECONDS, metavar="DURATION",
                       help="and this long since first seen orphaned")
    agent.add_argument("--mark-rule", action="append", type=mark_rule, default=[], metavar="KIND=K,DURATION",
                       help="per-kind K and grace, repeatable, e.g. volume_mount=5,10m")
    agent.add_argument("--dry-run", action="store_true", help="run every phase but reclaim nothing")
    agent.add_argument("--watch-pod-dirs", action=argparse.BooleanOptionalAction, default=defaults.WATCH_POD_DIRS,
                       help="watch pod directories with inotify (about 5 watches a pod) and walk again only those"
                            " that changed (default); --no-watch-pod-dirs walks every one every scan")
    agent.add_argument("--metrics-address", type=address, default=defaults.AGENT_METRICS_ADDRESS,
                       metavar="HOST:PORT", help="metrics, /healthz and /readyz; empty to disable")
    agent.add_argument("--ledger-retention", type=seconds(">", 0), default=defaults.LEDGER_RETENTION_SECONDS,
                       metavar="DURATION", help="prune closed items and history older than this, e.g. 30d, 12h")
    agent.add_argument("--max-cycles", type=count(0), default=0, help=argparse.SUPPRESS)


def add_controller_parser(sub: argparse._SubParsersAction[Any],
                          parents: list[argparse.ArgumentParser]) -> None:
    import os

    summary = "the cluster controller: remove stale EndpointSlice endpoints (leader elected)"
    p = sub.add_parser("controller", parents=parents, help=summary, description=summary,
                       formatter_class=HelpFormatter,
                       epilog="examples:\n  nodegc controller --dry-run\n"
                              "  nodegc controller --lease-namespace nodegc-system --interval 1m\n")
    p.add_argument("--kubeconfig", type=Path, metavar="FILE",
                   help="kubeconfig (default: in-cluster config, then $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE") or "default",
                   help="namespace of the leader election Lease (default: $POD_NAMESPACE, else default)")
    p.add_argument("--lease-name", default=defaults.CONTROLLER_LEASE_NAME, help="default: %(default)s")
    p.add_argument("--identity", default=None,
                   help="leader election identity (default: $POD_NAME, else the hostname)")
    p.add_argument("--interval", type=seconds(">", 0), default=defaults.CONTROLLER_INTERVAL_SECONDS,
                   metavar="DURATION", help="time between passes while leader (default: %(default)s)")
    # > 0 is checked by the command itself, with the Lease's other proportions.
    p.add_argument("--lease-duration", type=seconds(">=", 0), default=defaults.LEASE_DURATION_SECONDS,
                   metavar="DURATION",
                   help="a follower takes over after the Lease went unrenewed this long "
                        "(default: %(default)s); the leader stops acting after 2/3 of it without a renew")
    p.add_argument("--dry-run", action="store_true",
                   help="find and log stale endpoints, write nothing (no patches, no Events)")
    p.add_argument("--max-patches-per-pass", type=count(0), default=defaults.MAX_PATCHES_PER_PASS, metavar="N",
                   help="slices patched per pass at most; the rest wait for the next pass "
                        "(default: %(default)s)")
    p.add_argument("--events-per-minute", type=count(1), default=defaults.CONTROLLER_EVENTS_PER_MINUTE,
                   metavar="N", help="Event writes per minute at most (default: %(default)s)")
    p.add_argument("--metrics-address", type=address, default=defaults.CONTROLLER_METRICS_ADDRESS,
                   metavar="HOST:PORT",
                   help="metrics, /healthz and /readyz; empty to disable (default: %(default)s)")
    p.add_argument("--max-passes", type=count(0), default=0, help=argparse.SUPPRESS)


# -- value types: each refuses what it cannot mean (argparse names the flag and exits 2) ---------------

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(?:(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d))+")
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)")
_CHECKS: dict[str, Callable[[float, float], bool]] = {
    ">": lambda v, b: v > b, ">=": lambda v, b: v >= b,
}


MAX_DURATION_SECONDS = 10 * 365 * 86400.0
"""The largest duration a flag or setting takes (ten years): every timeout, interval and wait must fit the
kernel's and Python's (socket and thread timeouts overflow near 9.2e9 s, and a CRI call given more failed
with OverflowError instead of timing out)."""


def parse_duration(text: str) -> float:
    """Seconds from `90`, `90s`, `1.5m`, `1h30m`, `2d`, `500ms` (Go and kubectl style); ValueError otherwise."""
    s = text.strip()
    try:
        value = float(s)
    except ValueError:
        if not s or not _DURATION.fullmatch(s):
            raise ValueError(f"not a duration: {text!r} (e.g. 90, 90s, 30m, 1h30m, 2d)") from None
        value = sum(float(n) * _UNITS[u] for n, u in _PART.findall(s))
    if not math.isfinite(value):
        raise ValueError(f"not a finite duration: {text!r}")
    if value > MAX_DURATION_SECONDS:
        raise ValueError(f"a duration is at most {MAX_DURATION_SECONDS:.0f}s (ten years): {text!r}")
    return value


def _bound(value: float, op: str, bound: float, text: str) -> float:
    if not _CHECKS[op](value, bound):
        raise argparse.ArgumentTypeError(f"must be {op} {bound:g}: {text!r}")
    return value


def seconds(op: str, bound: float) -> Callable[[str], float]:
    """A duration in seconds (a plain number, or 1h30m and the like), finite and `op bound`."""
    def parse(text: str) -> float:
        try:
            value = parse_duration(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from e
        return _bound(value, op, bound, text)

    parse.__name__ = "duration"
    return parse


def number(op: str, bound: float) -> Callable[[str], float]:
    """A finite number `op bound` (nan and inf are refused)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from e
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number: {text!r}")
        return _bound(value, op, bound, text)

    parse.__name__ = "number"
    return parse


MAX_COUNT = 2**63 - 1
"""The largest count: what SQLite's INTEGER holds (history's --limit is a LIMIT); more means nothing."""


def count(minimum: int) -> Callable[[str], int]:
    """A whole number >= minimum, at most MAX_COUNT."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"not a whole number: {text[:40]!r}") from e
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}: {text!r}")
        if value > MAX_COUNT:
            raise argparse.ArgumentTypeError(f"must be <= {MAX_COUNT}: {text[:40]!r}")
        return value

    parse.__name__ = "count"
    return parse


def root_dir(text: str) -> Path | None:
    """A directory below which something is removed: an absolute path (never one that depends on the working
    directory), or 'none' for none."""
    if text.strip().lower() == "none":
        return None
    if not text or not os.path.isabs(text):
        raise argparse.ArgumentTypeError(f"not an absolute path (or 'none'): {text!r}")
    return Path(os.path.normpath(text))



def fraction(text: str) -> float:
    """A share in (0, 1]: 0 would refuse everything, above 1 would switch the guard off."""
    value = number(">", 0)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1]: {text!r}")
    return value


def address(text: str) -> str:
    """HOST:PORT with a port in 1..65535 (HOST may be empty: every address), or empty to disable."""
    if text == "":
        return text
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT with a port in 1..65535: {text!r}")
    if host.startswith("[") != host.endswith("]"):
        raise argparse.ArgumentTypeError(f"unbalanced brackets in the host: {text!r}")
    return text


def mark_rule(text: str) -> tuple[Kind, tuple[int, float]]:
    try:
        kind, _, rule = text.partition("=")
        k, _, grace = rule.partition(",")
        kinds = int(k), parse_duration(grace)
        if kinds[0] < 1 or kinds[1] < 0:
            raise ValueError("K >= 1 and a grace >= 0")
        return Kind(kind), kinds
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"expected KIND=K,DURATION with KIND one of {', '.join(KINDS)}, K >= 1 and DURATION >= 0: "
            f"{text!r}") from e

