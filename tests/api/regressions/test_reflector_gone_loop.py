"""A watch that is answered 410 every time must not turn into a hot list/watch loop."""
from __future__ import annotations

import time
from pathlib import Path

from tests.api.fakeapi import FakeKubeAPI
from tests.api.test_reflector import NODE, lists, pod, reflector


def test_repeated_410_relists_back_off(tmp_path: Path) -> None:
    # Every watch from the list's resourceVersion is already "too old" (a busy cluster whose watch
    # window is smaller than the churn between list and watch). client-go backs off between relists.
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=(NODE,)) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        api.add_pod(pod("a1"))
        store_cls = type(api.store)
        api.store.__class__ = type("AlwaysCompacted", (store_cls,), {"compacted_rv": property(lambda s: 10**9)})
        with reflector(kubeconfig, retry_seconds=0.2, max_retry_seconds=2.0) as ref:
            assert ref.wait_synced(30)
            time.sleep(2.0)
        n = len(lists(api))
        # with a backoff starting at 0.2 s and doubling, a handful of lists fit in 2 s
        assert n <= 6, f"{n} full lists of node {NODE}'s pods in 2 s: no backoff between 410 relists"
