"""Chaos soak: pod lifecycles on a sandbox node with the real CNI plugins, while faults hit nodegc.

Each round creates pods (CNI ADD through bridge, host-local and portmap; names reused, so a pod comes back
under the same name with a new UID, and a small range, so IPs are reused), deletes others with a random
partial teardown (no CNI DEL, netns only, mounts left, directory left, terminal, clean), then runs one
nodegc cycle under one fault:

- the desired state normal, stalled (an older photo), stale, dated in the future, truncated (a live pod
  left out of the list while the live GET still finds it), or unavailable; the live GET unavailable;
- `nodegc clean --apply` as a process: on the previous round's snapshot file (dated as then, younger than
  --max-desired-age: the pods born since are not in it, and the file is all the "live GET" it has), or
  SIGKILLed at a fault point (every point in turn) or at a random time.

Before and after every cycle it reads what each live pod holds with the system's tools (pod directory,
mounted volumes, cache entry, IP file, netns and eth0 address, host veth, iptables rules): any change is a
false reclaim. At the end every pod but one is deleted without teardown and nodegc runs until the node is
clean; what is left is residue after convergence. Any exception out of a cycle, or a process that exits
other than as documented, is a crash. Prints JSON. Root, through `make chaos` (private namespaces).

    .venv/bin/python bench/chaos.py --lifecycles 1000 --seed 7
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from nodegc.desired.source import SourceError
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.inventory.scanning import scan_node
from nodegc.ledger.store import Ledger
from nodegc.model.pods import DesiredState, Pod
from nodegc.observe.logs import configure_logging
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.planning.guards import BlastRadius
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.sandbox.evidence import held
from nodegc.sandbox.node import SandboxError, SandboxNode, SandboxPod

FAULT_POINTS = [f"{stage}:{kind}" for stage in ("after_checkpoint", "before_clean", "after_clean", "after_record")
                for kind in ("cni_cache", "ip_reservation", "veth", "netns", "volume_mount", "pod_dir")] + [
    "after_del:cni_cache", "before_clean:cni_cache_file", "before_clean:iptables", "after_clean:iptables",
    "after_record:iptables_chain"]
FAULTS = {"normal": 36, "stalled": 8, "stale": 8, "future": 8, "truncated": 12, "api_down": 5, "get_down": 5,
          "stalled_snapshot": 6, "sigkill_point": 6, "sigkill_random": 6}
TEARDOWNS = ("delete_cleanly", "delete_without_cni_del", "delete_netns_only", "delete_leaving_mounts",
             "delete_leaving_dir", "terminate")
NAMES = [f"app-{i}" for i in range(24)]
MAX_DESIRED_AGE = 30.0


def _pod_from_record(record: dict[str, Any]) -> Pod:
    from nodegc.api.objects import pod_from_object

    return pod_from_object(record)


@dataclass
class ChaosSource:
    """The sandbox's API view, with the round's fault applied."""

    node: SandboxNode
    fault: str = "normal"
    stalled: DesiredState | None = None
    left_out: str | None = None
    name: str = "chaos"

    def truth(self) -> DesiredState:
        pods = tuple(_pod_from_record(self.node.pod_record(p)) for p in self.node.api_pods())
        return DesiredState(node=self.node.node_name, pods=pods, source=self.name, fetched_at=datetime.now(UTC))

    def fetch(self) -> DesiredState:
        now = datetime.now(UTC)
        if self.fault == "api_down":
            raise SourceError("chaos: the API is down")
        if self.fault == "stalled" and self.stalled is not None:
            return self.stalled
        truth = self.truth()
        if self.fault == "stale":
            return replace(truth, fetched_at=now - timedelta(seconds=10 * MAX_DESIRED_AGE))
        if self.fault == "future":
            return replace(truth, fetched_at=now + timedelta(seconds=600))
        if self.fault == "truncated" and self.left_out is not None:
            return replace(truth, pods=tuple(p for p in truth.pods if p.uid != self.left_out))
        return truth

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        if self.fault == "get_down":
            raise SourceError("chaos: the live GET fails")
        for p in self.truth().pods:
            if p.namespace == namespace and p.name == name:
                return p
        return None


@dataclass
class Soak:
    node: SandboxNode
    rng: random.Random
    state: Path
    counts: Counter[str] = field(default_factory=Counter)
    false_reclaims: list[dict[str, Any]] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    lifecycles: int = 0
    point: int = 0
    previous: tuple[float, list[dict[str, Any]]] | None = None
    """The previous round's API view as `kubectl get pods -o json` items, and when it was taken."""

    def live(self) -> list[SandboxPod]:
        return [p for p in self.node.api_pods() if p.phase in ("Running", "Pending")]

    def snapshot_held(self) -> dict[str, dict[str, Any]]:
        rules = self.node.node_exec("iptables-save").splitlines()
        out = {p.uid: held(self.node, p, rules) for p in self.live()}
        # A pod that still exists keeps its directory, terminal or not.
        out.update({f"dir:{p.uid}": {"pod_dir": p.pod_dir.is_dir()}
                    for p in self.node.api_pods() if p.phase not in ("Running", "Pending")})
        return out

    # -- lifecycles ------------------------------------------------------------------------------------

    def churn(self) -> None:
        names_in_use = {p.name for p in self.node.api_pods()}
        for _ in range(self.rng.randint(1, 3)):
            free = [n for n in NAMES if n not in names_in_use]
            if not free or len(self.live()) >= 16:
                break
            name = self.rng.choice(free)
            names_in_use.add(name)
            phase = "Pending" if self.rng.random() < 0.1 else "Running"
            try:
                self.node.add_pod(name, phase=phase, host_port=self.rng.choice([None, None, 20000 + len(NAMES)
                                                                               + self.rng.randint(0, 5000)]))
                self.counts["created"] += 1
            except SandboxError as e:
                self.counts["add_failed"] += 1
                self.counts[f"add_failed:{str(e)[:60]}"] += 1
        mortal = [p for p in self.node.api_pods() if p.name != "survivor"]
        for pod in self.rng.sample(mortal, k=min(self.rng.randint(0, 3), len(mortal))):
            how = self.rng.choice(TEARDOWNS)
            if how == "terminate" and pod.phase in ("Succeeded", "Failed"):
                how = "delete_without_cni_del"
            try:
                getattr(self.node, how)(pod)
            except SandboxError as e:
                self.counts[f"teardown_failed:{how}"] += 1
                self.counts[f"teardown_error:{str(e)[:60]}"] += 1
            self.counts[f"teardown:{how}"] += 1
            self.lifecycles += 1

    # -- one cycle under one fault ----------------------------------------------------------------------

    def cycle(self, source: ChaosSource, settings: EngineSettings) -> None:
        fault = self.rng.choices(list(FAULTS), weights=list(FAULTS.values()))[0]
        self.counts[f"fault:{fault}"] += 1
        live = self.live()
        source.fault = fault
        source.left_out = self.rng.choice(live).uid if live and fault == "truncated" else None
        before = self.snapshot_held()
        if fault.startswith("sigkill") or fault == "stalled_snapshot":
            self.process(fault)
        else:
            try:
                with Ledger(self.state / "ledger.db") as ledger:
                    Engine(roots=self.node.roots, source=source, ledger=ledger,
                           executor=HostExecutor(self.node.roots), settings=settings).cycle()
            except Exception:
                self.crashes.append(f"{fault}: {traceback.format_exc(limit=3)[-600:]}")
        after = self.snapshot_held()
        for uid, was in before.items():
            now = after.get(uid)
            if now != was:
                diff = {k: (was.get(k), (now or {}).get(k)) for k in was if (now or {}).get(k) != was.get(k)}
                self.false_reclaims.append({"fault": fault, "pod": uid, "changed": sorted(diff)})
        source.stalled = source.truth()  # the next "stalled" round sees this round's photo
        self.previous = (time.time(), [self.node.pod_record(p) for p in self.node.api_pods()])

    def process(self, fault: str) -> None:
        snapshot = self.node.write_snapshot(self.node.root / "pods.json")
        if fault == "stalled_snapshot" and self.previous is not None:
            taken, items = self.previous
            snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
            os.utime(snapshot, (taken, taken))
        r = self.node.roots
        argv = [sys.executable, "-m", "nodegc", "clean", "--apply", "--pods-from", str(snapshot), "--min-age", "0",
                "--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir), "--netns-dir",
                str(r.netns_dir), "--net-ns", str(r.net_ns), "--cni-bin-dir", "/usr/lib/cni", "--state-dir",
                str(self.state), "--static-pod-dir", str(r.static_pod_dir), "--pod-log-dir", str(r.pod_log_dir),
                "-o", "json"]
        env = dict(os.environ)
        if fault == "sigkill_point":
            env["NODEGC_FAULT"] = FAULT_POINTS[self.point % len(FAULT_POINTS)]
            self.point += 1
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        killed = False
        if fault == "sigkill_random":
            try:
                proc.wait(timeout=self.rng.uniform(0.05, 1.5))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                killed = True
        try:
            _, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            self.crashes.append(f"{fault}: clean did not finish in 300 s")
            return
        code = proc.returncode
        self.counts[f"exit:{code}"] += 1
        if code == -signal.SIGKILL and (killed or fault == "sigkill_point"):
            return
        if code not in (0, 3, 4, 5):
            self.crashes.append(f"{fault}: exit {code}: {err.decode(errors='replace')[-600:]}")

    # -- convergence ----------------------------------------------------------------------------------

    def residue(self, source: ChaosSource) -> list[str]:
        findings = correlate(scan_node(self.node.roots), source.truth(), now=datetime.now(UTC),
                             policy=CorrelationPolicy(min_age_seconds=0))
        return [f"{f.cls.value} {f.kind.value} {f.id}" for f in findings if f.cls.is_residue or
                f.cls.value in ("unknown", "conflict")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lifecycles", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--subnet", default="10.244.0.0/26", help="small, so that IPs are reused")
    args = parser.parse_args()
    configure_logging(level="error", json_output=True)
    started = time.monotonic()
    with SandboxNode.create(subnet=args.subnet) as node:
        soak = Soak(node=node, rng=random.Random(args.seed), state=node.root / "state")  # noqa: S311 - a replayable soak
        source = ChaosSource(node)
        settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                                  correlation=CorrelationPolicy(min_age_seconds=0),
                                  blast_radius=BlastRadius(max_share=1.0), max_desired_age_seconds=MAX_DESIRED_AGE,
                                  reclaims_per_minute=60_000, reclaim_burst=10_000)
        survivor = node.add_pod("survivor", host_port=19999)
        rounds = 0
        while soak.lifecycles < args.lifecycles:
            soak.churn()
            soak.cycle(source, settings)
            rounds += 1
        churn_seconds = time.monotonic() - started
        for pod in list(node.api_pods()):
            if pod.uid != survivor.uid:
                node.delete_without_cni_del(pod)
        source.fault = "normal"
        convergence_cycles = 0
        left = soak.residue(source)
        while left and convergence_cycles < 10:
            before = soak.snapshot_held()
            with Ledger(soak.state / "ledger.db") as ledger:
                report = Engine(roots=node.roots, source=source, ledger=ledger, executor=HostExecutor(node.roots),
                                settings=settings).cycle()
            soak.counts.update(f"convergence_blocked:{b[:80]}" for b in report.blocked)
            if soak.snapshot_held() != before:
                soak.false_reclaims.append({"fault": "convergence", "pod": survivor.uid, "changed": ["?"]})
            convergence_cycles += 1
            left = soak.residue(source)
        result = {
            "lifecycles": soak.lifecycles,
            "rounds": rounds,
            "seed": args.seed,
            "false_reclaims": len(soak.false_reclaims),
            "false_reclaim_examples": soak.false_reclaims[:5],
            "crashes": len(soak.crashes),
            "crash_examples": soak.crashes[:3],
            "residue_after_convergence": len(left),
            "residue_examples": left[:10],
            "convergence_cycles": convergence_cycles,
            "survivor_intact": bool(soak.snapshot_held().get(survivor.uid, {}).get("eth0", "").startswith("eth0")),
            "counts": dict(sorted(soak.counts.items())),
            "seconds": round(time.monotonic() - started, 1),
            "churn_seconds": round(churn_seconds, 1),
        }
    print(json.dumps(result, indent=2))
    return 0 if not soak.false_reclaims and not soak.crashes and not left else 1


if __name__ == "__main__":
    sys.exit(main())
