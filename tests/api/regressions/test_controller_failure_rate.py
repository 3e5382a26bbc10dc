"""A failing pass must not be retried every retry period (2 s) with full cluster lists."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.api.fakeapi import FakeKubeAPI
from tests.api.test_controller import Replica, endpoint, endpointslice, pod, service


def test_failed_passes_wait_the_interval(api: FakeKubeAPI, tmp_path: Path) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.add("services", service())
    api.add_pod(pod("live", "10.0.0.5"))
    api.add("endpointslices", endpointslice("api-manual", endpoint("10.0.0.5", "live")))
    api.fail_next(500, count=1000, path_prefix="/api/v1/pods")  # the cluster-wide pod list keeps failing
    r = Replica(kubeconfig, "r1")
    r.controller.settings = r.controller.settings.__class__(
        lease=r.controller.settings.lease, interval=30.0, sweep=r.controller.settings.sweep)
    stop = threading.Event()
    t = threading.Thread(target=r.controller.run, args=(stop,), daemon=True)
    t.start()
    time.sleep(5.0)
    stop.set()
    t.join(10)
    r.close()
    slices = "/apis/discovery.k8s.io/v1/endpointslices"
    slice_lists = [q for q in api.requests if q.method == "GET" and q.path == slices]
    assert len(slice_lists) <= 1
