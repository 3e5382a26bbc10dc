"""API load: the agents' pod reflector (one watch per node) vs a list every scan, and the controller's
watch-backed caches vs listing pods and EndpointSlices every pass, with both projected to a fleet.

Both approaches run at the same time, each against its own HTTP-level fake API server
(tests/api/fakeapi.py), with the same pods (`--pods` per node) and the same churn (pods replaced at
`--churn-per-hour` per node). The servers count the requests and response bytes actually served.

- list_every_scan: what the agent did before the reflector: `KubeSource.fetch()` once per cycle
  (`--interval`, 30 s), and once more at terminate in a cycle that follows a change on the node.
- reflector: `PodReflector` with its production settings (resync 300 s, watch timeout 290 s, idle
  timeout 150 s) and an API server that sends a bookmark every 60 s (as kube-apiserver does); a cycle
  every `--interval` reads the view (no request), and a cycle that follows a change on the node (its
  residue is something to act on) takes the proof the engine takes before marking or terminating
  (`proven()`, max age 120 s: a node Lease GET unless a younger proof or a pending Lease stands), after
  asking for a list when its view would be older than that at the next cycle (`refresh()`, as the engine
  does; `refreshed` counts them).
- reflector_residue_every_cycle: the same, with something to act on at every cycle (a node whose residue
  stays): the upper bound of the proof's Lease GETs.
Live GETs of the terminate phase are the same for all and are not counted.

The controller part runs the same way on a cluster of `--controller-nodes` nodes of `--pods` pods, one
EndpointSlice (managed by the endpointslice controller) per `--pods-per-service` pods, and the same churn
(each replaced pod also changes its Service's slice):
- controller_list_every_pass: `Controller` with `cache=False`: a list of slices and one of pods every
  `--controller-interval` (30 s);
- controller_watch_cache: `Controller` with its `ClusterCache` (resync 1800 s, watch timeout 290 s, idle
  timeout 150 s, bookmarks every 60 s), all scaled by `--time-scale`.
Both run in dry-run with a stand-in leader (no Lease, no Event writes). Only requests and bytes for pods
and EndpointSlices are counted. The figures at `--fleet-nodes` (5,000) are projected from the measured
run: bytes grow with the number of objects (lists, relists) and of changes (watch events), both linear in
the number of nodes; requests are the measured list operations times the pages one list needs at that
size (500 objects a page) plus the measured watch requests, which do not depend on the size.

Time is compressed by `--time-scale`: every period above (interval, resync, watch timeout, idle
timeout, bookmark interval, churn period) is divided by it, so `--simulated-seconds` of cluster time
take simulated/scale seconds of wall time; counts are then reported per simulated hour. The default
scale 58 makes the 290 s watch timeout exactly 5 s (the API's timeoutSeconds is an integer).

    cd /work/main && .venv/bin/python bench/api_load.py [--simulated-seconds 1800] [--nodes 2]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `tests` lives at the repo root

from nodegc.api.client import make_client
from nodegc.controller import Controller, ControllerSettings
from nodegc.desired.kube import KubeSource
from nodegc.desired.reflector import PodReflector
from nodegc.desired.source import SourceError
from nodegc.kube.cache import RESYNC_SECONDS, ClusterCache
from nodegc.kube.endpointslices import RawEndpointSlice, SweepOptions
from nodegc.kube.leases import LeaseConfig
from nodegc.model.endpoints import ENDPOINTSLICE_CONTROLLER, MANAGED_BY_LABEL, SERVICE_NAME_LABEL
from nodegc.observe.logs import configure_logging
from tests.api.fakeapi import FakeKubeAPI, RecordedRequest

PODS_PATH = "/api/v1/pods"
SLICES_PATH = "/apis/discovery.k8s.io/v1/endpointslices"
PAGE = 500


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
        self.changed_for_proof: dict[str, threading.Event] = {node: threading.Event() for node in nodes}
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
        self.changed_for_proof[node].set()


def list_every_scan(
    source: KubeSource, changed: threading.Event, interval: float, stop: threading.Event
) -> None:
    while not stop.wait(interval):
        source.fetch()  # detect
        if changed.is_set():  # something to terminate: the engine took a fresh desired state
            changed.clear()
            source.fetch()


def agent_cycles(ref: PodReflector, changed: threading.Event | None, *, interval: float, max_age: float,
                 stop: threading.Event, outcomes: Counter[str]) -> None:
    """The engine's reads of the watch: the view every cycle; its proof in a cycle with something to act
    on (one following a change, or every cycle when `changed` is None)."""
    while not stop.wait(interval):
        view = ref.fetch()
        if changed is not None and not changed.is_set():
            continue
        if changed is not None:
            changed.clear()
        # As the engine does (`Engine._refresh_ahead`): a view too old for the next cycle asks for a list.
        if (datetime.now(UTC) - view.fetched_at).total_seconds() + interval > max_age:
            ref.refresh("bench: the view would be too old at the next cycle")
            outcomes["refreshed"] += 1
        try:
            ref.proven(max_age_seconds=max_age)
            outcomes["proven"] += 1
        except SourceError:
            outcomes["refused"] += 1


def per_hour(requests: list[RecordedRequest], nodes: int, simulated: float) -> dict[str, float]:
    verbs: Counter[str] = Counter()
    for request in requests:
        if "/namespaces/kube-node-lease/leases/" in request.path:
            verbs["lease"] += 1  # the proof read right before each list, and the watch's proofs for acting
            continue
        if request.path != PODS_PATH:
            continue
        verbs["watch" if request.is_watch else "list"] += 1
    scale = 3600.0 / simulated / nodes
    result = {verb: round(count * scale, 1) for verb, count in sorted(verbs.items())}
    result["total"] = round(sum(verbs.values()) * scale, 1)
    return result


class ServiceCluster:
    """Pods on `nodes`, grouped into Services of about `per_service` pods, one EndpointSlice each (as the
    endpointslice controller writes them); a replaced pod also changes its Service's slice."""

    def __init__(self, servers: list[FakeKubeAPI], nodes: list[str], pods: int, per_service: int) -> None:
        self.servers = servers
        self.live: dict[str, list[tuple[str, str]]] = {node: [] for node in nodes}
        self.serial = 0
        self.service_of: dict[tuple[str, str], str] = {}
        self.endpoints: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        created = 0
        for node in nodes:
            for i in range(pods):
                namespace = f"ns{created % 5}"
                service = f"svc{created // (per_service * 5)}"
                self.service_of[(namespace, f"{node}-p{i}")] = service
                self._create(node, namespace, f"{node}-p{i}", write_slice=False)
                created += 1
        for (namespace, service), endpoints in self.endpoints.items():
            for server in servers:
                server.add("endpointslices", self._slice(namespace, service, endpoints))

    @staticmethod
    def _slice(namespace: str, service: str, endpoints: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return {
            "metadata": {"name": f"{service}-x7k2q", "namespace": namespace,
                         "labels": {SERVICE_NAME_LABEL: service, MANAGED_BY_LABEL: ENDPOINTSLICE_CONTROLLER}},
            "addressType": "IPv4",
            "endpoints": list(endpoints.values()),
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }

    def _create(self, node: str, namespace: str, name: str, *, write_slice: bool = True) -> None:
        self.serial += 1
        obj = pod(name, node, self.serial)
        obj["metadata"]["namespace"] = namespace
        for server in self.servers:
            server.add("pods", obj)
        self.live[node].append((namespace, name))
        service = self.service_of[(namespace, name)]
        endpoints = self.endpoints.setdefault((namespace, service), {})
        endpoints[name] = {
            "addresses": [obj["status"]["podIP"]], "conditions": {"ready": True}, "nodeName": node,
            "targetRef": {"kind": "Pod", "namespace": namespace, "name": name, "uid": obj["metadata"]["uid"]},
        }
        if write_slice:
            for server in self.servers:
                server.update("endpointslices", namespace, f"{service}-x7k2q",
                              {"endpoints": list(endpoints.values())})

    def replace_one(self, node: str) -> None:
        namespace, name = self.live[node].pop(0)
        for server in self.servers:
            server.delete("pods", namespace, name)
        self._create(node, namespace, name)


class AlwaysLeader:
    """A stand-in for the Lease: the bench measures the controller's reads, not leader election."""

    observed_holder = "bench"

    def is_leader(self) -> bool:
        return True

    def try_acquire_or_renew(self) -> bool:
        return True

    def start(self) -> None:
        pass

    def stop(self, *, release: bool = True) -> None:
        pass


def controller_rates(requests: list[RecordedRequest], bytes_by_resource: Counter[str], *, simulated: float,
                     nodes: int, fleet: int, pods: int, per_service: int) -> dict[str, Any]:
    """Measured per hour on the bench cluster, and projected to `fleet` nodes (see the module docstring)."""
    hour = 3600.0 / simulated
    counts: Counter[str] = Counter()
    for r in requests:
        resource = {PODS_PATH: "pods", SLICES_PATH: "endpointslices"}.get(r.path)
        if resource is None:
            continue
        if r.is_watch:
            counts[f"{resource}_watch"] += 1
        else:
            counts[f"{resource}_list_pages"] += 1
            if not r.query.get("continue"):
                counts[f"{resource}_list_ops"] += 1
    measured = {key: round(value * hour, 1) for key, value in sorted(counts.items())}
    measured["total_requests"] = round(sum(v for k, v in counts.items() if not k.endswith("_ops")) * hour, 1)
    measured_bytes = (bytes_by_resource["pods"] + bytes_by_resource["endpointslices"]) * hour
    fleet_pods = fleet * pods
    pages = {"pods": math.ceil(fleet_pods / PAGE), "endpointslices": math.ceil(fleet_pods / per_service / PAGE)}
    projected_requests = sum(counts[f"{res}_list_ops"] * hour * pages[res] + counts[f"{res}_watch"] * hour
                             for res in pages)
    return {
        "measured_per_hour": {**measured, "response_bytes": round(measured_bytes)},
        f"projected_per_hour_at_{fleet}_nodes": {
            "requests": round(projected_requests),
            "response_bytes": round(measured_bytes * fleet / nodes),
            "pages_per_list": pages,
        },
    }


def run_controllers(args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    scale = args.time_scale
    nodes = [f"cnode-{i}" for i in range(args.controller_nodes)]
    with FakeKubeAPI(bookmark_interval=60.0 / scale) as cache_api, FakeKubeAPI() as list_api:
        cluster = ServiceCluster([cache_api, list_api], nodes, args.pods, args.pods_per_service)
        lease = LeaseConfig(namespace="nodegc-system", name="nodegc-controller", identity="bench")
        clients = [make_client(api.write_kubeconfig(Path(tmp) / f"controller-{i}"))
                   for i, api in enumerate((cache_api, list_api))]
        settings = ControllerSettings(lease=lease, interval=args.controller_interval / scale,
                                      sweep=SweepOptions(dry_run=True))
        cache = ClusterCache(clients[0], RawEndpointSlice, max_age_seconds=120.0 / scale,
                             resync_seconds=RESYNC_SECONDS / scale,
                             watch_timeout_seconds=max(1, round(290.0 / scale)),
                             idle_timeout_seconds=150.0 / scale)
        cached = Controller(clients[0], settings, elector=AlwaysLeader(), cache=cache)  # type: ignore[arg-type]
        listing = Controller(clients[1], ControllerSettings(lease=lease, interval=settings.interval,
                                                            sweep=settings.sweep, cache=False),
                             elector=AlwaysLeader())  # type: ignore[arg-type]
        stop = threading.Event()
        threads = [threading.Thread(target=c.run, args=(stop,), daemon=True) for c in (cached, listing)]
        for thread in threads:
            thread.start()
        if not cache_api.wait_for(lambda: cache.pods.synced and cache.slices.synced, timeout=30):
            raise SystemExit("the controller caches did not sync")
        time.sleep(2 * settings.interval)
        cache_api.clear_requests()  # steady state only: the initial lists are not counted
        list_api.clear_requests()
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
        cache_requests, list_requests = list(cache_api.requests), list(list_api.requests)
        cache_bytes, list_bytes = Counter(cache_api.bytes_by_resource), Counter(list_api.bytes_by_resource)
        stop.set()
        for thread in threads:
            thread.join(30)
        cache_stats = cache.stats()
        for client in clients:
            client.close()
    common = {"simulated": args.simulated_seconds, "nodes": args.controller_nodes, "fleet": args.fleet_nodes,
              "pods": args.pods, "per_service": args.pods_per_service}
    cached_rates = controller_rates(cache_requests, cache_bytes, **common)
    listing_rates = controller_rates(list_requests, list_bytes, **common)
    key = f"projected_per_hour_at_{args.fleet_nodes}_nodes"
    return {
        "cluster": {"nodes": args.controller_nodes, "pods": args.controller_nodes * args.pods,
                    "endpointslices": len(cluster.endpoints), "pass_interval_seconds": args.controller_interval},
        "controller_watch_cache": {**cached_rates, "cache_counters": cache_stats},
        "controller_list_every_pass": listing_rates,
        f"request_ratio_at_{args.fleet_nodes}_nodes_list_over_cache": (
            round(listing_rates[key]["requests"] / cached_rates[key]["requests"], 1)
            if cached_rates[key]["requests"] else None),
        f"byte_ratio_at_{args.fleet_nodes}_nodes_list_over_cache": (
            round(listing_rates[key]["response_bytes"] / cached_rates[key]["response_bytes"], 1)
            if cached_rates[key]["response_bytes"] else None),
    }


def run_agents(args: argparse.Namespace) -> dict[str, Any]:  # noqa: PLR0915 - one run, three approaches side by side
    scale = args.time_scale
    nodes = [f"node-{i}" for i in range(args.nodes)]

    with (
        FakeKubeAPI(bookmark_interval=60.0 / scale, kubelets=nodes) as reflector_api,
        FakeKubeAPI(bookmark_interval=60.0 / scale, kubelets=nodes) as residue_api,
        FakeKubeAPI() as polling_api,
        tempfile.TemporaryDirectory() as tmp,
    ):
        cluster = Cluster([reflector_api, residue_api, polling_api], nodes, args.pods)
        reflectors, residue_reflectors = [
            [
                PodReflector(
                    node,
                    kubeconfig=server.write_kubeconfig(Path(tmp) / f"reflector-{i}"),
                    resync_seconds=300.0 / scale,
                    watch_timeout_seconds=max(1, round(290.0 / scale)),
                    idle_timeout_seconds=150.0 / scale,
                )
                for node in nodes
            ]
            for i, server in enumerate((reflector_api, residue_api))
        ]
        polling_config = polling_api.write_kubeconfig(Path(tmp) / "polling")
        sources = [KubeSource(node, kubeconfig=polling_config, prove_current=False) for node in nodes]
        for ref in (*reflectors, *residue_reflectors):
            ref.start()
        for ref in (*reflectors, *residue_reflectors):
            if not ref.wait_synced(10):
                raise SystemExit("a reflector did not sync")
        time.sleep(0.2)
        reflector_api.clear_requests()  # steady state only: the initial list+watch is not counted
        residue_api.clear_requests()
        polling_api.clear_requests()
        before = [ref.stats() for ref in (*reflectors, *residue_reflectors)]
        outcomes: dict[str, Counter[str]] = {"reflector": Counter(), "reflector_residue_every_cycle": Counter()}

        stop = threading.Event()
        pollers = [
            threading.Thread(
                target=list_every_scan,
                args=(src, cluster.changed[src.node], args.interval / scale, stop),
                daemon=True,
            )
            for src in sources
        ]
        pollers += [
            threading.Thread(target=agent_cycles, args=(ref, cluster.changed_for_proof[ref.node]), daemon=True,
                             kwargs={"interval": args.interval / scale, "max_age": 120.0 / scale, "stop": stop,
                                     "outcomes": outcomes["reflector"]})
            for ref in reflectors
        ]
        pollers += [
            threading.Thread(target=agent_cycles, args=(ref, None), daemon=True,
                             kwargs={"interval": args.interval / scale, "max_age": 120.0 / scale, "stop": stop,
                                     "outcomes": outcomes["reflector_residue_every_cycle"]})
            for ref in residue_reflectors
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
        residue_requests = list(residue_api.requests)
        polling_requests = list(polling_api.requests)
        reflector_bytes, polling_bytes = reflector_api.bytes_sent, polling_api.bytes_sent
        residue_bytes = residue_api.bytes_sent
        stats = [Counter(ref.stats()) - Counter(b) for ref, b in zip(reflectors, before[:len(reflectors)], strict=True)]
        residue_stats = [Counter(ref.stats()) - Counter(b)
                         for ref, b in zip(residue_reflectors, before[len(reflectors):], strict=True)]
        views_ok = reflector_api.wait_for(
            lambda: all(
                sorted((p.namespace, p.name) for p in ref.fetch().pods) == sorted(cluster.live[ref.node])
                for ref in reflectors
            ),
            timeout=5.0,
        )
        for ref in (*reflectors, *residue_reflectors):
            ref.stop()
        for thread in pollers:
            thread.join(5)
        for src in sources:
            src.close()
        elapsed = time.monotonic() - started

    simulated = args.simulated_seconds
    byte_scale = 3600.0 / simulated / args.nodes
    reflector_rate = per_hour(reflector_requests, args.nodes, simulated)
    residue_rate = per_hour(residue_requests, args.nodes, simulated)
    polling_rate = per_hour(polling_requests, args.nodes, simulated)

    def proofs(counters: list[Counter[str]], outcome: Counter[str]) -> dict[str, float]:
        total = sum(counters, Counter())
        return {"cycles_with_something_to_act_on": round((outcome["proven"] + outcome["refused"]) * byte_scale, 1),
                "refused": round(outcome["refused"] * byte_scale, 1),
                "refreshed": round(outcome["refreshed"] * byte_scale, 1),
                "lease_gets": round(total["proof_witness_reads"] * byte_scale, 1)}

    report = {
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
            "proofs_per_node_per_hour": proofs(stats, outcomes["reflector"]),
            "reflector_counters_total": dict(sum(stats, Counter())),
            "final_view_matches_cluster": views_ok,
        },
        "reflector_residue_every_cycle": {
            "requests_per_node_per_hour": residue_rate,
            "response_bytes_per_node_per_hour": round(residue_bytes * byte_scale),
            "proofs_per_node_per_hour": proofs(residue_stats, outcomes["reflector_residue_every_cycle"]),
        },
        "list_every_scan": {
            "requests_per_node_per_hour": polling_rate,
            "response_bytes_per_node_per_hour": round(polling_bytes * byte_scale),
        },
        "request_ratio_list_every_scan_over_reflector": (
            round(polling_rate["total"] / reflector_rate["total"], 1) if reflector_rate["total"] else None
        ),
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=110, help="pods per node")
    parser.add_argument("--nodes", type=int, default=2, help="nodes per approach")
    parser.add_argument("--churn-per-hour", type=float, default=60.0, help="pods replaced per node per hour")
    parser.add_argument("--interval", type=float, default=30.0, help="scan interval (s, simulated)")
    parser.add_argument("--simulated-seconds", type=float, default=1800.0)
    parser.add_argument("--time-scale", type=float, default=58.0)
    parser.add_argument("--controller-nodes", type=int, default=10, help="nodes of the controller's bench cluster")
    parser.add_argument("--pods-per-service", type=int, default=10, help="pods behind one EndpointSlice")
    parser.add_argument("--controller-interval", type=float, default=30.0, help="controller pass interval (s)")
    parser.add_argument("--fleet-nodes", type=int, default=5000, help="fleet size the figures are projected to")
    parser.add_argument("--skip-agents", action="store_true", help="controller part only")
    args = parser.parse_args()
    configure_logging("error", json_output=True)  # the controllers' dry-run reports of churn are noise here
    report: dict[str, Any] = {"benchmark": "api_load"}
    if not args.skip_agents:
        report.update(run_agents(args))
        fleet = args.fleet_nodes
        report[f"agents_per_hour_at_{fleet}_nodes"] = {
            approach: {
                "requests": round(report[approach]["requests_per_node_per_hour"]["total"] * fleet),
                "response_bytes": round(report[approach]["response_bytes_per_node_per_hour"] * fleet),
            }
            for approach in ("reflector", "reflector_residue_every_cycle", "list_every_scan")
        }
    with tempfile.TemporaryDirectory() as tmp:
        report["controller"] = run_controllers(args, tmp)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
