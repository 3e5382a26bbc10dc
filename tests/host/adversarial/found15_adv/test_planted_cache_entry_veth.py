"""A libcni cache entry planted by whoever can write the CNI data dir (a pod with a hostPath on
/var/lib/cni), on a real node with the real plugins: a copy of a live pod's entry under another container id,
another pod UID (no such pod) and a namespace that does not exist. Nothing of the live pod's is tied to it:
the planner finds it a stale entry, and every part of the live pod in use.

The direct teardown (`reclaim.teardown`) then deleted the host veth the entry's cached result names, checked
by name, kind and MAC only: the live pod's veth, whose name and MAC anyone on the node can read. The plugins'
DEL never deletes a host veth by name: the bridge plugin deletes the container's interface inside the
namespace the entry names, and the host end goes with it. A veth whose peer is not in that namespace is not
the entry's, and is left to its own item (judged by the namespace its peer lives in).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from nodegc.desired.snapshot import SnapshotSource
from nodegc.inventory.scanning import scan_node
from nodegc.model.findings import FindingClass
from nodegc.model.resources import Kind
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.sandbox.node import SandboxNode, SandboxPod
from tests.host.adversarial.found15_adv.one_cycle import run_cycle

PLANTED_ID = "f" * 64


def plant(node: SandboxNode, live: SandboxPod, *, netns: str) -> Path:
    """A copy of the live pod's cache entry under another container and pod, naming `netns`, an hour old."""
    path = node.cache_path(live)
    doc = json.loads(path.read_bytes())
    doc["containerId"] = PLANTED_ID
    doc["netns"] = netns
    doc["cniArgs"] = [["K8S_POD_NAMESPACE", "default"], ["K8S_POD_NAME", "gone"],
                      ["K8S_POD_UID", "0c0c0c0c-0000-4000-8000-000000000000"],
                      ["K8S_POD_INFRA_CONTAINER_ID", PLANTED_ID]]
    doc["result"]["ips"] = []  # no address: nothing ties it to the live pod's reservation or rules
    planted = path.with_name(path.name.replace(live.container_id, PLANTED_ID))
    planted.write_text(json.dumps(doc))
    old = time.time() - 3600
    os.utime(planted, (old, old))
    return planted


@pytest.mark.parametrize("where", ["missing", "another_pods"])
def test_planted_entry_leaves_the_live_veth(node: SandboxNode, tmp_path: Path, where: str) -> None:
    live = node.add_pod("live")
    other = node.add_pod("other")
    # A namespace that does not exist, or another live pod's (whose address the planner reads: kept then).
    netns = str(node.netns_dir / "cni-00000000-0000-4000-8000-000000000000") if where == "missing" else str(
        other.netns_path)
    planted = plant(node, live, netns=netns)
    source = SnapshotSource(node.write_snapshot(node.root / "pods.json"), node.node_name)
    findings = correlate(scan_node(node.roots), source.fetch(), now=source.fetch().fetched_at,
                         policy=CorrelationPolicy(min_age_seconds=0))
    veth = next(f for f in findings if f.kind is Kind.VETH and f.id == live.host_veth)
    assert veth.cls is FindingClass.IN_USE, veth
    outcomes = run_cycle(node, tmp_path / "ledger.db")
    assert node.link_exists(str(live.host_veth)), outcomes
    assert node.link_exists(str(other.host_veth)), outcomes
    if where == "missing":
        # The entry itself is still reclaimed: what it names is left, and the file goes.
        assert not planted.exists(), outcomes
