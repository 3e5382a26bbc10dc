"""A static pod the kubelet runs without a mirror pod (the API server refuses mirrors of static pods that
reference a ServiceAccount, ConfigMap or Secret, or whose namespace does not exist; the kubelet runs the
pod anyway) has a READY sandbox whose pod is not in the API. The planner calls it `running_orphan`
without asking the static manifests (planning/runtime.py, `_sandbox`: `if sb.ready: if pod is None and not
young`), though the same module keeps a NotReady sandbox of such a pod. With --stop-running-orphans the
engine then stops it: `engine/orphans.py:stop_running_orphan` makes a live GET by name (no mirror: None),
checks READY and the uid in a fresh status, and calls StopPodSandbox on a live pod's sandbox."""

from __future__ import annotations

from datetime import timedelta

from nodegc.engine.orphans import stop_running_orphan
from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory, Kind, StaticPodManifest
from nodegc.model.runtime import RuntimeSandbox, RuntimeView
from nodegc.planning.correlate import correlate
from tests.unit.factories import NOW, desired, pod

HASH = "6b4bd3a7c0d1e9f2a8b5c4d3e2f1a0b9"  # the kubelet's config hash: the static pod's uid


def _inventory(*manifests: StaticPodManifest) -> Inventory:
    sb = RuntimeSandbox(id="a" * 64, pod_uid=HASH, pod_name="agent-n1", pod_namespace="kube-system", attempt=0,
                        ready=True, created_at=NOW - timedelta(hours=2), ips=(), status_read=True)
    view = RuntimeView(endpoint="unix:///run/containerd/containerd.sock", reachable=True, runtime_name="containerd",
                       runtime_version="1.6.20", api_version="v1", sandboxes=(sb,), read_at=NOW)
    return Inventory(taken_at=NOW, static_pods=manifests, runtime=view)


def test_the_ready_sandbox_of_an_unmirrored_static_pod_is_not_a_running_orphan() -> None:
    manifest = StaticPodManifest(path="/etc/kubernetes/manifests/agent.yaml", namespace="kube-system",
                                 name="agent", containers=("agent",), host_network=True)
    found = {(f.kind, f.id): f for f in correlate(_inventory(manifest), desired(pod("web", "u1", ip="10.0.0.2")),
                                                  now=NOW)}
    f = found[(Kind.SANDBOX, "a" * 64)]
    assert f.cls is not FindingClass.RUNNING_ORPHAN, f.evidence
    # what the engine does next with --stop-running-orphans: the live GET by name finds no mirror pod, so
    # only the runtime is asked (here nothing answers: the stop would have been attempted)
    seen = _inventory(manifest).runtime.sandboxes[0]  # type: ignore[union-attr]
    _stopped, why = stop_running_orphan(f, endpoint="unix:///nonexistent/cri.sock", timeout=1.0,
                                        get_pod=lambda ns, name: None, seen=seen)
    assert why.startswith("runtime:"), why


def test_an_unreadable_manifest_keeps_a_ready_sandbox_whose_pod_the_api_lacks() -> None:
    broken = StaticPodManifest(path="/etc/kubernetes/manifests/half-written.yaml", namespace=None, name=None)
    found = {(f.kind, f.id): f for f in correlate(_inventory(broken), desired(pod("web", "u1", ip="10.0.0.2")),
                                                  now=NOW)}
    f = found[(Kind.SANDBOX, "a" * 64)]
    assert f.cls is not FindingClass.RUNNING_ORPHAN, f.evidence
