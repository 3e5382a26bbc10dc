"""PodReflector against the HTTP-level fake API: the list/watch/relist requests it actually sends."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodegc.desired.reflector import PodReflector
from nodegc.desired.source import SourceError
from nodegc.model.pods import Pod
from tests.api.fakeapi import FakeKubeAPI, RecordedRequest

NODE = "node-a"
PODS_PATH = "/api/v1/pods"


def pod(name: str, node: str = NODE, *, namespace: str = "default", phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "creationTimestamp": "2024-05-01T10:00:00Z",
        },
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]},
        "status": {"phase": phase},
    }


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=(NODE,)) as server:
        yield server


def reflector(kubeconfig: Path, **overrides: Any) -> PodReflector:
    options: dict[str, Any] = {
        "resync_seconds": 60.0,
        "idle_timeout_seconds": 0.5,
        "request_timeout": 2.0,
        "retry_seconds": 0.02,
        "max_retry_seconds": 0.2,
    }
    options.update(overrides)
    return PodReflector(NODE, kubeconfig=kubeconfig, **options)


def pod_requests(api: FakeKubeAPI) -> list[RecordedRequest]:
    return api.requests_to(PODS_PATH)


def lists(api: FakeKubeAPI) -> list[RecordedRequest]:
    return [r for r in pod_requests(api) if not r.is_watch]


def watches(api: FakeKubeAPI) -> list[RecordedRequest]:
    return [r for r in pod_requests(api) if r.is_watch]


def names(ref: PodReflector) -> list[str]:
    return sorted(p.name for p in ref.fetch().pods)


def eventually(api: FakeKubeAPI, check: Any, timeout: float = 30.0) -> None:
    """Wait for a background thread's effect: generous, since a loaded 2-core machine may be slow; a
    condition that holds returns at once."""
    def safe() -> bool:
        try:
            return bool(check())
        except SourceError:
            return False

    assert api.wait_for(safe, timeout), "condition not met in time"


def test_lists_then_watches_from_the_lists_resource_version(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1"))
    api.add_pod(pod("a2", namespace="kube-system"))
    api.add_pod(pod("b1", node="node-b"))

    with reflector(kubeconfig) as ref:
        assert ref.wait_synced(30)
        list_rv = str(api.resource_version)  # the node Lease was renewed (read) right before the list
        eventually(api, lambda: len(watches(api)) == 1)
        assert names(ref) == ["a1", "a2"]
        assert ref.fetch().source == "kube"
        lease, = [r for r in api.requests if "/leases/" in r.path]
        assert lease.path == f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
        assert lease.at <= pod_requests(api)[0].at  # the proof is read before the list

        first, second = pod_requests(api)[:2]
        assert not first.is_watch
        assert first.query["fieldSelector"] == f"spec.nodeName={NODE}"
        assert first.query["limit"] == "500"
        assert "resourceVersion" not in first.query  # a consistent read, not the server's cache
        assert second.is_watch
        assert second.query["resourceVersion"] == list_rv
        assert second.query["allowWatchBookmarks"] == "true"
        assert second.query["fieldSelector"] == f"spec.nodeName={NODE}"
        assert int(second.query["timeoutSeconds"]) <= 290

        api.add_pod(pod("a3"))
        api.add_pod(pod("b2", node="node-b"))
        eventually(api, lambda: names(ref) == ["a1", "a2", "a3"])
        api.update("pods", "default", "a3", {"status": {"phase": "Succeeded"}})
        eventually(api, lambda: any(p.phase == "Succeeded" for p in ref.fetch().pods))
    assert len(lists(api)) == 1  # events, not lists, kept the view current


def test_dropped_watch_resumes_from_the_last_resource_version(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1"))
    with reflector(kubeconfig) as ref:
        assert ref.wait_synced(30)
        eventually(api, lambda: len(watches(api)) == 1)
        api.add_pod(pod("a2"))
        eventually(api, lambda: names(ref) == ["a1", "a2"])
        last_rv = str(api.resource_version)
        time.sleep(0.1)  # a bookmark at the same rv

        api.drop_watches()
        eventually(api, lambda: len(watches(api)) == 2)
        assert watches(api)[1].query["resourceVersion"] == last_rv
        assert len(lists(api)) == 1  # no relist

        api.delete_pod("default", "a1")  # the resumed watch carries on
        eventually(api, lambda: names(ref) == ["a2"])


@pytest.mark.parametrize("how", ["error_event", "compacted_history", "http_410"])
def test_gone_relists_then_watches(api: FakeKubeAPI, kubeconfig: Path, how: str) -> None:
    api.add_pod(pod("a1"))
    with reflector(kubeconfig) as ref:
        assert ref.wait_synced(30)
        eventually(api, lambda: len(watches(api)) == 1)
        if how == "error_event":
            api.expire_watches()  # an ERROR event with a 410 Status on the open stream
        elif how == "compacted_history":
            api.stall_watches(5.0)  # the open watch does not see a2 ...
            api.add_pod(pod("a2"))
            api.compact()  # ... and its resume point leaves the history window
            api.drop_watches()
        else:
            api.fail_next(410, path_prefix=PODS_PATH)  # the resumed watch gets a 410 response
            api.drop_watches()
        eventually(api, lambda: ref.stats()["relists_gone"] == 1)
        eventually(api, lambda: len(lists(api)) == 2 and pod_requests(api)[-1].is_watch)
        requests = pod_requests(api)
        relist = requests.index(lists(api)[1])
        assert requests[relist - 1].is_watch  # the watch that was told 410
        assert requests[relist + 1].is_watch
        expected = ["a1", "a2"] if how == "compacted_history" else ["a1"]
        eventually(api, lambda: names(ref) == expected)


def test_stalled_stream_relists_after_the_idle_timeout(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1"))
    with reflector(kubeconfig, idle_timeout_seconds=0.3) as ref:
        assert ref.wait_synced(30)
        eventually(api, lambda: len(watches(api)) == 1)
        api.stall_watches(0.5)
        started = time.monotonic()
        eventually(api, lambda: len(lists(api)) == 2)
        assert time.monotonic() - started >= 0.25  # not before the idle timeout (load only makes it later)
        assert ref.stats()["relists_stalled"] >= 1
        api.add_pod(pod("a2"))
        eventually(api, lambda: names(ref) == ["a1", "a2"])


def test_fetched_at_moves_only_with_the_resource_version(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """Bookmarks dated the view as of their arrival, even at the resourceVersion it already held: a watch
    cache cut off from etcd keeps sending those on a timer. Only progress (or a list) refreshes it."""
    with reflector(kubeconfig, idle_timeout_seconds=60.0) as ref:
        assert ref.wait_synced(30)
        eventually(api, lambda: len(watches(api)) == 1)
        first = ref.fetch().fetched_at
        held = ref.resource_version()
        bookmarks = ref.stats().get("events_bookmark", 0)
        eventually(api, lambda: ref.stats().get("events_bookmark", 0) >= bookmarks + 3)
        assert ref.resource_version() == held
        assert ref.fetch().fetched_at == first, "a bookmark at an unchanged resourceVersion refreshed the view"

        api.renew_node_lease(NODE)  # progress elsewhere in the store: the next bookmark carries it
        eventually(api, lambda: ref.fetch().fetched_at > first)
        assert (ref.resource_version() or 0) > (held or 0)

        api.stall_watches(3600.0)
        api.renew_node_lease(NODE)  # never delivered while the stream is stalled
        target = api.resource_version
        view_rv, frozen = ref.resource_version(), ref.fetch().fetched_at
        time.sleep(0.5)
        assert (ref.resource_version() or 0) < target
        if ref.resource_version() == view_rv:  # a line already in flight may land late; nothing else can
            assert ref.fetch().fetched_at == frozen
        api.stall_watches(0)  # the stall ends: the next bookmark carries the new resourceVersion
        eventually(api, lambda: (ref.resource_version() or 0) >= target)
        assert ref.fetch().fetched_at > frozen
        assert len(lists(api)) == 1


def test_fetch_raises_before_the_first_sync(api: FakeKubeAPI, kubeconfig: Path) -> None:
    ref = reflector(kubeconfig)
    assert not ref.synced
    assert ref.last_fresh() is None
    with pytest.raises(SourceError, match="not synced"):
        ref.fetch()
    api.fail_next(503, count=3, path_prefix=PODS_PATH)
    with ref:
        eventually(api, lambda: len(lists(api)) >= 2)
        with pytest.raises(SourceError, match="HTTP 503"):
            ref.fetch()
        assert ref.wait_synced(30)
        assert ref.fetch().pods == ()


def test_a_proof_of_a_cache_not_synced_is_counted_refused(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """nodegc_reflector_proofs_total{result="proven"} is proofs - refused: an unusable cache is a refusal."""
    ref = reflector(kubeconfig)
    with pytest.raises(SourceError, match="not synced"):
        ref.proven(max_age_seconds=60)
    stats = ref.stats()
    assert stats["proofs"] == stats["proofs_refused"] == 1, stats


def test_stale_list_is_not_applied_and_a_fresh_one_is(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1"))
    old_rv = api.resource_version
    api.add_pod(pod("a2"))
    with reflector(kubeconfig) as ref:
        assert ref.wait_synced(30)
        eventually(api, lambda: len(watches(api)) == 1)
        api.delete_pod("default", "a1")
        api.add_pod(pod("a3"))
        eventually(api, lambda: names(ref) == ["a2", "a3"])

        api.serve_stale_list(old_rv, resource="pods")  # the state with only a1
        api.expire_watches()
        eventually(api, lambda: len(lists(api)) == 3 and len(watches(api)) >= 2)
        assert ref.stats()["stale_lists"] == 1
        assert names(ref) == ["a2", "a3"]
        api.add_pod(pod("a4"))
        eventually(api, lambda: names(ref) == ["a2", "a3", "a4"])


def test_a_stale_first_list_is_refused_and_the_next_one_syncs(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """A lagging cache's first answer is older than the node Lease read right before it: not applied (it
    was applied before, and the watch from its version replayed what it missed while the view looked
    fresh)."""
    api.add_pod(pod("a1"))
    old_rv = api.resource_version
    api.add_pod(pod("a2"))
    api.delete_pod("default", "a1")
    api.serve_stale_list(old_rv, resource="pods")
    with reflector(kubeconfig) as ref:
        assert ref.wait_synced(30)
        assert names(ref) == ["a2"]
        assert ref.stats()["stale_lists"] == 1
        eventually(api, lambda: len(watches(api)) >= 1)
        assert int(watches(api)[0].query["resourceVersion"]) > old_rv
        assert len(lists(api)) == 2


def test_resync_relists_on_schedule(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1"))
    with reflector(kubeconfig, resync_seconds=0.3) as ref:
        assert ref.wait_synced(30)
        started = time.monotonic()
        eventually(api, lambda: ref.stats()["resyncs"] >= 2 and len(lists(api)) >= 3)
        elapsed = time.monotonic() - started
        # never more often than the period (a loaded machine only makes resyncs rarer)
        assert len(lists(api)) <= 2 + elapsed / 0.3
    # every list is followed by a watch from its resourceVersion: no list without a watch
    requests = pod_requests(api)
    for i, request in enumerate(requests[:-1]):
        if not request.is_watch:
            assert requests[i + 1].is_watch


def test_a_missed_delete_is_found_by_the_resync(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1"))
    api.add_pod(pod("a2"))
    deleted: list[Pod] = []
    with reflector(kubeconfig, resync_seconds=0.4, idle_timeout_seconds=600.0, on_delete=deleted.append) as ref:
        assert ref.wait_synced(30)
        eventually(api, lambda: len(watches(api)) == 1)
        api.stall_watches(3600.0)  # the DELETED event never arrives: only a resync can find it
        api.delete_pod("default", "a1")
        eventually(api, lambda: names(ref) == ["a2"])
        assert [p.name for p in deleted] == ["a1"]
        stats = ref.stats()
        assert stats["resyncs"] >= 1
        assert stats["relists_stalled"] == 0
        assert len(lists(api)) >= 2
        api.stall_watches(0)


def test_deletion_events_call_on_delete(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1"))
    api.add_pod(pod("b1", node="node-b"))
    deleted: list[Pod] = []
    threads: set[str] = set()

    def on_delete(gone: Pod) -> None:
        threads.add(threading.current_thread().name)
        deleted.append(gone)

    with reflector(kubeconfig, on_delete=on_delete) as ref:
        assert ref.wait_synced(30)
        eventually(api, lambda: len(watches(api)) == 1)
        api.delete_pod("default", "b1")  # not this node's: no event reaches us
        api.delete_pod("default", "a1")
        eventually(api, lambda: len(deleted) == 1)
        assert deleted[0].uid == "uid-default-a1"
        assert names(ref) == []
        assert threads == {f"pod-reflector-{NODE}"}


def test_a_failing_on_delete_does_not_stop_the_watch(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1"))

    def boom(gone: Pod) -> None:
        raise RuntimeError("callback bug")

    with reflector(kubeconfig, on_delete=boom) as ref:
        assert ref.wait_synced(30)
        eventually(api, lambda: len(watches(api)) == 1)
        api.delete_pod("default", "a1")
        api.add_pod(pod("a2"))
        eventually(api, lambda: names(ref) == ["a2"])


def test_unidentifiable_pod_makes_fetch_fail(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1"))
    with reflector(kubeconfig) as ref:
        assert ref.wait_synced(30)
        eventually(api, lambda: len(watches(api)) == 1)
        broken = pod("a2")
        del broken["metadata"]["uid"]
        api.add_pod(broken)
        eventually(api, lambda: ref.stats()["relists_error"] >= 1, timeout=20)
        with pytest.raises(SourceError, match="cannot be trusted"):
            ref.fetch()
        eventually(api, lambda: ref.stats()["lists"] >= 3, timeout=20)  # relists fail while the pod is there
        api.delete_pod("default", "a2")
        eventually(api, lambda: names(ref) == ["a1"], timeout=20)


def test_get_pod_is_a_live_get_not_the_cache(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("web", namespace="shop"))
    with reflector(kubeconfig) as ref:
        assert ref.wait_synced(30)
        got = ref.get_pod("shop", "web")
        assert got is not None and got.uid == "uid-shop-web"
        assert ref.get_pod("shop", "gone") is None
        assert [r.path for r in api.requests if r.path.startswith("/api/v1/namespaces/")] == [
            "/api/v1/namespaces/shop/pods/web",
            "/api/v1/namespaces/shop/pods/gone",
        ]


def test_stop_returns_promptly_with_an_open_watch(api: FakeKubeAPI, kubeconfig: Path) -> None:
    ref = reflector(kubeconfig, idle_timeout_seconds=600.0).start()
    assert ref.wait_synced(30)
    eventually(api, lambda: api.open_watches == 1)
    started = time.monotonic()
    ref.stop(timeout=60.0)
    # it closed the stream rather than wait for the idle timeout (600 s): generous for a loaded machine
    assert time.monotonic() - started < 30.0
    assert not [t for t in threading.enumerate() if t.name == f"pod-reflector-{NODE}"]


def test_watch_events_are_counted_by_type_for_the_metrics(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("a1"))
    with reflector(kubeconfig) as ref:
        assert ref.wait_synced(30)
        eventually(api, lambda: len(watches(api)) == 1)
        api.add_pod(pod("a2"))
        api.update("pods", "default", "a2", {"status": {"phase": "Succeeded"}})
        api.delete_pod("default", "a2")
        eventually(api, lambda: ref.stats().get("events_deleted") == 1)
        stats = ref.stats()
    assert stats["events_added"] == 1 and stats["events_modified"] == 1
    assert stats["lists"] == 1 and stats["watches"] >= 1
