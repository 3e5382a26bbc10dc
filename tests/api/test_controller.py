"""`nodegc controller` against the HTTP-level fake API: the Lease, the slice patches, the requests sent."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightkube
import pytest

from nodegc.api.client import make_client
from nodegc.api.errors import KubeError
from nodegc.controller import (
    Controller,
    ControllerSettings,
    add_controller_parser,
    cmd_controller,
    lease_config,
)
from nodegc.kube.endpointslices import EndpointSliceSweeper, SweepOptions
from nodegc.kube.leases import LeaderElector, LeaseConfig
from nodegc.model.endpoints import ENDPOINTSLICE_CONTROLLER, MANAGED_BY_LABEL, SERVICE_NAME_LABEL
from tests.api.fakeapi import FakeKubeAPI, RecordedRequest

NS = "shop"
SLICES = "/apis/discovery.k8s.io/v1"
SLICE_PATH = f"{SLICES}/namespaces/{NS}/endpointslices"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/nodegc-system/leases"
LEASE_PATH = f"{LEASES}/nodegc-controller"
EVENTS = f"/api/v1/namespaces/{NS}/events"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------------------------------ fixtures


def pod(name: str, ip: str, *, phase: str = "Running", uid: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS, "uid": uid or f"uid-{name}",
                     "creationTimestamp": "2024-05-01T10:00:00Z"},
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "busybox"}]},
        "status": {"phase": phase, "podIP": ip, "podIPs": [{"ip": ip}]},
    }


def endpoint(ip: str, pod_name: str, *, uid: str | None = None) -> dict[str, Any]:
    return {
        "addresses": [ip],
        "conditions": {"ready": True},
        "nodeName": "n1",
        "targetRef": {"kind": "Pod", "namespace": NS, "name": pod_name, "uid": uid or f"uid-{pod_name}"},
    }


def endpointslice(name: str, *endpoints: dict[str, Any], managed_by: str | None = None,
                  service: str = "api") -> dict[str, Any]:
    labels = {SERVICE_NAME_LABEL: service}
    if managed_by is not None:
        labels[MANAGED_BY_LABEL] = managed_by
    return {
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "addressType": "IPv4",
        "endpoints": list(endpoints),
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def service(name: str = "api") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS}, "spec": {"ports": [{"port": 80}]}}


@pytest.fixture
def cluster(api: FakeKubeAPI) -> FakeKubeAPI:
    """A selector-less Service with a hand-written slice: one live pod, one deleted, one finished."""
    api.add("services", service())
    api.add_pod(pod("live", "10.0.0.5"))
    api.add_pod(pod("done", "10.0.0.7", phase="Succeeded"))
    api.add("endpointslices", endpointslice(
        "api-manual", endpoint("10.0.0.5", "live"), endpoint("10.0.0.6", "gone"),
        endpoint("10.0.0.7", "done")))
    return api


class Replica:
    def __init__(self, kubeconfig: Path, identity: str, *, monotonic: Clock | None = None,
                 dry_run: bool = False, max_patches: int = 50, cache: bool = False) -> None:
        self.client: lightkube.Client = make_client(kubeconfig, field_manager="nodegc-controller")
        lease = lease_config(namespace="nodegc-system", name="nodegc-controller", identity=identity,
                             lease_duration=15.0)
        elector = LeaderElector(self.client, lease, monotonic=monotonic) if monotonic else None
        self.controller = Controller(
            self.client,
            ControllerSettings(lease=lease, interval=0.05,
                               sweep=SweepOptions(dry_run=dry_run, max_patches=max_patches), cache=cache),
            elector=elector,
        )
        self.elector = self.controller.elector

    def close(self) -> None:
        if self.controller.cache is not None:
            self.controller.cache.stop()
        self.client.close()


@pytest.fixture
def replicas(kubeconfig: Path) -> Iterator[list[Replica]]:
    made: list[Replica] = []
    yield made
    for r in made:
        r.close()


def writes(api: FakeKubeAPI, prefix: str = "/") -> list[RecordedRequest]:
    return [r for r in api.recorded(path_prefix=prefix) if r.method in ("POST", "PUT", "PATCH", "DELETE")]


def slice_addresses(api: FakeKubeAPI, name: str) -> list[str]:
    obj = api.get("endpointslices", NS, name)
    assert obj is not None
    return [a for ep in obj.get("endpoints") or [] for a in ep["addresses"]]


# ------------------------------------------------------------------------------------------ removal


def test_stale_endpoints_in_a_manual_slice_are_removed_under_the_lease(
    cluster: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    api = cluster
    listed = api.get("endpointslices", NS, "api-manual")
    assert listed is not None
    listed_rv = listed["metadata"]["resourceVersion"]
    r1 = Replica(kubeconfig, "r1")
    replicas.append(r1)
    assert r1.elector.try_acquire_or_renew()
    report = r1.controller.run_once()

    assert report is not None
    assert sorted(s.reason.value for s in report.removed) == ["pod_missing", "pod_terminal"]
    assert report.patches == 1 and report.conflicts == 0
    assert slice_addresses(api, "api-manual") == ["10.0.0.5"]
    # The surviving endpoint comes back with every field it had.
    after = api.get("endpointslices", NS, "api-manual")
    assert after is not None and after["endpoints"] == [endpoint("10.0.0.5", "live")]

    [patch] = writes(api, SLICES)
    assert patch.method == "PATCH"
    assert patch.path == f"{SLICE_PATH}/api-manual"
    assert patch.headers["content-type"] == "application/merge-patch+json"
    assert patch.body["metadata"] == {"resourceVersion": listed_rv}
    assert patch.body["endpoints"] == [endpoint("10.0.0.5", "live")]

    order = [(r.method, r.path) for r in api.requests]
    lease_write = order.index(("POST", LEASES))
    # Listed slices first, then pods; each endpoint's pod re-read live before the write.
    slice_list = order.index(("GET", f"{SLICES}/endpointslices"))
    pod_list = order.index(("GET", "/api/v1/pods"))
    pod_item = f"/api/v1/namespaces/{NS}/pods/"
    live_gets = [i for i, (m, p) in enumerate(order) if m == "GET" and p.startswith(pod_item)]
    assert lease_write < slice_list < pod_list < min(live_gets) and max(live_gets) < order.index(
        ("PATCH", f"{SLICE_PATH}/api-manual"))
    assert {order[i][1].rsplit("/", 1)[1] for i in live_gets} == {"gone", "done"}

    # The Lease names r1; the removal is told on the Service once the events are flushed.
    lease = api.get("leases", "nodegc-system", "nodegc-controller")
    assert lease is not None and lease["spec"]["holderIdentity"] == "r1"
    assert r1.controller.events is not None
    r1.controller.events.flush()
    [event] = api.objects("events", namespace=NS)
    assert event["involvedObject"]["kind"] == "Service" and event["involvedObject"]["name"] == "api"
    assert event["reason"] == "StaleEndpointRemoved" and event["type"] == "Normal"


def test_second_pass_finds_nothing_to_do(
    cluster: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    r1 = Replica(kubeconfig, "r1")
    replicas.append(r1)
    assert r1.elector.try_acquire_or_renew()
    r1.controller.run_once()
    cluster.clear_requests()
    report = r1.controller.run_once()
    assert report is not None and report.stale == []
    assert writes(cluster, SLICES) == []


def test_conflict_is_retried_on_fresh_data(
    cluster: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    api = cluster
    old = api.get("endpointslices", NS, "api-manual")
    assert old is not None
    # Someone else changes the slice after our list: adds a live endpoint and a stale one.
    api.add_pod(pod("new", "10.0.0.8"))
    fresh = api.update("endpointslices", NS, "api-manual", {"endpoints": [
        *old["endpoints"], endpoint("10.0.0.8", "new"), endpoint("10.0.0.9", "gone-too")]})
    api.serve_stale_list([old], resource="endpointslices")
    r1 = Replica(kubeconfig, "r1")
    replicas.append(r1)
    assert r1.elector.try_acquire_or_renew()
    api.clear_requests()

    report = r1.controller.run_once()

    assert report is not None and report.conflicts == 1 and report.patches == 1
    first, second = writes(api, SLICES)
    assert first.body["metadata"]["resourceVersion"] == old["metadata"]["resourceVersion"]
    assert second.body["metadata"]["resourceVersion"] == fresh["metadata"]["resourceVersion"]
    between = api.requests[api.requests.index(first) + 1:api.requests.index(second)]
    assert ("GET", f"{SLICE_PATH}/api-manual") in [(r.method, r.path) for r in between]
    # Recomputed on the fresh slice: the other writer's live endpoint stays, its stale one goes too.
    assert slice_addresses(api, "api-manual") == ["10.0.0.5", "10.0.0.8"]
    assert sorted(s.endpoint.addresses[0] for s in report.removed) == ["10.0.0.6", "10.0.0.7", "10.0.0.9"]


def test_conflicts_are_bounded(cluster: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]) -> None:
    r1 = Replica(kubeconfig, "r1")
    replicas.append(r1)
    assert r1.elector.try_acquire_or_renew()
    # Every PATCH conflicts, every re-read between them is answered: PATCH, GET, PATCH, GET ...
    cluster.fail_next(409, path_prefix=f"{SLICE_PATH}/api-manual")
    for _ in range(SweepOptions().max_conflict_retries):
        cluster.fail_next(409, after=1, path_prefix=f"{SLICE_PATH}/api-manual")
    cluster.clear_requests()
    report = r1.controller.run_once()
    assert report is not None and report.patches == 0
    assert report.conflicts == SweepOptions().max_conflict_retries + 1
    assert len(report.failures) == 1 and "conflicting" in report.failures[0]
    assert len([r for r in writes(cluster, SLICES) if r.method == "PATCH"]) == report.conflicts


def test_an_endpoint_whose_pod_is_back_on_the_live_read_is_kept(
    cluster: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    api = cluster
    # The pod list is older than the pod "gone" (say it was just created): the live GET finds it.
    api.serve_stale_list([pod("live", "10.0.0.5")], resource="pods")
    api.add_pod(pod("gone", "10.0.0.6"))
    r1 = Replica(kubeconfig, "r1")
    replicas.append(r1)
    assert r1.elector.try_acquire_or_renew()
    report = r1.controller.run_once()
    assert report is not None and report.kept_on_reverify == 1
    assert slice_addresses(api, "api-manual") == ["10.0.0.5", "10.0.0.6"]


def test_a_pod_list_failure_changes_nothing(
    cluster: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    r1 = Replica(kubeconfig, "r1")
    replicas.append(r1)
    assert r1.elector.try_acquire_or_renew()
    cluster.fail_next(503, path_prefix="/api/v1/pods")
    cluster.clear_requests()
    assert r1.controller.run_once() is None
    assert writes(cluster, SLICES) == []


def test_listing_sweeper_pages_slices_and_pods_with_continue_tokens(
    cluster: FakeKubeAPI, client: lightkube.Client
) -> None:
    """Without a cache, a pass lists slices and pods through `api.reads` pages of `chunk_size`: every page
    after the first carries the previous page's continue token."""
    cluster.add("endpointslices", endpointslice("api-other", endpoint("10.0.0.5", "live")))
    cluster.clear_requests()
    sweeper = EndpointSliceSweeper(client, is_leader=lambda: True, options=SweepOptions(dry_run=True, chunk_size=1))
    report = sweeper.sweep()
    assert sorted(s.endpoint.addresses[0] for s in report.would_remove) == ["10.0.0.6", "10.0.0.7"]
    for path, objects in ((f"{SLICES}/endpointslices", 2), ("/api/v1/pods", 2)):
        pages = [r for r in cluster.requests_to(path) if not r.is_watch]
        assert len(pages) >= objects, pages
        assert all(r.query["limit"] == "1" for r in pages)
        assert "continue" not in pages[0].query and all(r.query.get("continue") for r in pages[1:])


@pytest.mark.parametrize("path", [f"{SLICES}/endpointslices", "/api/v1/pods"])
def test_a_continue_token_gone_mid_list_fails_the_whole_pass(
    cluster: FakeKubeAPI, client: lightkube.Client, path: str
) -> None:
    """410 Gone on a later page (the continue token expired): the list is not finished at another version
    and nothing is planned from its first page."""
    cluster.add("endpointslices", endpointslice("api-other", endpoint("10.0.0.5", "live")))
    cluster.fail_next(410, after=1, path_prefix=path)
    sweeper = EndpointSliceSweeper(client, is_leader=lambda: True, options=SweepOptions(chunk_size=1))
    with pytest.raises(KubeError) as failed:
        sweeper.sweep()
    assert failed.value.gone
    assert writes(cluster, SLICES) == []
    assert slice_addresses(cluster, "api-manual") == ["10.0.0.5", "10.0.0.6", "10.0.0.7"]


def test_max_patches_per_pass(api: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]) -> None:
    for i in range(3):
        api.add("endpointslices", endpointslice(f"s{i}", endpoint(f"10.0.1.{i}", f"gone{i}")))
    r1 = Replica(kubeconfig, "r1", max_patches=2)
    replicas.append(r1)
    assert r1.elector.try_acquire_or_renew()
    report = r1.controller.run_once()
    assert report is not None and report.patches == 2 and report.deferred_slices == 1
    assert len(writes(api, SLICES)) == 2
    report = r1.controller.run_once()
    assert report is not None and report.patches == 1 and report.deferred_slices == 0


def test_dry_run_writes_only_the_lease(
    cluster: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    r1 = Replica(kubeconfig, "r1", dry_run=True)
    replicas.append(r1)
    assert r1.elector.try_acquire_or_renew()
    report = r1.controller.run_once()
    assert report is not None and len(report.would_remove) == 2 and report.removed == []
    assert r1.controller.events is None
    assert {r.path for r in writes(cluster)} == {LEASES}


# ------------------------------------------------------------------------------------- controller-managed


def test_controller_managed_slices_are_only_reported(
    api: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    api.add("services", service())
    api.add_pod(pod("live", "10.0.0.5"))
    api.add("endpointslices", endpointslice(
        "api-x7k2p", endpoint("10.0.0.5", "live"), endpoint("10.0.0.6", "gone"),
        managed_by=ENDPOINTSLICE_CONTROLLER))
    r1 = Replica(kubeconfig, "r1")
    replicas.append(r1)
    assert r1.elector.try_acquire_or_renew()

    report = r1.controller.run_once()
    assert report is not None
    assert [s.pod_label for s in report.reported] == [f"{NS}/gone"] and report.removed == []
    assert slice_addresses(api, "api-x7k2p") == ["10.0.0.5", "10.0.0.6"]
    assert writes(api, SLICES) == []
    # No live GETs either: nothing is going to be written.
    assert not [r for r in api.requests if r.path.startswith(f"/api/v1/namespaces/{NS}/pods/")]

    events = r1.controller.events
    assert events is not None
    events.flush()
    [post] = writes(api, EVENTS)
    assert post.method == "POST"
    assert post.body["involvedObject"] == {
        "kind": "Service", "name": "api", "namespace": NS, "apiVersion": "v1"}
    assert post.body["reason"] == "StaleEndpoint" and post.body["type"] == "Warning"
    assert post.body["count"] == 1
    assert "10.0.0.6" in post.body["message"] and ENDPOINTSLICE_CONTROLLER in post.body["message"]

    # The next pass finds it again: the same Event's count goes up, no second Event.
    r1.controller.run_once()
    events.flush()
    posts_and_patches = writes(api, EVENTS)
    assert [r.method for r in posts_and_patches] == ["POST", "PATCH"]
    assert posts_and_patches[1].body["count"] == 2
    [stored] = api.objects("events", namespace=NS)
    assert stored["count"] == 2


# ------------------------------------------------------------------------------------------ leadership


def test_second_replica_does_nothing_while_the_first_holds_the_lease(
    cluster: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    api = cluster
    r1, r2 = Replica(kubeconfig, "r1"), Replica(kubeconfig, "r2")
    replicas += [r1, r2]
    assert r1.elector.try_acquire_or_renew()
    api.clear_requests()

    for _ in range(3):
        assert not r2.elector.try_acquire_or_renew()
        assert r2.controller.run_once() is None
    assert not r2.elector.is_leader()
    assert r2.elector.observed_holder == "r1"
    # r2 only read the Lease: no writes at all, not even a list of slices.
    assert {(r.method, r.path) for r in api.requests} == {("GET", LEASE_PATH)}
    assert slice_addresses(api, "api-manual") == ["10.0.0.5", "10.0.0.6", "10.0.0.7"]

    # The first acts as before.
    assert r1.elector.try_acquire_or_renew()
    assert r1.controller.run_once() is not None
    assert slice_addresses(api, "api-manual") == ["10.0.0.5"]


def test_takeover_only_after_the_lease_went_unrenewed_for_its_duration(
    cluster: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    api = cluster
    c1, c2 = Clock(), Clock()
    r1, r2 = Replica(kubeconfig, "r1", monotonic=c1), Replica(kubeconfig, "r2", monotonic=c2)
    replicas += [r1, r2]
    assert r1.elector.try_acquire_or_renew()
    assert not r2.elector.try_acquire_or_renew()
    # r1 stops renewing (hung, partitioned). r2 must see the same record for the whole duration.
    c2.now += 14.0
    assert not r2.elector.try_acquire_or_renew()
    # r1's own deadline (10 s) passed long before: it stopped acting without any request.
    c1.now += 10.0
    api.clear_requests()
    assert not r1.elector.is_leader()
    assert r1.controller.run_once() is None
    assert api.requests == []

    c2.now += 1.5
    assert r2.elector.try_acquire_or_renew()
    lease = api.get("leases", "nodegc-system", "nodegc-controller")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "r2" and lease["spec"]["leaseTransitions"] == 1
    # r1 comes back: it sees r2's fresh record and stays a follower.
    assert not r1.elector.try_acquire_or_renew()


def test_a_failed_renew_stops_action_at_once(
    cluster: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    r1 = Replica(kubeconfig, "r1")
    replicas.append(r1)
    assert r1.elector.try_acquire_or_renew()
    cluster.fail_next(500, path_prefix=LEASES)
    assert not r1.elector.try_acquire_or_renew()
    assert not r1.elector.is_leader()
    cluster.clear_requests()
    assert r1.controller.run_once() is None
    assert cluster.requests == []
    # Still the holder on record: the next renew takes it back.
    assert r1.elector.try_acquire_or_renew()


def test_leadership_lost_during_a_pass_stops_before_the_write(
    cluster: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    r1 = Replica(kubeconfig, "r1")
    replicas.append(r1)
    answers = iter([True])  # leader when the pass starts, not any more when it is about to write

    sweeper = EndpointSliceSweeper(r1.client, is_leader=lambda: next(answers, False))
    report = sweeper.sweep()
    assert report.lost_leadership and report.removed == []
    assert len(report.stale) == 2
    assert writes(cluster, SLICES) == []


def test_lease_renewal_is_a_patch_guarded_by_resource_version(
    api: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    r1 = Replica(kubeconfig, "r1")
    replicas.append(r1)
    assert r1.elector.try_acquire_or_renew()
    created = api.get("leases", "nodegc-system", "nodegc-controller")
    assert created is not None
    assert created["spec"]["leaseDurationSeconds"] == 15
    assert created["spec"]["renewTime"].endswith("Z") and "." in created["spec"]["renewTime"]
    api.clear_requests()

    assert r1.elector.try_acquire_or_renew()
    [renew] = writes(api)
    assert renew.method == "PATCH" and renew.path == LEASE_PATH
    assert renew.body["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert renew.body["spec"]["holderIdentity"] == "r1"
    assert renew.body["spec"]["acquireTime"] == created["spec"]["acquireTime"]
    assert len(renew.body["spec"]["renewTime"].split(".")[1]) == len("000000Z")


def test_lease_conflict_rereads_and_retries(
    api: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    r1 = Replica(kubeconfig, "r1")
    replicas.append(r1)
    assert r1.elector.try_acquire_or_renew()
    api.clear_requests()
    api.fail_next(409, path_prefix=LEASE_PATH, after=1)  # the GET passes, the PATCH conflicts
    assert r1.elector.try_acquire_or_renew()
    assert [r.method for r in api.requests] == ["GET", "PATCH", "GET", "PATCH"]


def test_release_hands_the_lease_over(
    cluster: FakeKubeAPI, kubeconfig: Path, replicas: list[Replica]
) -> None:
    r1, r2 = Replica(kubeconfig, "r1"), Replica(kubeconfig, "r2")
    replicas += [r1, r2]
    assert r1.elector.try_acquire_or_renew()
    assert not r2.elector.try_acquire_or_renew()
    r1.elector.release()
    assert not r1.elector.is_leader()
    assert r2.elector.try_acquire_or_renew()


def test_lease_config_rejects_a_deadline_beyond_the_duration() -> None:
    with pytest.raises(ValueError):
        LeaseConfig(namespace="n", name="l", identity="me", lease_duration=10, renew_deadline=10)
    with pytest.raises(ValueError):
        LeaseConfig(namespace="n", name="l", identity="")


# ------------------------------------------------------------------------------------------ the command


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nodegc")
    sub = parser.add_subparsers(dest="command", required=True)
    add_controller_parser(sub, [])
    return parser.parse_args(argv)


def test_cmd_controller_runs_passes_and_releases_the_lease(cluster: FakeKubeAPI, kubeconfig: Path) -> None:
    args = parse(["controller", "--kubeconfig", str(kubeconfig), "--lease-namespace", "nodegc-system",
                  "--identity", "replica-1", "--interval", "0.05", "--metrics-address", "",
                  "--max-passes", "2"])
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(cmd_controller(args)))
    thread.start()
    thread.join(timeout=20)
    assert result == [0]
    assert slice_addresses(cluster, "api-manual") == ["10.0.0.5"]
    lease = cluster.get("leases", "nodegc-system", "nodegc-controller")
    assert lease is not None and not lease["spec"].get("holderIdentity")
    # The Event about the removal was flushed on the way out.
    [event] = cluster.objects("events", namespace=NS)
    assert event["reason"] == "StaleEndpointRemoved"
    assert event["reportingInstance"] == "replica-1"


def test_cmd_controller_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "nodegc-controller-abc")
    args = parse(["controller"])
    assert args.lease_name == "nodegc-controller"
    assert args.interval == 30.0 and args.lease_duration == 15.0 and args.max_patches_per_pass == 50
    assert args.identity is None and not args.dry_run


def test_cmd_controller_usage_errors(kubeconfig: Path) -> None:
    args = parse(["controller", "--kubeconfig", str(kubeconfig), "--lease-duration", "0"])
    assert cmd_controller(args) == 2
