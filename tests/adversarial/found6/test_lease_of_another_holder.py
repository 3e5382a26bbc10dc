"""The node Lease proves a list current only as this node's kubelet's renewal: a Lease named after the node
but held by someone else (holderIdentity of another node or component) is renewed on another clock, by a
writer whose renewals say nothing about this kubelet, and proves nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import lightkube
import pytest

from nodegc.api.currency import NODE_LEASE_NAMESPACE, NotCurrent, node_lease_witness
from tests.api.adversarial.test_desired_state_api import NODE
from tests.api.fakeapi import LEASES, FakeKubeAPI


def _lease(api: FakeKubeAPI, holder: str | None) -> None:
    spec: dict[str, object] = {"leaseDurationSeconds": 40,
                               "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
    if holder is not None:
        spec["holderIdentity"] = holder
    api.store.put({"metadata": {"name": NODE, "namespace": NODE_LEASE_NAMESPACE}, "spec": spec}, LEASES)


def _witness(kubeconfig: Path) -> object:
    client = lightkube.Client(lightkube.KubeConfig.from_file(kubeconfig))
    try:
        return node_lease_witness(client, NODE, now=datetime.now(UTC))
    finally:
        client.close()


def test_a_node_lease_held_by_another_proves_nothing(api: FakeKubeAPI, kubeconfig: Path) -> None:
    _lease(api, "another-node")
    with pytest.raises(NotCurrent, match="held by"):
        _witness(kubeconfig)


def test_a_node_lease_held_by_no_one_proves_nothing(api: FakeKubeAPI, kubeconfig: Path) -> None:
    _lease(api, None)
    with pytest.raises(NotCurrent, match="held by None"):
        _witness(kubeconfig)


def test_the_nodes_own_lease_is_a_witness(api: FakeKubeAPI, kubeconfig: Path) -> None:
    _lease(api, NODE)
    assert _witness(kubeconfig) is not None
