"""A namespace a sandbox being (re-)created already has, while its CNI ADD still runs: containerd makes and
bind-mounts the namespace (cni-<uuid>) before the ADD and lists the sandbox only at the end of RunPodSandbox;
the cache entry is written when the ADD ends; between the plugins' steps no task is inside. For a pod whose
sandbox is re-created (it stays Running with its status IP: no pod is "still starting") nothing else ties
the namespace to anything. The reservation rule keeps a reservation without a cache entry for the ADD
settle time (an ADD may run until the kubelet gives up on it); the dead-netns proof must keep the namespace
as long, not only the minimum age."""

from __future__ import annotations

from nodegc.model.findings import FindingClass
from tests.unit.factories import NOW, pod
from tests.unit.test_dead_netns import DEAD, netns, node, verdict


def test_a_namespace_younger_than_the_add_settle_time_is_not_proven_dead() -> None:
    # 2 minutes old: past the 60 s minimum age, within the 300 s an ADD may still run.
    inv = node(netns(DEAD, mtime=NOW.timestamp() - 120))
    cls, evidence = verdict(inv, pod("web", "u1", ip="10.0.0.3"))
    assert cls is not FindingClass.LEAKED_NETNS, evidence


def test_past_the_add_settle_time_the_proof_stands() -> None:
    inv = node(netns(DEAD, mtime=NOW.timestamp() - 400))
    assert verdict(inv, pod("web", "u1", ip="10.0.0.3"))[0] is FindingClass.LEAKED_NETNS
