"""The agent's pod watch proves what the one-shot list proves, and a restarted cache has one thread.

Against the HTTP-level test API server (tests/api/fakeapi.py), never a patched client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nodegc.api.client import make_client
from nodegc.desired.reflector import PodReflector
from nodegc.desired.source import SourceError
from tests.api.fakeapi import FakeKubeAPI
from tests.api.test_reflector import NODE, eventually, lists, names, pod, reflector, watches

THREAD = f"pod-reflector-{NODE}"


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=(NODE,)) as server:
        yield server


# -- 5: the node-Lease proof and the "list lacks this pod" check -----------------------------------------


def test_a_lagging_list_never_becomes_the_agents_view(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """A proxy answers the watch cache's list from the past: before, the agent took it (and its age from the
    moment it asked); now it is older than the node Lease read right before it, and refused."""
    api.add_pod(pod("web"))
    old_rv = api.resource_version
    api.add_pod(pod("db"))
    for _ in range(3):
        api.serve_stale_list(old_rv, resource="pods")
    with reflector(kubeconfig) as ref:
        eventually(api, lambda: ref.stats()["stale_lists"] >= 3)
        assert ref.wait_synced(30)  # the fourth, current, list
        assert names(ref) == ["db", "web"]
        assert len(lists(api)) == 4


def test_without_a_fresh_node_lease_the_view_never_syncs(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.stop_kubelet(NODE)
    api.renew_node_lease(NODE, at=datetime.now(UTC) - timedelta(minutes=5))  # a kubelet that stopped
    api.add_pod(pod("web"))
    with reflector(kubeconfig) as ref:
        eventually(api, lambda: len([r for r in api.requests if "/leases/" in r.path]) >= 2)
        assert not ref.synced
        with pytest.raises(SourceError, match=r"renewed 300s ago"):
            ref.fetch()
        assert lists(api) == []  # the proof failed before any list was asked for
        api.start_kubelet(NODE)
        assert ref.wait_synced(30)


def test_the_view_is_dated_at_the_lease_renewal(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.stop_kubelet(NODE)
    renewed = datetime.now(UTC) - timedelta(seconds=20)
    api.renew_node_lease(NODE, at=renewed)
    with reflector(kubeconfig) as ref:
        assert ref.wait_synced(30)
        assert ref.fetch().fetched_at == renewed  # not the moment the list was asked for


def test_a_live_get_finding_a_pod_the_view_lacks_stops_and_relists(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """A truncating proxy's list leaves `web` out: terminate's live GET of `web` finds it on this node. Before,
    it returned the pod and terminate went on with everything else the view decided."""
    api.add_pod(pod("db"))
    api.add_pod(pod("web"))
    # claims the version the node Lease is about to get (read right before the list): it passes the proof
    api.serve_stale_list([pod("db")], resource="pods", resource_version=api.resource_version + 1)
    with reflector(kubeconfig) as ref:
        assert ref.wait_synced(30)
        assert names(ref) == ["db"]
        with pytest.raises(SourceError, match=r"pod cache of node node-a is out of date: pod default/web"):
            ref.get_pod("default", "web")
        assert ref.get_pod("default", "gone") is None
        eventually(api, lambda: names(ref) == ["db", "web"])  # relisted at once, not at the next resync
        assert len(lists(api)) == 2
        assert ref.get_pod("default", "web") is not None


def test_a_pod_newer_than_the_view_is_refused_without_a_relist(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """A pod created after the view's version may just not have arrived yet: still no proof that nothing
    else is missing, so the GET refuses, but it does not cost a list."""
    with reflector(kubeconfig, idle_timeout_seconds=600.0) as ref:
        assert ref.wait_synced(30)
        eventually(api, lambda: len(watches(api)) == 1)
        api.stall_watches(3600.0)
        api.add_pod(pod("new"))
        with pytest.raises(SourceError, match="out of date"):
            ref.get_pod("default", "new")
        assert len(lists(api)) == 1
        api.stall_watches(0)
        eventually(api, lambda: names(ref) == ["new"])
        assert ref.get_pod("default", "new") is not None


# -- 6: stop and start while a list is in flight ------------------------------------------------------


def _alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD and t.is_alive()]


def test_stop_start_during_a_slow_list_leaves_one_thread(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """A controller that loses and regains its leadership stops and starts its cache while a list is in
    flight. Before, start() cleared the stop flag the old thread was still to read: two threads, two
    watches, each overwriting the other's view for ever."""
    api.add_pod(pod("web"))
    client = make_client(kubeconfig, timeout=10.0)  # shared, as the controller's: stop() does not close it
    try:
        ref = PodReflector(NODE, client=client, resync_seconds=600.0, idle_timeout_seconds=600.0,
                           request_timeout=10.0, retry_seconds=0.02, max_retry_seconds=0.2)
        api.delay(1.0)  # every request takes a second: the list is in flight while we flap
        for _ in range(3):
            ref.start()
            eventually(api, lambda: len(api.requests) > 0)
            ref.stop(timeout=0.05)  # returns while the old thread still waits for its answer
        ref.start()
        api.delay(0)
        assert ref.wait_synced(30)
        eventually(api, lambda: len(_alive()) == 1)  # the old threads ended when their answers came
        eventually(api, lambda: api.open_watches == 1)
        time.sleep(0.5)
        assert len(_alive()) == 1 and api.open_watches == 1
        assert names(ref) == ["web"]
        api.add_pod(pod("db"))
        eventually(api, lambda: names(ref) == ["db", "web"])
        ref.stop()
        eventually(api, lambda: not _alive())
    finally:
        client.close()
