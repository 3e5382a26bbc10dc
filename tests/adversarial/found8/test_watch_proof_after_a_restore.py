"""The watch's proof for acting compares the view's resourceVersion with the node Lease's, which only means
something within one history of resourceVersions. An etcd restored from a snapshot (without a revision
bump) hands out versions the view has already passed: a Lease renewed after the restore is "reached" by the
old view at once, and the old view, which lacks every pod created since the restore, would be proven current
as of that renewal. A list older than the view, or a Lease older than one read before, says the history may
have restarted: what was proven is dropped and the view proves nothing until a list is taken."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nodegc.desired.reflector import PodReflector
from nodegc.desired.source import SourceError
from tests.api.adversarial.test_watch_dating import MAX_AGE, Node, blocked
from tests.api.adversarial.test_watch_dating import Agent as DatingAgent
from tests.api.fakeapi import FakeKubeAPI
from tests.api.test_reflector import NODE, eventually, pod, reflector

LONGER = 3.0
"""A --max-desired-age long enough for the restore to happen while the view still looks fresh."""


class Agent(DatingAgent):
    def __init__(self, source: PodReflector, node: Node, *, max_age: float = MAX_AGE) -> None:
        super().__init__(source, node)
        self.engine.settings = dataclasses.replace(self.engine.settings, max_desired_age_seconds=max_age)


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=(NODE,)) as server:
        yield server


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    made: list[Agent] = []
    yield made
    for a in made:
        a.ledger.close()


def _started(api: FakeKubeAPI, tmp_path: Path) -> PodReflector:
    api.add_pod(pod("db"))
    # A server that keeps answering lists older than the view (the restored store) is refused for long.
    ref = reflector(api.write_kubeconfig(tmp_path / "kubeconfig"), idle_timeout_seconds=30.0,
                    max_stale_lists=10_000).start()
    assert ref.wait_synced(30)
    return ref


def _history_then_restore(api: FakeKubeAPI, ref: PodReflector, *, after: int = 0) -> None:
    """The view passes many versions (and is proven on a Lease read after the restore point); the store is
    then restored to that point and `web` is created on it (versions the view already passed)."""
    restore_point = api.store.resource_version
    for n in range(30):
        api.update("pods", "default", "db", {"metadata": {"annotations": {"n": str(n)}}})
    time.sleep(MAX_AGE / 2 + 0.1)  # the list's proof is renewed: one Lease GET, after the restore point
    eventually(api, lambda: ref.proven(max_age_seconds=MAX_AGE).fetched_at.timestamp() > 0)
    for n in range(after):  # versions the view passes after the Lease it was proven on
        api.update("pods", "default", "db", {"metadata": {"annotations": {"m": str(n)}}})
    eventually(api, lambda: (ref.resource_version() or 0) >= api.store.resource_version)
    held = ref.resource_version()
    assert held is not None and held >= restore_point + 30 + after
    api.restore_store(restore_point)
    api.add_pod(pod("web"))
    assert api.store.resource_version < held


def test_a_lease_of_a_restored_history_does_not_prove_the_old_view(
    api: FakeKubeAPI, tmp_path: Path, agents: list[Agent]
) -> None:
    ref = _started(api, tmp_path)
    try:
        node = Node()
        node.add("uid-default-db", at=time.time() - 3600)
        node.add("uid-dead", at=time.time() - 3600)
        _history_then_restore(api, ref)
        node.add("uid-default-web", at=time.time())
        assert "web" not in {p.name for p in ref.fetch().pods}
        time.sleep(MAX_AGE / 2 + 0.1)  # the next proof reads the Lease again: renewed on the restored store
        agent = Agent(ref, node)
        agents.append(agent)
        report = agent.cycle()
        assert not agent.acted_on("uid-default-web"), report
        assert blocked(report) == ["view_not_current"], report.blocked
        with pytest.raises(SourceError):
            ref.proven(max_age_seconds=MAX_AGE)
    finally:
        ref.stop()


def test_a_list_older_than_the_view_drops_its_proofs(
    api: FakeKubeAPI, tmp_path: Path, agents: list[Agent]
) -> None:
    ref = _started(api, tmp_path)
    try:
        node = Node()
        node.add("uid-default-db", at=time.time() - 3600)
        node.add("uid-dead", at=time.time() - 3600)
        _history_then_restore(api, ref, after=60)
        node.add("uid-default-web", at=time.time())
        with pytest.raises(SourceError):  # terminate's live GET finds web: the cache relists, and every
            ref.get_pod("default", "web")  # list is older than the view, and refused
        eventually(api, lambda: ref.stats()["stale_lists"] >= 1)
        # Enough writes since the restore that the next Lease is not older than the last one read, yet still
        # behind the old view: only the list older than the view tells the history restarted.
        for n in range(40):
            api.update("pods", "default", "web", {"metadata": {"annotations": {"n": str(n)}}})
        assert api.store.resource_version < (ref.resource_version() or 0) - 10
        # The view is still fresh by its last arrival (a quick restore), and the proof taken before the
        # restore is old enough to be renewed: the next proof reads the Lease, and must not take it.
        agent = Agent(ref, node, max_age=LONGER)
        agents.append(agent)
        time.sleep(LONGER / 2 + 0.1)
        assert (datetime.now(UTC) - ref.fetch().fetched_at).total_seconds() < LONGER
        report = agent.cycle()
        assert not agent.acted_on("uid-default-web"), report
        assert blocked(report) == ["view_not_current"], report.blocked
        with pytest.raises(SourceError):
            ref.proven(max_age_seconds=600)  # not even the proof taken before the list older than the view
    finally:
        ref.stop()
