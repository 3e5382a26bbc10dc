"""A list older than the view, against the watch's proof (`Reflector.prove`), through the test API server.

Such a list is refused, and it drops what the view had proven: a lagging API server's list and the list of a
store restored from a snapshot (an etcd restore without a revision bump) look the same, and only the second
tells that the view may hold changes the store no longer has. When the store is restored to a point after
the last node Lease read, the next Lease is not older than that one: the list is then the only sign, and the
proof taken before it must not stand (found8 covers a restore the Lease tells). The drop happens once for a
row of such lists; the list applied after the row proves the view again with its own Lease."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.desired.reflector import PodReflector
from nodegc.desired.source import SourceError
from tests.api.adversarial.test_watch_dating import Agent as DatingAgent
from tests.api.adversarial.test_watch_dating import Node, blocked
from tests.api.fakeapi import FakeKubeAPI
from tests.api.test_reflector import NODE, eventually, pod, reflector

MAX_AGE = 600.0
"""--max-desired-age of the agent: the proof taken at the list is young all through the test."""


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=(NODE,)) as server:
        yield server


class Agent(DatingAgent):
    def __init__(self, source: PodReflector, node: Node) -> None:
        super().__init__(source, node)
        self.engine.settings = dataclasses.replace(self.engine.settings, max_desired_age_seconds=MAX_AGE)


def test_a_restore_after_the_last_lease_read_drops_the_proof_by_the_list_alone(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    api.add_pod(pod("db"))
    api.add_pod(pod("web"))
    ref = reflector(api.write_kubeconfig(tmp_path / "kubeconfig"), idle_timeout_seconds=30.0,
                    max_stale_lists=10_000).start()
    try:
        assert ref.wait_synced(30)
        assert "web" in {p.name for p in ref.proven(max_age_seconds=MAX_AGE).pods}  # proven by the list
        restore_point = api.store.resource_version  # after the Lease read for that list
        api.delete("pods", "default", "web")
        for n in range(5):
            api.update("pods", "default", "db", {"metadata": {"annotations": {"n": str(n)}}})
        eventually(api, lambda: (ref.resource_version() or 0) >= api.store.resource_version)
        assert "web" not in {p.name for p in ref.fetch().pods}
        # The store is restored: `web` exists again, and the view still says it is gone.
        api.restore_store(restore_point)
        node = Node()
        node.add("uid-default-db", at=time.time() - 3600)
        node.add("uid-default-web", at=time.time() - 3600)
        with pytest.raises(SourceError):  # a live GET finds web: the cache relists, on the restored store
            ref.get_pod("default", "web")
        eventually(api, lambda: ref.stats()["stale_lists"] >= 1)
        lease = api.get("leases", "kube-node-lease", NODE)
        assert lease is not None and int(lease["metadata"]["resourceVersion"]) > restore_point, (
            "the Lease read for the relist is not older than the one read before: only the list tells")
        with pytest.raises(SourceError):
            ref.proven(max_age_seconds=MAX_AGE)
        agent = Agent(ref, node)
        try:
            report = agent.cycle()
            assert blocked(report) == ["view_not_current"], report.blocked
            assert agent.ledger.items(active_only=True) == {} and not agent.acted_on("uid-default-web")
        finally:
            agent.ledger.close()
    finally:
        ref.stop()


def test_the_list_after_a_row_of_stale_lists_proves_the_view_again(api: FakeKubeAPI, tmp_path: Path) -> None:
    api.add_pod(pod("db"))
    ref = reflector(api.write_kubeconfig(tmp_path / "kubeconfig"), idle_timeout_seconds=30.0,
                    max_stale_lists=10_000).start()
    try:
        assert ref.wait_synced(30)
        # The Lease stays as read for the first list (renewed moments ago): the lists below are not behind
        # it, only behind the view.
        api.stop_kubelet(NODE)
        old_rv = api.store.resource_version
        for n in range(5):
            api.update("pods", "default", "db", {"metadata": {"annotations": {"n": str(n)}}})
        eventually(api, lambda: (ref.resource_version() or 0) >= api.store.resource_version)
        # A lagging server answers three lists in a row from before the view, then a current one.
        for _ in range(3):
            api.serve_stale_list(old_rv, resource="pods")
        ref.request_relist("test")
        eventually(api, lambda: ref.stats()["stale_lists"] >= 3)
        eventually(api, lambda: "db" in {p.name for p in ref.proven(max_age_seconds=MAX_AGE).pods})
        assert ref.stats()["stale_lists"] == 3 and ref.stats()["lists"] == 5
    finally:
        ref.stop()
