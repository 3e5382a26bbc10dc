"""A per-container chain whose comments name two containers, on a real node with the real plugins: the dead
container's masquerade chain holding, beside its own rules, a rule whose comment names a live container (or
a jump into it carrying that comment). The scan's parse leaves such a chain's owner unknown ("conflicting
owner comments"), and the planner keeps a chain of unknown owner. The direct teardown, which names the chains
it removes by hashing network and container id, removed a chain only while no *single* other owner claimed
it: the unknown owner of a chain claimed twice passed, and the live container's rule went with the chain.
A chain (with the jumps into it) goes only while every comment in it names the attachment being torn down.
"""

from __future__ import annotations

import pytest

from nodegc.inventory.scanning import scan_node
from nodegc.reclaim.teardown import Teardown, chain_name, identifier, plan, tear_down
from nodegc.sandbox.node import NETWORK_NAME, SandboxNode


@pytest.mark.parametrize("where", ["rule", "jump"])
def test_chain_another_container_also_claims_is_kept(node: SandboxNode, where: str) -> None:
    live = node.add_pod("live")
    gone = node.add_pod("gone", volumes=())
    node.delete_without_cni_del(gone)
    entry = next(e for e in scan_node(node.roots).cni_cache if e.container_id == gone.container_id)
    td = plan(entry, roots=node.roots, identify=identifier(node.roots.cni_bin_dirs))
    assert isinstance(td, Teardown), td
    chain = chain_name(NETWORK_NAME, gone.container_id)
    comment = f'name: "{NETWORK_NAME}" id: "{live.container_id}"'
    if where == "rule":
        node.node_exec("iptables", "-t", "nat", "-A", chain, "-d", "192.0.2.7/32", "-m", "comment", "--comment",
                       comment, "-j", "ACCEPT")
    else:
        node.node_exec("iptables", "-t", "nat", "-A", "POSTROUTING", "-s", f"{live.ip}/32", "-m", "comment",
                       "--comment", comment, "-j", chain)
    (outcome,) = tear_down([td], roots=node.roots)
    assert outcome.ok and "left a rule alone" in outcome.detail, outcome
    nat = node.node_exec("iptables-save", "-t", "nat")
    assert f":{chain}" in nat
    assert live.container_id in nat
