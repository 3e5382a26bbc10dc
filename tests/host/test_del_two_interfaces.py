"""One dead sandbox attached twice to one network (eth0 and net1 on the pod network, as multus or a
runtime with two attachments makes them): two cache entries and two reservations of one container id, and
one masquerade chain and one hostport chain, which the bridge and portmap plugins key by network and
container id, shared by both attachments.

The bridge plugin's DEL of the first attachment flushes that chain and then fails to delete it, since the
other attachment's jump still leads to it. A runtime retries its teardown until it succeeds; nodegc, going
through the plugins, resumes that DEL once its sibling's has run. Three nodes built alike from one seed end
in the same state: reclaimed by the plugins' DEL, by the direct teardown, and by a CNI DEL loop that retries
as a runtime does. A live pod on the same network keeps everything.
"""

from __future__ import annotations

import base64
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import Engine, EngineSettings
from nodegc.inventory.scanning import scan_node
from nodegc.ledger.store import Ledger
from nodegc.model.resources import CNICacheEntry
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.reclaim.netns import remove_netns
from nodegc.sandbox.cni import CNIError, run_conflist, write_cache_entry
from nodegc.sandbox.node import CNI_BIN_DIR, SandboxNode, SandboxPod

PLUGINS = ("bridge", "portmap", "firewall", "tuning")
OBSERVER_FILES = ("pods.json",)


def _add_net1(node: SandboxNode, pod: SandboxPod) -> None:
    """A second ADD into the same sandbox on the pod network itself, cached as libcni caches it."""
    args = [("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", pod.namespace), ("K8S_POD_NAME", pod.name),
            ("K8S_POD_INFRA_CONTAINER_ID", pod.container_id), ("K8S_POD_UID", pod.uid)]
    result = run_conflist(command="ADD", conflist=node.conflist, container_id=pod.container_id,
                          netns=str(pod.netns_path), ifname="net1", cni_args=args, capability_args={},
                          cni_path=(CNI_BIN_DIR,), host_netns=node.node_netns)
    assert result is not None
    write_cache_entry(cni_data_dir=node.cni_data_dir, network=str(node.conflist["name"]),
                      container_id=pod.container_id, ifname="net1", netns=str(pod.netns_path),
                      conflist_bytes=node.conflist_bytes, cni_args=args, capability_args={}, result=result)


def _build(seed: int) -> tuple[SandboxNode, SandboxPod, SandboxPod]:
    node = SandboxNode.create(plugins=PLUGINS, seed=seed)
    live = node.add_pod("live", volumes=(), host_port=8080)
    dead = node.add_pod("dead", volumes=(), host_port=9090)
    _add_net1(node, dead)
    node.delete_without_cni_del(dead)
    return node, live, dead


def _entries(node: SandboxNode, pod: SandboxPod) -> list[CNICacheEntry]:
    return sorted((e for e in scan_node(node.roots).cni_cache if e.container_id == pod.container_id),
                  key=lambda e: e.ifname)


def _engine(node: SandboxNode, *, direct: bool) -> list[tuple[str, bool, str]]:
    """One engine cycle: every item of the dead sandbox is reclaimed and confirmed in it."""
    source = SnapshotSource(node.write_snapshot(node.root / "pods.json"), node.node_name)
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0))
    with tempfile.TemporaryDirectory(prefix="nodegc-ledger-") as state, Ledger(Path(state) / "ledger.db") as ledger:
        report = Engine(roots=node.roots, source=source, ledger=ledger,
                        executor=HostExecutor(node.roots, direct_teardown=direct), settings=settings).cycle()
    return [(i.key, o.ok, o.detail) for i, o in report.outcomes]


def _del_loop(node: SandboxNode, dead: SandboxPod) -> int:
    """What a runtime does: CNI DEL of every attachment with the plugins themselves, the whole teardown
    retried while one fails, then the netns removed. Returns the number of passes it took."""
    entries = _entries(node, dead)
    for attempt in range(1, 4):
        failed = []
        for entry in entries:
            doc: dict[str, Any] = json.loads(Path(entry.path).read_bytes())
            try:
                run_conflist(command="DEL", conflist=json.loads(base64.b64decode(doc["config"])),
                             container_id=entry.container_id, netns=str(dead.netns_path), ifname=entry.ifname,
                             cni_args=[(k, v) for k, v in doc.get("cniArgs", [])],
                             capability_args=doc.get("capabilityArgs") or {}, cni_path=(CNI_BIN_DIR,),
                             host_netns=node.node_netns, prev_result=doc.get("result"))
            except CNIError:
                failed.append(entry)
                continue
            Path(entry.path).unlink()
        if not failed:
            [ns] = [n for n in scan_node(node.roots).netns if n.path == str(dead.netns_path)]
            assert remove_netns(ns).ok
            return attempt
        entries = failed
    raise AssertionError(f"the DEL loop still fails after 3 passes: {[e.ifname for e in entries]}")


def _reclaimed(seed: int, how: Callable[[SandboxNode, SandboxPod], object]) -> tuple[dict[str, Any], object]:
    node, live, dead = _build(seed)
    with node:
        assert [e.ifname for e in _entries(node, dead)] == ["eth0", "net1"]
        done = how(node, dead)
        assert not _entries(node, dead) and not dead.netns_path.exists()
        assert [e.ifname for e in _entries(node, live)] == ["eth0"] and live.netns_path.exists()
        return node.full_state(ignore=OBSERVER_FILES), done


def test_two_interfaces_on_one_network_end_as_a_del_loop_leaves_them() -> None:
    seed = 1207
    loop_state, passes = _reclaimed(seed, _del_loop)
    assert passes == 2, "the plugins' first DEL of one of the two attachments fails (the chain they share)"

    plugin_state, via_plugins = _reclaimed(seed, lambda n, _: _engine(n, direct=False))
    assert isinstance(via_plugins, list)
    assert all(ok for _, ok, _ in via_plugins), via_plugins
    dels = sorted(d for k, _, d in via_plugins if k.startswith("cni_cache:"))
    assert len(dels) == 2 and not any("kept failing" in d or "directly" in d for d in dels), dels
    assert any("bridge DEL resumed after" in d for d in dels), dels

    direct_state, direct = _reclaimed(seed, lambda n, _: _engine(n, direct=True))
    assert isinstance(direct, list)
    assert all(ok for _, ok, _ in direct), direct
    assert [d for k, _, d in direct if k.startswith("cni_cache:") and d.startswith("torn down directly")]

    for state in (plugin_state, direct_state):
        for key in loop_state:
            assert state[key] == loop_state[key], key
