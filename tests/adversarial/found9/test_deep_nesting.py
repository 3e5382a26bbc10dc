"""An API answer nested thousands deep makes the JSON decoder raise RecursionError, which is neither a
ValueError nor an HTTP error: it went through `api.errors.call` untranslated, out of the desired state's
fetch (not a SourceError, so out of the engine's cycle: `nodegc scan`/`clean` ended in a traceback) and out
of a live GET. It is a malformed answer (KubeError, then SourceError) like any other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightkube
import pytest
from lightkube.resources.core_v1 import Pod as PodResource

from nodegc.api.errors import KubeError
from nodegc.api.reads import get_live, list_all
from nodegc.desired.kube import KubeSource
from nodegc.desired.source import SourceError
from tests.adversarial.found9.conftest import Tamper, pod
from tests.api.fakeapi import FakeKubeAPI

DEPTH = 200_000


def _deep(body: dict[str, Any], query: dict[str, str]) -> bytes:
    return (b'{"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": [{"metadata": {"uid": '
            + b"[" * DEPTH + b"]" * DEPTH + b"}}]}")


def _deep_pod(body: dict[str, Any], query: dict[str, str]) -> bytes:
    return b'{"metadata": {"name": "web", "uid": ' + b"[" * DEPTH + b"]" * DEPTH + b"}}"


def test_a_list_nested_thousands_deep_is_a_malformed_answer(
    api: FakeKubeAPI, tamper: Tamper, client: lightkube.Client, kubeconfig: Path
) -> None:
    api.add_pod(pod("web"))
    tamper.lists(_deep)
    with pytest.raises(KubeError, match="malformed"):
        list_all(client, PodResource, what="listing pods")
    with KubeSource("n1", kubeconfig=kubeconfig, prove_current=False) as source, pytest.raises(SourceError):
        source.fetch()


def test_a_get_nested_thousands_deep_is_a_malformed_answer(
    api: FakeKubeAPI, tamper: Tamper, client: lightkube.Client, kubeconfig: Path
) -> None:
    api.add_pod(pod("web"))
    tamper.gets(_deep_pod)
    with pytest.raises(KubeError, match="malformed"):
        get_live(client, PodResource, namespace="default", name="web", what="getting pod default/web")
    with KubeSource("n1", kubeconfig=kubeconfig, prove_current=False) as source, pytest.raises(SourceError):
        source.get_pod("default", "web")
