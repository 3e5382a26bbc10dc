"""The firewall plugin's rules of an address no host-local file reserves, on a real node with the real plugins.
A live pod's cache entry lists a second address (a secondary network's, a static IPAM's: nothing reserves it
in nodegc's data dir) whose two `CNI-FORWARD` rules are in place; the planner keeps those rules (a kept cache
entry lists the address). A stale cache entry that lists the same address (planted by whoever can write the
data dir, or the dead sandbox of a pod recreated with a sticky address) was torn down directly, and its
teardown removed the rules of every cached address that no *other* container reserves: the live pod's.

CNI DEL through the plugins already refused to run the firewall plugin's DEL unless every cached address is
still reserved by the container (`reclaim.cni_del._addresses_not_ours`): the direct teardown now removes an
address's rules only while the attachment's own reservation of it is there and nobody else's; otherwise they
are left to their own items, judged on the whole node.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from nodegc.sandbox.node import SandboxNode
from tests.host.adversarial.found15_adv.one_cycle import run_cycle

SECOND = "10.99.0.5"
STALE_ID = "f" * 64


def test_stale_entry_leaves_the_rules_of_a_live_pods_unreserved_address(node: SandboxNode, tmp_path: Path) -> None:
    live = node.add_pod("live")
    gone = node.add_pod("gone", volumes=())
    node.delete_without_cni_del(gone)
    path = node.cache_path(live)
    doc = json.loads(path.read_bytes())
    doc["result"]["ips"].append({"address": f"{SECOND}/24"})
    path.write_text(json.dumps(doc))
    node.node_exec("iptables", "-A", "CNI-FORWARD", "-d", f"{SECOND}/32", "-m", "conntrack", "--ctstate",
                   "RELATED,ESTABLISHED", "-j", "ACCEPT")
    node.node_exec("iptables", "-A", "CNI-FORWARD", "-s", f"{SECOND}/32", "-j", "ACCEPT")
    doc["containerId"] = STALE_ID
    doc["netns"] = str(node.netns_dir / "cni-00000000-0000-4000-8000-000000000000")
    doc["cniArgs"] = [["IgnoreUnknown", "1"], ["K8S_POD_NAMESPACE", "default"], ["K8S_POD_NAME", "old"],
                      ["K8S_POD_UID", "0c0c0c0c-0000-4000-8000-000000000000"], ["K8S_POD_INFRA_CONTAINER_ID", STALE_ID]]
    doc["result"]["ips"] = [{"address": f"{SECOND}/24"}]
    doc["result"]["interfaces"] = []
    stale = path.with_name(path.name.replace(live.container_id, STALE_ID))
    stale.write_text(json.dumps(doc))
    old = time.time() - 3600
    os.utime(stale, (old, old))

    outcomes = run_cycle(node, tmp_path / "ledger.db")
    rules = node.node_exec("iptables-save")
    assert f"-A CNI-FORWARD -s {SECOND}/32 -j ACCEPT" in rules, outcomes
    assert f"-A CNI-FORWARD -d {SECOND}/32" in rules, outcomes
    # the dead pod's own attachment still goes whole, its rules with it
    assert f"-A CNI-FORWARD -s {gone.ip}/32 -j ACCEPT" not in rules, outcomes
    assert not stale.exists() and not node.cache_path(gone).exists(), outcomes
