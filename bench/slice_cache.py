"""Memory the controller's watch-backed caches hold: `ClusterCache` synced against the HTTP-level test API
server (tests/api/fakeapi.py), serving EndpointSlices and pods as a cluster writes them (each endpoint with
its conditions, zone, hints, nodeName and targetRef; each slice with labels, annotations, an owner,
managedFields and ports; each pod with what a kubelet reports).

Each measurement runs in a fresh process: the server is filled, the cache started and synced, and then
`held_mib` is what Python's allocator holds beyond what it held before the cache started (tracemalloc,
after a collection), `slices_mib` the part the slice cache's entries hold alone (their objects walked),
and `rss_mib` the process's resident memory. `--against SRC` measures another tree's `nodegc` (its
`src` dir) the same way, interleaved with this one, `--repeat` times each; medians are reported. Prints
JSON:

    .venv/bin/python bench/slice_cache.py --slices 500 --endpoints 100 --against /tmp/old/src
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]


def _slice(i: int, endpoints: int) -> dict[str, Any]:
    namespace = f"ns{i % 20}"
    eps = []
    for j in range(endpoints):
        name = f"web-{i}-{j}"
        eps.append({
            "addresses": [f"10.{i // 250}.{i % 250}.{j}"],
            "conditions": {"ready": True, "serving": True, "terminating": False},
            "hostname": name, "nodeName": f"node-{(i * endpoints + j) % 5000}", "zone": f"eu-west-1{'abc'[j % 3]}",
            "hints": {"forZones": [{"name": f"eu-west-1{'abc'[j % 3]}"}]},
            "targetRef": {"kind": "Pod", "namespace": namespace, "name": name, "uid": f"{i:08x}-{j:04x}-uid"},
        })
    return {
        "metadata": {
            "name": f"svc{i}-x7k2q", "namespace": namespace, "generateName": f"svc{i}-", "generation": 7,
            "labels": {"kubernetes.io/service-name": f"svc{i}",
                       "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                       "app.kubernetes.io/name": f"svc{i}"},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-12-01T10:00:00Z"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": f"svc{i}", "uid": f"svc-{i}",
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                               "apiVersion": "discovery.k8s.io/v1", "time": "2026-12-01T10:00:00Z",
                               "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:addressType": {}, "f:endpoints": {}, "f:ports": {},
                                            "f:metadata": {"f:labels": {".": {}}}}}],
        },
        "addressType": "IPv4",
        "endpoints": eps,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def _deep_size(obj: Any, seen: set[int]) -> int:
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        size += sum(_deep_size(x, seen) for x in obj)
    elif hasattr(obj, "__slots__") or hasattr(obj, "__dict__"):
        for name in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, name):
                size += _deep_size(getattr(obj, name), seen)
        if hasattr(obj, "__dict__"):
            size += _deep_size(vars(obj), seen)
    return size


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(slices: int, endpoints: int) -> dict[str, Any]:
    """One measurement in this process (its `nodegc` is whatever PYTHONPATH gives)."""
    sys.path.insert(0, str(_ROOT))  # `tests` lives at the repo root
    import nodegc
    from nodegc.api.client import make_client
    from nodegc.kube.cache import ClusterCache
    from nodegc.kube.endpointslices import RawEndpointSlice
    from tests.api.fakeapi import FakeKubeAPI

    with FakeKubeAPI() as api, tempfile.TemporaryDirectory() as tmp:
        for i in range(slices):
            api.add("endpointslices", _slice(i, endpoints))
        client = make_client(api.write_kubeconfig(Path(tmp) / "kubeconfig"))
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        cache = ClusterCache(client, RawEndpointSlice)
        started = time.monotonic()
        if not cache.start(sync_timeout=600):
            raise SystemExit("the caches did not sync")
        synced = time.monotonic() - started
        view = cache.slices.view()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        entries = _deep_size(list(view.items), set())
        rss = _rss_mib()
        cache.stop()
        client.close()
    return {"src": os.path.dirname(nodegc.__file__), "slices": len(view.items), "held_mib": round(held / 2**20, 2),
            "slices_mib": round(entries / 2**20, 2), "rss_mib": round(rss, 1), "sync_seconds": round(synced, 2)}


def _run(src: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = f"{src}{os.pathsep}{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(src)
    out = subprocess.run([sys.executable, __file__, "--one", "--slices", str(args.slices), "--endpoints",
                          str(args.endpoints)], env=env, capture_output=True, text=True, timeout=1800, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("held_mib", "slices_mib", "rss_mib", "sync_seconds")
    return {k: round(statistics.median(r[k] for r in runs), 2) for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slices", type=int, default=500)
    parser.add_argument("--endpoints", type=int, default=100, help="endpoints per slice")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", type=Path, default=None, metavar="SRC",
                        help="another tree's src dir, measured interleaved with this one")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.slices, args.endpoints)))
        return
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "against": []}
    for _ in range(args.repeat):
        runs["this"].append(_run(None, args))
        if args.against is not None:
            runs["against"].append(_run(args.against, args))
    out: dict[str, Any] = {"slices": args.slices, "endpoints_per_slice": args.endpoints,
                           "this": {**_median(runs["this"]), "runs": runs["this"]}}
    if args.against is not None:
        out["against"] = {"src": str(args.against), **_median(runs["against"]), "runs": runs["against"]}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
