"""Findings: owners the desired state does not show (a truncated list, a static pod whose mirror lags)."""

from __future__ import annotations

from dataclasses import replace

from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.ledger.store import Ledger
from nodegc.model.findings import FindingClass
from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory, Kind, PodLogDir, StaticPodManifest
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.planning.phases import PhasePolicy
from nodegc.settings import Roots, ScanOptions
from tests.adversarial.test_truncated_list import Recorder
from tests.adversarial.test_truncated_list import Source as TruncatedSource
from tests.unit.factories import NET, NOW, cache, desired, pod, pod_dir, reservation


def _scanner(_roots: Roots, _opts: ScanOptions) -> Inventory:
    """db-0's sandbox left id-only host-local files (its runtime writes no cache, or the entry is gone);
    its pod directory and log directory are there, so the directory is named and survives."""
    log_dir = PodLogDir(namespace="default", name="db-0", uid="u-missing", path="/logs/default_db-0_u-missing",
                        inode=9, mtime=0.0)
    return Inventory(taken_at=NOW, pod_dirs=(pod_dir("u-web"), pod_dir("u-missing", mounted=True)),
                     pod_logs=(log_dir,),
                     cni_cache=(cache("cweb", uid="u-web", name="web", ip="10.0.0.2"),),
                     ip_reservations=(reservation("10.0.0.2", "cweb"), reservation("10.0.0.7", "cdb")))


def test_a_truncated_list_cannot_free_the_id_only_ip_of_the_pod_it_left_out() -> None:
    """The live GET that saves db-0's directory never runs for its IP reservation: an id-only reservation
    has no owner name, so terminate asks nothing and the file goes (host-local then hands 10.0.0.7, still
    configured in db-0's netns, to the next pod). The pod directory of an absent but named owner proves
    the list may be short; an id-only reservation should then be kept."""
    recorder = Recorder()
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0))
    with Ledger(":memory:") as ledger:
        engine = Engine(roots=Roots(), source=TruncatedSource(), ledger=ledger, executor=recorder,
                        settings=settings, clock=NOW.timestamp, scanner=_scanner)
        report = engine.cycle()
    assert "u-missing" in {item.owner_uid for item, _ in report.sent_back}  # the directory is saved
    assert f"ip_reservation:{NET}/10.0.0.7" not in recorder.actions, recorder.actions


ETCD = StaticPodManifest(path="/etc/kubernetes/manifests/web.yaml", namespace="kube-system", name="web",
                         containers=("web",))
"""A static pod on the pod network (not hostNetwork)."""
H_OLD, H_NEW = "0a" * 16, "0b" * 16


def test_static_pod_whose_mirror_still_carries_the_old_config_hash() -> None:
    """The manifest was edited: the kubelet runs the pod under a new config hash H_NEW, while the API
    still shows the mirror of H_OLD (the kubelet cannot replace it: a finalizer, a rejecting webhook, an
    API outage longer than the minimum age). `_mirrored` calls the manifest mirrored because *a* mirror
    of that name exists, so the running pod's directory is orphaned and its volume unmounted; at terminate
    the live GET of kube-system/web-n1 answers uid != H_NEW, "a newer incarnation", and nothing stops it."""
    mirror = replace(pod("web-n1", "u-mirror", ns="kube-system", ip="10.0.0.4"), static_uid=H_OLD)
    log_dir = PodLogDir(namespace="kube-system", name="web-n1", uid=H_NEW, path=f"/logs/kube-system_web-n1_{H_NEW}",
                        inode=9, mtime=0.0)
    inv = Inventory(taken_at=NOW, static_pods=(ETCD,), pod_logs=(log_dir,),
                    pod_dirs=(pod_dir(H_OLD), replace(pod_dir(H_NEW, mounted=True), container_names=("web",))))
    findings = correlate(inv, desired(mirror, pod("q", "u-q", ip="10.0.0.5")), now=NOW)
    residue = [(f.kind.value, f.id, f.cls.value) for f in findings if f.cls.is_residue and H_NEW in f.id]
    assert residue == [], residue


def test_id_only_reservation_while_an_unmirrored_static_pod_runs() -> None:
    """A static pod on the pod network runs without a mirror in the API; its sandbox left id-only
    host-local files. The manifest protects its directory and cache entries, but not an id-only
    reservation: no claimant, nobody unaccounted (the static pod is not in the list), so leaked_ip."""
    inv = Inventory(taken_at=NOW, static_pods=(ETCD,),
                    cni_cache=(cache("cq", uid="u-q", name="q", ip="10.0.0.5"),),
                    ip_reservations=(reservation("10.0.0.5", "cq"), reservation("10.0.0.4", "cweb")))
    findings = correlate(inv, desired(pod("q", "u-q", ip="10.0.0.5")), now=NOW)
    cls = {f.id: f.cls for f in findings if f.kind is Kind.IP_RESERVATION}
    assert not cls[f"{NET}/10.0.0.4"].is_residue, cls


def test_id_only_reservation_while_a_static_manifest_cannot_be_read() -> None:
    """docs/ownership.md: a manifest that cannot be parsed may declare any pod, so "every absent owner's
    directory and attachments are protected". An id-only reservation is not."""
    broken = StaticPodManifest(path="/etc/kubernetes/manifests/web.yaml", namespace=None, name=None)
    inv = Inventory(taken_at=NOW, static_pods=(broken,),
                    cni_cache=(cache("cq", uid="u-q", name="q", ip="10.0.0.5"),),
                    ip_reservations=(reservation("10.0.0.5", "cq"), reservation("10.0.0.4", "cweb")))
    findings = correlate(inv, desired(pod("q", "u-q", ip="10.0.0.5")), now=NOW)
    cls = {f.id: f.cls for f in findings if f.kind is Kind.IP_RESERVATION}
    assert cls[f"{NET}/10.0.0.4"] is not FindingClass.LEAKED_IP, cls


class MirrorSource:
    name = "mirror"
    mirror = replace(pod("web-n1", "u-mirror", ns="kube-system", ip="10.0.0.4"), static_uid=H_OLD)

    def fetch(self) -> DesiredState:
        return DesiredState(node="n1", pods=(self.mirror, pod("q", "u-q", ip="10.0.0.5")), source=self.name,
                            fetched_at=NOW)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        return self.mirror if (namespace, name) == ("kube-system", "web-n1") else None


def test_static_pod_with_a_lagging_mirror_loses_its_volume_through_the_engine() -> None:
    def scanner(_roots: Roots, _opts: ScanOptions) -> Inventory:
        log_dir = PodLogDir(namespace="kube-system", name="web-n1", uid=H_NEW,
                            path=f"/logs/kube-system_web-n1_{H_NEW}", inode=9, mtime=0.0)
        return Inventory(taken_at=NOW, static_pods=(ETCD,), pod_logs=(log_dir,),
                         pod_dirs=(pod_dir(H_OLD), pod_dir("u-q"),
                                   replace(pod_dir(H_NEW, mounted=True), container_names=("web",))))
    recorder = Recorder()
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0))
    with Ledger(":memory:") as ledger:
        engine = Engine(roots=Roots(), source=MirrorSource(), ledger=ledger, executor=recorder,
                        settings=settings, clock=NOW.timestamp, scanner=scanner)
        engine.cycle()
    assert not [a for a in recorder.actions if H_NEW in a], recorder.actions


def test_the_newest_sandbox_of_an_unmirrored_static_pod_is_not_removed() -> None:
    """The static pod web runs from its manifest without a mirror in the API; its only sandbox is NotReady
    (it died; the kubelet is about to restart it in place). runtime.py's sandbox rule never consults the
    static pod manifests: "NotReady and its pod is not in the API" -> orphaned_sandbox, and the live GET
    at terminate finds no mirror either, so StopPodSandbox + RemovePodSandbox run on the kubelet's newest
    sandbox of a pod that exists (the kubelet's own GC keeps that one)."""
    from tests.unit.test_runtime_ownership import sandbox, view

    sb = replace(sandbox("s1", H_NEW, ready=False, name="web-n1"), pod_namespace="kube-system")
    inv = Inventory(taken_at=NOW, static_pods=(ETCD,), runtime=view(sb, sandbox("c2", "u-q", ips=("10.0.0.5",))))
    findings = correlate(inv, desired(pod("q", "u-q", ip="10.0.0.5")), now=NOW)
    f = next(f for f in findings if f.kind is Kind.SANDBOX and f.id == "s1")
    assert not f.cls.is_residue, (f.cls, f.evidence)
