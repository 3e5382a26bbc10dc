"""A live GET put the name it was given into the request path as it was: a name holding `#`, `?` or `/`
(a CRI sandbox's metadata, a CNI cache entry's K8S_POD_NAME, an EndpointSlice targetRef: none of them
checked by the API) asked about another object. `web#1` fetched pod `web` and handed it back as the
answer; `ghost?x` drew a NotFound of `ghost`, which does not name `ghost?x` and so raised: terminate then
stopped at that item on every cycle ("live GET failed, nothing proceeds"), and the sweeper failed the
whole slice on every pass. The name is one path segment: no object has it, and the API says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodegc.desired.kube import KubeSource
from nodegc.desired.source import SourceError
from tests.adversarial.found9.conftest import Tamper, pod
from tests.api.fakeapi import FakeKubeAPI
from tests.api.regressions.test_endpoint_false_removal import run_pass
from tests.api.test_controller import endpoint, endpointslice, service, slice_addresses


def _source(kubeconfig: Path) -> KubeSource:
    return KubeSource("n1", kubeconfig=kubeconfig, prove_current=False)


@pytest.mark.parametrize("name", ["web#1", "web?x=1", "web/status", "x/../web", "..", "."])
def test_a_get_never_answers_about_another_pod(api: FakeKubeAPI, kubeconfig: Path, name: str) -> None:
    api.add_pod(pod("web"))
    with _source(kubeconfig) as source:
        assert source.get_pod("default", name) is None


@pytest.mark.parametrize("name", ["ghost#1", "ghost?x=1", "ghost/1"])
def test_a_name_no_pod_has_is_not_found_not_a_failure(api: FakeKubeAPI, kubeconfig: Path, name: str) -> None:
    with _source(kubeconfig) as source:
        assert source.get_pod("default", name) is None


def test_a_pod_is_still_found_by_its_name(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add_pod(pod("web"))
    with _source(kubeconfig) as source:
        found = source.get_pod("default", "web")
    assert found is not None and found.name == "web"


def test_one_odd_target_name_does_not_hold_back_a_slices_removals(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.add("services", service())
    api.add("endpointslices", endpointslice(
        "api-manual", endpoint("10.0.0.6", "gone"), endpoint("10.0.0.7", "ghost#1")))
    report = run_pass(kubeconfig)
    assert report is not None
    assert report.failures == []
    assert sorted(s.reason.value for s in report.removed) == ["pod_missing", "pod_missing"]
    assert slice_addresses(api, "api-manual") == []


def test_an_answer_about_another_pod_is_no_answer(api: FakeKubeAPI, tamper: Tamper, kubeconfig: Path) -> None:
    """A proxy or server that answers a GET of one pod with another (a misrouted request) is not the API's
    word on the pod asked about."""
    api.add_pod(pod("web"))

    def another(body: dict[str, Any], query: dict[str, str]) -> dict[str, Any]:
        body["metadata"]["name"] = "web-2"
        return body

    tamper.gets(another)
    with _source(kubeconfig) as source, pytest.raises(SourceError, match="about default/web-2"):
        source.get_pod("default", "web")
