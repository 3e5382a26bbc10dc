"""The node Lease's renewTime is written by this node's kubelet on this node's clock, so a renewal dated
after the reader's now is a broken clock (the clock stepped back after the renewals, or the Lease is not
this kubelet's own): its age cannot be told. Accepting it as "renewed 0 s ago" widens the freshness window
by the step, and the list is then dated now while the answer may be minutes old: a lagging proxy's
photograph that misses a pod created since passes the proof and is taken as current."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nodegc.api.currency import NotCurrent, node_lease_witness
from nodegc.desired.kube import KubeSource
from nodegc.desired.source import SourceError
from tests.api.adversarial.test_desired_state_api import NODE, older_photo
from tests.api.fakeapi import FakeKubeAPI


def test_a_lease_renewed_in_the_future_proves_nothing(api: FakeKubeAPI, kubeconfig: Path) -> None:
    # Renewed by a clock 9 minutes ahead, 5 minutes ago: it reads as renewed 4 minutes from now.
    api.renew_node_lease(NODE, at=datetime.now(UTC) + timedelta(minutes=4))
    stale_rv = older_photo(api)  # `web` is created after the photo the lagging proxy answers with
    api.serve_stale_list(stale_rv, resource="pods")
    with KubeSource(NODE, kubeconfig=kubeconfig) as source, pytest.raises(SourceError, match="in the future"):
        source.fetch()


def test_a_renewal_moments_after_the_reader_took_its_time_is_current(api: FakeKubeAPI, kubeconfig: Path) -> None:
    """The kubelet may renew between the reader's clock read and its GET: that is no broken clock."""
    before = datetime.now(UTC)
    api.renew_node_lease(NODE, at=before + timedelta(seconds=2))
    import lightkube

    client = lightkube.Client(lightkube.KubeConfig.from_file(kubeconfig))
    try:
        witness = node_lease_witness(client, NODE, now=before)
    finally:
        client.close()
    assert witness.at == before + timedelta(seconds=2)
    api.renew_node_lease(NODE, at=before + timedelta(minutes=4))
    client = lightkube.Client(lightkube.KubeConfig.from_file(kubeconfig))
    try:
        with pytest.raises(NotCurrent, match="in the future"):
            node_lease_witness(client, NODE, now=before)
    finally:
        client.close()
