"""Network evidence that a cache file cannot outweigh, with the real CNI plugins on a sandbox node."""

from __future__ import annotations

import json
import shutil

from nodegc.sandbox.node import SandboxNode
from tests.host.adversarial.evidence import held, nodegc, root_flags


def test_a_dead_entry_naming_a_live_netns_never_runs_del_inside_it(sandbox_node: SandboxNode) -> None:
    """A restored /var/lib/cni: a dead sandbox's cache entry names the live pod's netns, and the live
    pod's own entry is truncated. CNI DEL for the dead entry would delete the live pod's eth0."""
    node = sandbox_node
    live = node.add_pod("live")
    dead = node.add_pod("dead")
    node.delete_without_cni_del(dead)
    entry = json.loads(node.cache_path(dead).read_bytes())
    entry["netns"] = str(live.netns_path)
    node.cache_path(dead).write_text(json.dumps(entry))
    node.cache_path(live).write_bytes(node.cache_path(live).read_bytes()[:40])  # truncated mid-write
    node.write_snapshot(node.root / "pods.json")
    before = held(node, live)
    result = nodegc("clean", "--apply", "--pods-from", str(node.root / "pods.json"), *root_flags(node),
                    "--min-age", "0", "--state-dir", str(node.root / "state"), "-o", "json")
    assert result.returncode in (0, 3), result.stderr[-3000:]
    assert held(node, live) == before, result.stdout[-3000:]


def test_an_id_only_reservation_of_a_pod_with_a_truncated_entry_is_kept(sandbox_node: SandboxNode) -> None:
    """The live pod's cache entry is truncated and its second range's address is an id-only file that
    no status lists: it is the live sandbox's, not a leak."""
    node = sandbox_node
    live = node.add_pod("live")
    ip_file = node.ipam_path(live)
    assert ip_file is not None
    second = ip_file.with_name("10.244.200.7")  # host-local writes one file per range, same container id
    shutil.copyfile(ip_file, second)
    node.cache_path(live).write_bytes(node.cache_path(live).read_bytes()[:40])
    node.write_snapshot(node.root / "pods.json")
    result = nodegc("clean", "--apply", "--pods-from", str(node.root / "pods.json"), *root_flags(node),
                    "--min-age", "0", "--state-dir", str(node.root / "state"), "-o", "json")
    assert result.returncode in (0, 3), result.stderr[-3000:]
    assert second.read_bytes() == ip_file.read_bytes(), result.stdout[-3000:]
