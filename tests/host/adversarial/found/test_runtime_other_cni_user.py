"""Finding, on a real containerd and the real CNI plugins: with the runtime's word, a running container
that is not Kubernetes' (same netns directory, its own CNI network "other") loses its namespace, its
veth and its masquerade chain."""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path

from nodegc.sandbox.cni import run_conflist, write_cache_entry
from nodegc.sandbox.containerd import SandboxContainerd, new_spec, pod_record, sandbox_ips, write_pods
from nodegc.sandbox.node import CNI_BIN_DIR, SandboxNode, _new_netns, _remove_netns
from tests.host.adversarial.found.cycle import one_cycle

Runtime = tuple[SandboxNode, SandboxContainerd]


def test_another_cni_users_running_container_is_not_reclaimed(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    q = new_spec("q")
    qid = rt.run_sandbox(q)  # a Kubernetes pod: the runtime knows a sandbox of k8s-pod-network
    conflist = {"cniVersion": "1.0.0", "name": "other", "plugins": [{
        "type": "bridge", "bridge": "cni1", "isGateway": True, "ipMasq": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "dataDir": str(node.ipam_dir)}}]}
    cid = secrets.token_hex(32)
    netns = node.netns_dir / "other-x1"
    _new_netns(netns)
    try:
        result = run_conflist(command="ADD", conflist=conflist, container_id=cid, netns=str(netns), ifname="eth0",
                              cni_args=[], capability_args={}, cni_path=(CNI_BIN_DIR,), host_netns=node.node_netns)
        assert result is not None
        write_cache_entry(cni_data_dir=node.cni_data_dir, network="other", container_id=cid, ifname="eth0",
                          netns=str(netns), conflist_bytes=json.dumps(conflist).encode(), cni_args=[],
                          capability_args={}, result=result)
        snap = write_pods(tmp_path / "pods.json", [pod_record(node, q, sandbox_ips(rt, qid)[0])])
        report = one_cycle(node, rt, snap)
        acted = [(i.key.split(":", 1)[0], o.detail) for i, o in report.outcomes if cid in (i.container_id or "")
                 or "other-x1" in i.key]
        eth0 = subprocess.run(["nsenter", f"--net={netns}", "ip", "-o", "addr", "show", "dev", "eth0"],
                              capture_output=True, text=True, timeout=10, check=False)
        assert netns.exists() and "10.88." in eth0.stdout, acted
        assert not acted, acted
    finally:
        if netns.exists():
            _remove_netns(netns)
