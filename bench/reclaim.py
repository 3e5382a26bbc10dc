"""Reclaiming leaked CNI attachments: nodegc's engine against a plain CNI DEL loop, end states compared.

Each attachment is a pod deleted from the API whose CNI DEL never ran: IP reservation, libcni cache
entry, netns with its veth, the bridge's masquerade chain, the firewall plugin's rules in CNI-FORWARD,
tuning's sysctl, and for every other pod a hostport (portmap's DNAT chain and its jump) and for every
fourth one a bandwidth limit (an ifb device). Per size, on two sandbox nodes built alike from one seed
(same names, ids and addresses):

- nodegc: one engine cycle with the host executor (re-verification, checkpoints, the direct teardown of
  the plugins it knows, batched link, rule and netns removal, confirm);
- baseline: what libcni's GC does, CNI DEL once per cache entry, then removing the netns file as the
  runtime would.

Before and after, the full state of each node is taken (every file below its root with a content digest,
the mount table, the links, both iptables families rule by rule; `SandboxNode.full_state`), and
`end_state_equal` says whether the two nodes ended identical. Prints JSON. Root, through
`make bench-reclaim` (private mount and network namespaces).

    .venv/bin/python bench/reclaim.py --leaked 250 1000 --live 10
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.inventory.scanning import scan_node
from nodegc.ledger.store import Ledger
from nodegc.observe.logs import configure_logging
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.planning.guards import BlastRadius
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.cni_del import cni_del
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.reclaim.netns import remove_netns
from nodegc.sandbox.node import SandboxNode

PLUGINS = ("bridge", "portmap", "firewall", "tuning", "bandwidth")
OBSERVER_FILES = ("pods.json",)


def build(leaked: int, live: int, seed: int) -> tuple[SandboxNode, SnapshotSource, float]:
    node = SandboxNode.create(plugins=PLUGINS, seed=seed)
    started = time.perf_counter()
    for i in range(live):
        node.add_pod(f"live-{i}", host_port=20000 + i, bandwidth=i % 2 == 0)
    for i in range(leaked):
        pod = node.add_pod(f"gone-{i}", volumes=(), host_port=30000 + i if i % 2 == 0 else None,
                           bandwidth=i % 4 == 0)
        node.delete_without_cni_del(pod)
    source = SnapshotSource(node.write_snapshot(node.root / "pods.json"), node.node_name)
    return node, source, time.perf_counter() - started


def residue(node: SandboxNode, source: SnapshotSource) -> dict[str, int]:
    findings = correlate(scan_node(node.roots), source.fetch(), now=datetime.now(UTC),
                         policy=CorrelationPolicy(min_age_seconds=0))
    return dict(sorted(Counter(f.cls.value for f in findings if f.cls.value != "in_use").items()))


def run_nodegc(node: SandboxNode, source: SnapshotSource) -> dict[str, object]:
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0),
                              blast_radius=BlastRadius(max_share=1.0), reclaims_per_minute=1e9, reclaim_burst=10**9)
    with tempfile.TemporaryDirectory(prefix="nodegc-bench-ledger-") as state:
        started = time.perf_counter()
        with Ledger(Path(state) / "ledger.db") as ledger:
            report = Engine(roots=node.roots, source=source, ledger=ledger, executor=HostExecutor(node.roots),
                            settings=settings).cycle()
        seconds = time.perf_counter() - started
    outcomes = [o for _, o in report.outcomes]
    return {"seconds": round(seconds, 2), "steps": len(outcomes), "failed": sum(1 for o in outcomes if not o.ok),
            "torn_down_directly": sum(1 for o in outcomes if o.detail.startswith("torn down directly")),
            "closed": len(report.closed), "blocked": report.blocked}


def run_del_loop(node: SandboxNode) -> dict[str, object]:
    inventory = scan_node(node.roots)
    netns = {n.path: n for n in inventory.netns}
    live = {p.container_id for p in node.pods.values() if p.in_api}
    started = time.perf_counter()
    failed = 0
    for entry in inventory.cni_cache:
        if entry.container_id in live:
            continue
        ok = cni_del(entry, roots=node.roots).ok
        ns = netns.get(entry.netns or "")
        if ns is not None:
            ok = remove_netns(ns).ok and ok
        failed += 0 if ok else 1
    return {"seconds": round(time.perf_counter() - started, 2), "failed": failed}


def differences(a: dict[str, Any], b: dict[str, Any], limit: int = 8) -> list[str]:
    out: list[str] = []
    for key, left in a.items():
        right = b[key]
        if isinstance(left, dict):
            for sub in left:
                only_a = [x for x in left[sub] if x not in right[sub]]
                only_b = [x for x in right[sub] if x not in left[sub]]
                out += [f"{key}/{sub} only after nodegc: {x}" for x in only_a[:limit]]
                out += [f"{key}/{sub} only after the DEL loop: {x}" for x in only_b[:limit]]
        else:
            out += [f"{key} only after nodegc: {x}" for x in left if x not in right][:limit]
            out += [f"{key} only after the DEL loop: {x}" for x in right if x not in left][:limit]
    return out[: 4 * limit]


def measure(leaked: int, live: int, seed: int) -> dict[str, object]:
    result: dict[str, object] = {"leaked_attachments": leaked, "live_pods": live}
    states: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for name in ("nodegc", "cni_del_loop"):
        node, source, build_s = build(leaked, live, seed)
        with node:
            before_state = node.full_state(ignore=OBSERVER_FILES)
            before = residue(node, source)
            outcome = run_nodegc(node, source) if name == "nodegc" else run_del_loop(node)
            result[name] = {**outcome, "build_seconds": round(build_s, 1), "residue_before": before,
                            "residue_after": residue(node, source)}
            states[name] = (before_state, node.full_state(ignore=OBSERVER_FILES))
    (ours_before, ours_after), (loop_before, loop_after) = states["nodegc"], states["cni_del_loop"]
    ours_s = float(str(result["nodegc"]["seconds"]))  # type: ignore[index]
    loop_s = float(str(result["cni_del_loop"]["seconds"]))  # type: ignore[index]
    result["speedup"] = round(loop_s / ours_s, 1) if ours_s else None
    result["start_state_equal"] = ours_before == loop_before
    result["end_state_equal"] = ours_after == loop_after
    result["state_compared"] = {key: (sum(len(v) for v in val.values()) if isinstance(val, dict) else len(val))
                                for key, val in ours_before.items()}
    if not result["end_state_equal"]:
        result["end_state_differences"] = differences(ours_after, loop_after)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leaked", type=int, nargs="+", default=[250, 1000])
    parser.add_argument("--live", type=int, default=10)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()
    configure_logging("error")
    runs = [measure(n, args.live, args.seed) for n in args.leaked]
    doc = {"benchmark": "reclaim", "cpus": os.cpu_count(), "plugins": list(PLUGINS), "runs": runs,
           "end_state_equal": all(r["end_state_equal"] for r in runs)}
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
