"""Static pods: the kubelet names the pod directory (and passes K8S_POD_UID to CNI) by the static pod's
config hash (kubernetes.io/config.mirror on the mirror pod), while the mirror pod the API returns has
another metadata.uid. Both UIDs must lead to the pod, or a running etcd's directory looks orphaned."""

from __future__ import annotations

from nodegc.api.objects import pod_from_object
from nodegc.model.findings import FindingClass
from nodegc.model.pods import DesiredState
from nodegc.model.resources import Inventory, Kind
from nodegc.planning.correlate import correlate
from tests.unit.factories import NOW, pod_dir

CONFIG_HASH = "9f3c0a1b2c3d4e5f60718293a4b5c6d7"
MIRROR = {
    "metadata": {
        "name": "etcd-n1", "namespace": "kube-system", "uid": "5b1e2c6e-0000-4000-8000-000000000001",
        "annotations": {"kubernetes.io/config.hash": CONFIG_HASH, "kubernetes.io/config.mirror": CONFIG_HASH,
                        "kubernetes.io/config.source": "file"},
        "creationTimestamp": "2026-11-30T10:00:00Z",
    },
    "spec": {"nodeName": "n1", "hostNetwork": True},
    "status": {"phase": "Running", "podIP": "192.168.1.10"},
}


def test_running_static_pod_directory_is_not_residue() -> None:
    mirror = pod_from_object(MIRROR)
    desired = DesiredState(node="n1", pods=(mirror,), source="test", fetched_at=NOW)
    inv = Inventory(taken_at=NOW, pod_dirs=(pod_dir(CONFIG_HASH),))  # pods/<config hash>, as the kubelet names it
    f = [x for x in correlate(inv, desired, now=NOW) if x.kind is Kind.POD_DIR]
    assert f[0].cls is not FindingClass.ORPHANED_POD_DIR, f[0].evidence


def test_running_static_pods_memory_emptydir_is_not_unmounted() -> None:
    mirror = pod_from_object(MIRROR)
    desired = DesiredState(node="n1", pods=(mirror,), source="test", fetched_at=NOW)
    inv = Inventory(taken_at=NOW, pod_dirs=(pod_dir(CONFIG_HASH, mounted=True),))  # emptyDir medium: Memory
    f = [x for x in correlate(inv, desired, now=NOW) if x.kind is Kind.VOLUME_MOUNT]
    assert f[0].cls is not FindingClass.ORPHANED_VOLUME_MOUNT, f[0].evidence
