"""A pod the API lost while it runs (an etcd restored from a backup) keeps its directory and volumes while
its sandbox shows READY, and while the runtime is unreachable ('needs the runtime's word'). A runtime that
answers with a list that is not the node's whole word is the same doubt: an empty list while pods run
(another runtime's socket: a node moved from Docker to containerd, a cri-o socket beside containerd's) or a
list that misses a running pod's sandbox cannot say that the lost pod stopped either; the pod log directory
of that pod is kept then (`correlate_pod_logs`), its directory and volumes were residue."""

from __future__ import annotations

import pytest

from nodegc.model.pods import Pod
from nodegc.model.runtime import RuntimeView
from nodegc.planning.correlate import correlate
from nodegc.planning.runtime import runtime_unusable
from tests.adversarial.found15_desired.test_running_pod_absent_from_the_api import (
    WEB,
    kubelet_parts,
    node,
    sandbox,
    view,
)
from tests.unit.factories import NOW, desired, pod

OTHER = pod("other", "uid-other", ip="10.0.1.3")

EMPTY = view()
"""Another runtime's socket: it answers, and lists no sandbox while `web` runs."""
MISSING = view(sandbox("b", "uid-web"))
"""A list without `other`'s sandbox, which runs: not the node's whole word."""


@pytest.mark.parametrize(("runtime", "pods"), [(EMPTY, (WEB,)), (MISSING, (WEB, OTHER))],
                         ids=["empty_list", "list_missing_a_running_pod"])
def test_a_list_that_is_not_the_runtimes_whole_word_keeps_them(runtime: RuntimeView, pods: tuple[Pod, ...]) -> None:
    assert runtime_unusable(runtime, pods) is not None
    parts = kubelet_parts(correlate(node(runtime), desired(*pods), now=NOW))
    assert parts and not any(cls.is_residue for cls in parts.values()), parts
