"""API load per node: the pod reflector (one watch per node) vs a list every scan.

Both approaches run at the same time, each against its own HTTP-level fake API server
(tests/api/fakeapi.py), with the same pods (`--pods` per node) and the same churn (pods replaced at
`--churn-per-hour` per node). The servers count the requests and response bytes actually served.

- list_every_scan: what the agent did before the reflector: `KubeSource.fetch()` once per cycle
  (`--interval`, 30 s), and once more at terminate in a cycle that follows a change on the node.
- reflector: `PodReflector` with its production settings (resync 300 s, watch timeout 290 s, idle
  timeout 150 s) and an API server that sends a bookmark every 60 s (as kube-apiserver does).
Live GETs of the terminate phase are the same for both and are not counted.

Time is compressed by `--time-scale`: every period above (interval, resync, watch timeout, idle
timeout, bookmark interval, churn period) is divided by it, so `--simulated-seconds` of cluster time
take simulated/scale seconds of wall time; counts are then reported per simulated hour. The default
scale 58 makes the 290 s watch timeout exactly 5 s (the API's timeoutSeconds is an integer).

    cd /work/main && .venv/bin/python bench/api_load.py [--simulated-seconds 1800] [--nodes 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `tests` lives at the repo root

from nodegc.desired.kube import KubeSource
from nodegc.desired.reflector import PodReflector
from nodegc.observe.logs import configure_logging
from tests.api.fakeapi import FakeKubeAPI, RecordedRequest

PODS_PATH = "/api/v1/pods"


def pod(name: str, node: str, serial: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": f"ns{serial % 5}",
            "uid": f"uid-{node}-{name}-{serial}",
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {"app": name.rsplit("-", 1)[0].split("-", 2)[-1]},
        },
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.example/app:1.2.3"}]},
        "status": {"phase": "Running", "podIP": f"10.{serial // 250 % 250}.{serial % 250}.2"},
    }


class Cluster:
    """The same pods and churn on two servers, so each approach sees identical changes."""

    def __init__(self, servers: list[FakeKubeAPI], nodes: list[str], pods: int) -> None:
        self.servers = servers
        self.nodes = nodes
        self.live: dict[str, list[tuple[str, str]]] = {node: [] for node in nodes}
        self.serial = 0
        self.changed: dict[str, threading.Event] = {node: threading.Event() for node in nodes}
        for node in nodes:
            for i in range(pods):
                self._create(node, f"{node}-app{i % 20}-{i}")

    def _create(self, node: str, name: str) -> None:
        self.serial += 1
        obj = pod(name, node, self.serial)
        for server in self.servers:
            server.add("pods", obj)
        self.live[node].append((obj["metadata"]["namespace"], name))

    def replace_one(self, node: str) -> None:
        namespace, name = self.live[node].pop(0)
        for server in self.servers:
            server.delete("pods", namespace, name)
        self._create(node, name)
        self.changed[node].set()


def list_every_scan(
    source: KubeSource, changed: threading.Event, interval: float, stop: threading.Event
) -> None:
    while not stop.wait(interval):
        source.fetch()  # detect
        if changed.is_set():  # something to terminate: the engine took a fresh desired state
            changed.clear()
            source.fetch()


def per_hour(requests: list[RecordedRequest], nodes: int, simulated: float) -> dict[str, float]:
    verbs: Counter[str] = Counter()
    for request in requests:
        if request.path != PODS_PATH:
            continue
        verbs["watch" if request.is_watch else "list"] += 1
    scale = 3600.0 / simulated / nodes
    result = {verb: round(count * scale, 1) for verb, count in sorted(verbs.items())}
    result["total"] = round(sum(verbs.values()) * scale, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=110, help="pods per node")
    parser.add_argument("--nodes", type=int, default=2, help="nodes per approach")
    parser.add_argument("--churn-per-hour", type=float, default=60.0, help="pods replaced per node per hour")
    parser.add_argument("--interval", type=float, default=30.0, help="scan interval (s, simulated)")
    parser.add_argument("--simulated-seconds", type=float, default=1800.0)
    parser.add_argument("--time-scale", type=float, default=58.0)
    args = parser.parse_args()
    configure_logging("warning", json_output=True)
    scale = args.time_scale
    nodes = [f"node-{i}" for i in range(args.nodes)]

    with (
        FakeKubeAPI(bookmark_interval=60.0 / scale) as reflector_api,
        FakeKubeAPI() as polling_api,
        tempfile.TemporaryDirectory() as tmp,
    ):
        cluster = Cluster([reflector_api, polling_api], nodes, args.pods)
        reflectors = [
            PodReflector(
                node,
                kubeconfig=reflector_api.write_kubeconfig(Path(tmp) / "reflector"),
                resync_seconds=300.0 / scale,
                watch_timeout_seconds=max(1, round(290.0 / scale)),
                idle_timeout_seconds=150.0 / scale,
            )
            for node in nodes
        ]
        polling_config = polling_api.write_kubeconfig(Path(tmp) / "polling")
        sources = [KubeSource(node, kubeconfig=polling_config, prove_current=False) for node in nodes]
        for ref in reflectors:
            ref.start()
        for ref in reflectors:
            if not ref.wait_synced(10):
                raise SystemExit("a reflector did not sync")
        time.sleep(0.2)
        reflector_api.clear_requests()  # steady state only: the initial list+watch is not counted
        polling_api.clear_requests()

        stop = threading.Event()
        pollers = [
            threading.Thread(
                target=list_every_scan,
                args=(src, cluster.changed[src.node], args.interval / scale, stop),
                daemon=True,
            )
            for src in sources
        ]
        for thread in pollers:
            thread.start()
        wall = args.simulated_seconds / scale
        churn_period = 3600.0 / args.churn_per_hour / scale if args.churn_per_hour > 0 else wall + 1
        started = time.monotonic()
        next_churn = started + churn_period
        while (now := time.monotonic()) < started + wall:
            if now >= next_churn:
                for node in nodes:
                    cluster.replace_one(node)
                next_churn += churn_period
            time.sleep(min(0.01, max(0.0, next_churn - now)))
        stop.set()
        reflector_requests = list(reflector_api.requests)
        polling_requests = list(polling_api.requests)
        reflector_bytes, polling_bytes = reflector_api.bytes_sent, polling_api.bytes_sent
        stats = [ref.stats() for ref in reflectors]
        views_ok = reflector_api.wait_for(
            lambda: all(
                sorted((p.namespace, p.name) for p in ref.fetch().pods) == sorted(cluster.live[ref.node])
                for ref in reflectors
            ),
            timeout=5.0,
        )
        for ref in reflectors:
            ref.stop()
        for thread in pollers:
            thread.join(5)
        for src in sources:
            src.close()
        elapsed = time.monotonic() - started

    simulated = args.simulated_seconds
    byte_scale = 3600.0 / simulated / args.nodes
    reflector_rate = per_hour(reflector_requests, args.nodes, simulated)
    polling_rate = per_hour(polling_requests, args.nodes, simulated)
    report = {
        "benchmark": "api_load",
        "pods_per_node": args.pods,
        "nodes_per_approach": args.nodes,
        "churn_pods_replaced_per_node_per_hour": args.churn_per_hour,
        "scan_interval_seconds": args.interval,
        "simulated_seconds": simulated,
        "time_scale": scale,
        "wall_seconds": round(elapsed, 2),
        "scaling": (
            "every period (scan interval, resync 300 s, watch timeout 290 s, idle timeout 150 s, bookmark "
            "every 60 s, churn period) divided by time_scale; requests and bytes counted by the fake API "
            "servers over simulated_seconds/time_scale wall seconds and reported per simulated hour per "
            "node; the initial list+watch is excluded (steady state); terminate-phase live GETs are excluded"
        ),
        "reflector": {
            "requests_per_node_per_hour": reflector_rate,
            "response_bytes_per_node_per_hour": round(reflector_bytes * byte_scale),
            "reflector_counters_total": dict(sum((Counter(s) for s in stats), Counter())),
            "final_view_matches_cluster": views_ok,
        },
        "list_every_scan": {
            "requests_per_node_per_hour": polling_rate,
            "response_bytes_per_node_per_hour": round(polling_bytes * byte_scale),
        },
        "request_ratio_list_every_scan_over_reflector": (
            round(polling_rate["total"] / reflector_rate["total"], 1) if reflector_rate["total"] else None
        ),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
