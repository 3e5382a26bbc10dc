"""The iptables backend decided on a node that has no rules yet, with the real iptables-legacy and
iptables-nft in the sandbox node's namespace. "No rules in either backend" (nodegc's agent starting before
kube-proxy and the first pod on a booting node) fell back to the image's own `iptables-save`, and that
answer was cached for the life of the process, as a decision on rules is. Once the node's rules came, in the
other backend, every scan read the empty ruleset: no CNI chain or rule was ever seen again, and the direct
teardown found each attachment's chains and firewall rules "already gone" while they stayed. A guess made
on nothing is not kept: the next call looks again.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.hostio.iptables_backend import commands, forget
from nodegc.sandbox.node import SandboxNode


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SandboxNode]:
    forget()
    made = SandboxNode.create(tmp_path)
    try:
        yield made
    finally:
        made.close()
        forget()


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_rules_that_come_after_a_guess_are_found(node: SandboxNode, backend: str) -> None:
    first = commands("auto", net_ns=node.node_netns)
    assert first.backend == "default", first
    subprocess.run(["nsenter", f"--net={node.node_netns}", f"iptables-{backend}", "-t", "nat", "-A", "POSTROUTING",
                    "-s", "10.22.0.9/32", "-j", "MASQUERADE"], check=True, timeout=30, capture_output=True)
    later = commands("auto", net_ns=node.node_netns)
    assert later.backend == backend, later
