"""Reclaiming 1,000 leaked attachments: nodegc's engine against a plain CNI DEL loop.

Each attachment is a pod deleted from the API whose CNI DEL never ran: IP reservation, libcni cache
entry, netns with its veth, and CNI chains (every other one with a hostport). In one run, on two
identically built sandbox nodes:

- nodegc: one engine cycle with the host executor (re-verification, CNI DEL from the cache, batched
  iptables-restore for what DEL leaves, netns removal, confirm);
- baseline: what libcni's GC does, CNI DEL once per cache entry, then removing the netns file as the
  runtime would.

Prints JSON with both wall times and both end states (the residue a scan still finds). Root, through
`make bench-reclaim` (private mount and network namespaces).

    .venv/bin/python bench/reclaim.py --leaked 1000 --live 10
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from datetime import UTC, datetime

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


def build(leaked: int, live: int) -> tuple[SandboxNode, SnapshotSource, float]:
    node = SandboxNode.create()
    started = time.perf_counter()
    for i in range(live):
        node.add_pod(f"live-{i}", host_port=20000 + i)
    for i in range(leaked):
        pod = node.add_pod(f"gone-{i}", volumes=(), host_port=30000 + i if i % 2 == 0 else None)
        node.delete_without_cni_del(pod)
    source = SnapshotSource(node.write_snapshot(node.root / "pods.json"), node.node_name)
    return node, source, time.perf_counter() - started


def end_state(node: SandboxNode, source: SnapshotSource) -> dict[str, int]:
    findings = correlate(scan_node(node.roots), source.fetch(), now=datetime.now(UTC),
                         policy=CorrelationPolicy(min_age_seconds=0))
    return dict(sorted(Counter(f.cls.value for f in findings if f.cls.value != "in_use").items()))


def run_nodegc(node: SandboxNode, source: SnapshotSource) -> dict[str, object]:
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0),
                              blast_radius=BlastRadius(max_share=1.0), reclaims_per_minute=1e9, reclaim_burst=10**9)
    started = time.perf_counter()
    with Ledger(node.root / "ledger.db") as ledger:
        report = Engine(roots=node.roots, source=source, ledger=ledger, executor=HostExecutor(node.roots),
                        settings=settings).cycle()
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 2), "steps": len(report.outcomes),
            "failed": sum(1 for _, o in report.outcomes if not o.ok), "blocked": report.blocked}


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leaked", type=int, default=1000)
    parser.add_argument("--live", type=int, default=10)
    args = parser.parse_args()
    configure_logging("error")
    result: dict[str, object] = {"benchmark": "reclaim", "leaked_attachments": args.leaked, "live_pods": args.live,
                                 "cpus": os.cpu_count()}
    for name, runner in (("nodegc", None), ("cni_del_loop", run_del_loop)):
        node, source, build_s = build(args.leaked, args.live)
        with node:
            before = end_state(node, source)
            outcome = run_nodegc(node, source) if runner is None else runner(node)
            result[name] = {**outcome, "build_seconds": round(build_s, 1), "residue_before": before,
                            "end_state": end_state(node, source)}
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
