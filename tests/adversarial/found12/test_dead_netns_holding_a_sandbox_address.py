"""A mounted namespace that no sandbox names and no cache entry names, but that holds an address the runtime
lists for one of its sandboxes (a READY one whose netns the runtime reports under a path keyed otherwise, or
one it still holds NotReady). `_ready_address` keeps residue holding a READY sandbox's address, and a
namespace tied by its addresses to a sandbox naming another netns is a conflict (`_not_theirs`); but the
network domain leaves such a namespace `unknown` (no pod's status claims the address: the pod's status
still shows its old IP), `_ready_address` passes what is not residue through untouched, and the dead-netns
proof, run after it, then made it `leaked_netns`: the namespace of an address a live sandbox holds was
reclaimed on the word that nothing ties it to anything."""

from __future__ import annotations

from nodegc.model.findings import FindingClass
from tests.unit.factories import pod
from tests.unit.test_dead_netns import DEAD, live_sandbox, netns, node, verdict
from tests.unit.test_runtime_ownership import sandbox

SANDBOX_IP = "10.0.0.44"


def test_a_namespace_holding_a_ready_sandboxs_address_is_not_proven_dead() -> None:
    # The pod's status still shows its sandbox's old address; the runtime reports the READY sandbox's netns
    # as its pause process's (keyed otherwise than any file of the netns directory).
    other = sandbox("other", "u2", ips=(SANDBOX_IP,), netns_path="/proc/4242/ns/net")
    inv = node(netns(DEAD, addresses=(SANDBOX_IP,)), sandboxes=(live_sandbox(), other))
    cls, evidence = verdict(inv, pod("web", "u1", ip="10.0.0.3"), pod("db", "u2", ip="10.0.0.4"))
    assert cls is not FindingClass.LEAKED_NETNS, evidence
    assert cls in (FindingClass.UNKNOWN, FindingClass.CONFLICT), evidence


def test_a_namespace_holding_a_notready_sandboxs_address_is_not_proven_dead() -> None:
    # The runtime still holds the sandbox (its own teardown, which runs the CNI DEL, goes first).
    held = sandbox("held", "u2", ready=False, ips=(SANDBOX_IP,), netns_path="/proc/4242/ns/net")
    inv = node(netns(DEAD, addresses=(SANDBOX_IP,)), sandboxes=(live_sandbox(), held))
    cls, evidence = verdict(inv, pod("web", "u1", ip="10.0.0.3"), pod("db", "u2", phase="Succeeded"))
    assert cls is not FindingClass.LEAKED_NETNS, evidence


def test_an_address_no_sandbox_lists_still_leaves_the_proof_standing() -> None:
    other = sandbox("other", "u2", ips=("10.0.0.45",), netns_path="/proc/4242/ns/net")
    inv = node(netns(DEAD, addresses=(SANDBOX_IP,)), sandboxes=(live_sandbox(), other))
    cls, _ = verdict(inv, pod("web", "u1", ip="10.0.0.3"), pod("db", "u2", ip="10.0.0.45"))
    assert cls is FindingClass.LEAKED_NETNS
