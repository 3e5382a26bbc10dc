"""A static pod whose mirror pod is missing from the API still runs: its manifest keeps what may be its."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from nodegc.inventory.static_pods import scan_static_pods
from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory, Kind, StaticPodManifest
from nodegc.planning.correlate import correlate
from tests.unit.factories import NOW, cache, desired, pod, pod_dir, reservation

ETCD = StaticPodManifest(path="/etc/kubernetes/manifests/etcd.yaml", namespace="kube-system", name="etcd",
                         containers=("etcd",))
HASH = "9f3c0a1b2c3d4e5f60718293a4b5c6d7"


def test_directory_of_a_static_pod_without_mirror_is_kept() -> None:
    inv = Inventory(taken_at=NOW, pod_dirs=(replace(pod_dir(HASH, mounted=True), container_names=("etcd",)),),
                    static_pods=(ETCD,))
    findings = correlate(inv, desired(pod("web", "u1")), now=NOW)
    assert {f.kind: f.cls for f in findings} == {Kind.POD_DIR: FindingClass.PROTECTED,
                                                 Kind.VOLUME_MOUNT: FindingClass.PROTECTED}


def test_directory_whose_containers_do_not_fit_any_manifest_is_residue() -> None:
    inv = Inventory(taken_at=NOW, pod_dirs=(replace(pod_dir("u-gone"), container_names=("app",)),),
                    static_pods=(ETCD,))
    [finding] = correlate(inv, desired(pod("web", "u1")), now=NOW)
    assert finding.cls is FindingClass.ORPHANED_POD_DIR


def test_a_mirrored_manifest_protects_nothing_else() -> None:
    """An older directory that fits the manifest (the pod before the manifest was last edited) is residue
    once the mirror pod is newer than it."""
    mirror = replace(pod("etcd-n1", "u-mirror", ns="kube-system"), static_uid=HASH,
                     created_at=NOW - timedelta(seconds=60))
    inv = Inventory(taken_at=NOW, pod_dirs=(pod_dir(HASH), replace(pod_dir("u-gone"), container_names=("etcd",))),
                    static_pods=(ETCD,))
    classes = {f.id: f.cls for f in correlate(inv, desired(mirror), now=NOW)}
    assert classes == {f"/kubelet/pods/{HASH}": FindingClass.IN_USE,
                       "/kubelet/pods/u-gone": FindingClass.ORPHANED_POD_DIR}


def test_network_of_a_static_pod_without_mirror_is_kept() -> None:
    inv = Inventory(taken_at=NOW, static_pods=(ETCD,),
                    cni_cache=(replace(cache("c1", uid=HASH, ip="10.0.0.4"), pod_namespace="kube-system",
                                       pod_name="etcd-n1"),),
                    ip_reservations=(reservation("10.0.0.4", "c1"),))
    findings = correlate(inv, desired(pod("web", "u1", ip="10.0.0.2")), now=NOW)
    assert not [f for f in findings if f.cls.is_residue], [(f.kind.value, f.cls.value) for f in findings]


def test_an_unreadable_manifest_keeps_every_absent_pod_directory() -> None:
    unreadable = StaticPodManifest(path="/etc/kubernetes/manifests/x.yaml", namespace=None, name=None)
    inv = Inventory(taken_at=NOW, pod_dirs=(replace(pod_dir("u-gone"), container_names=("app",)),),
                    static_pods=(unreadable,))
    [finding] = correlate(inv, desired(pod("web", "u1")), now=NOW)
    assert finding.cls is FindingClass.PROTECTED


def test_reader_skips_hidden_files_and_keeps_bad_ones_as_unknown(tmp_path: Path) -> None:
    (tmp_path / "etcd.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: etcd, namespace: kube-system}\n"
                                        "spec:\n  hostNetwork: true\n  containers: [{name: etcd}]\n")
    (tmp_path / ".swp").write_text("{")
    (tmp_path / "broken.yaml").write_bytes(b"\xff\xfe")
    (tmp_path / "deep.yaml").write_text("[" * 100_000)
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/etc/passwd", tmp_path / "link.yaml")
    manifests, problems = scan_static_pods(tmp_path)
    parsed = [m for m in manifests if m.name]
    assert [(m.namespace, m.name, m.containers, m.host_network) for m in parsed] == [
        ("kube-system", "etcd", ("etcd",), True)]
    assert sorted(os.path.basename(p.path) for p in problems) == ["broken.yaml", "deep.yaml", "fifo", "link.yaml"]
    assert len(manifests) == 5
    assert scan_static_pods(tmp_path / "missing") == ((), ())
