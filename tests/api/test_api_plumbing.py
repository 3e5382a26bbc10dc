"""The API layer's promises: one client per agent process, one error translator, one loader."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest
from lightkube.resources.core_v1 import Pod

from nodegc.agent import Wakeups, _desired
from nodegc.api.client import load_config, make_client
from nodegc.api.errors import KubeError, call
from nodegc.desired.reflector import PodReflector
from nodegc.kube.events import EventRecorder
from nodegc.settings import Roots
from nodegc.wiring import AgentSettings, SafetySettings, SourceSettings
from tests.api.fakeapi import FakeKubeAPI


def test_the_agent_builds_one_client_for_watch_gets_and_events(tmp_path: Path) -> None:
    with FakeKubeAPI(bookmark_interval=0.05, kubelets=("node-a",)) as api:
        settings = AgentSettings(
            roots=Roots(), safety=SafetySettings(),
            source=SourceSettings(node="node-a", kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig")))
        with ExitStack() as cleanup:
            source, events, conditions = _desired(settings, "node-a", Wakeups(), cleanup)
            assert isinstance(source, PodReflector) and isinstance(events, EventRecorder)
            assert source._client is events._client
            assert conditions is not None and conditions.client is events._client
            assert source.wait_synced(30)


def test_loader_errors_never_quote_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("users:\n  - token: s3cr3t-token\n    : [\n")
    with pytest.raises(KubeError, match="not valid YAML at line") as info:
        load_config(bad)
    assert "s3cr3t" not in str(info.value)
    with pytest.raises(KubeError, match="configuration"):
        make_client(tmp_path / "missing")


def test_translator_keeps_status_and_cause(tmp_path: Path) -> None:
    with FakeKubeAPI() as api:
        client = make_client(api.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            with pytest.raises(KubeError) as info:
                call("getting pod default/x", lambda: client.get(Pod, "x", namespace="default"))
        finally:
            client.close()
    assert info.value.not_found and info.value.code == 404
    assert str(info.value) == "getting pod default/x failed: HTTP 404 NotFound"
    assert info.value.__cause__ is not None
