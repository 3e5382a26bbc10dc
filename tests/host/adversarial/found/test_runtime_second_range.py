"""Finding, on a real containerd and the real CNI plugins (dual stack: two host-local range sets): the runtime's word
releases the second-range address of a pod that still runs, because status lists one address per family
and the sibling rule is not applied after runtime.py's revision."""

from __future__ import annotations

import json
from pathlib import Path

from nodegc.model.resources import Kind
from nodegc.sandbox.containerd import SandboxContainerd, new_spec, pod_record, sandbox_ips, write_pods
from nodegc.sandbox.node import NETWORK_NAME, SandboxNode
from tests.host.adversarial.found.cycle import one_cycle

Runtime = tuple[SandboxNode, SandboxContainerd]


def test_second_range_address_of_a_running_pod_the_runtime_forgot(containerd_node: Runtime, tmp_path: Path) -> None:
    """containerd crashes and loses its metadata (bolt database) while pod web keeps running (its shim
    and pause process live on); it comes back and runs pod q. web's status shows its IPv4 address (the pod IP);
    its IPv6 reservation is listed in no status. runtime.py keeps the status address ("a live
    pod's address is never taken") but releases the other one of the same sandbox."""
    node, rt = containerd_node
    conf = json.loads(node.conflist_path.read_text())
    conf["plugins"][0]["ipam"]["ranges"] = [[{"subnet": "10.244.0.0/16"}], [{"subnet": "fd00:10:244::/64"}]]
    node.conflist_path.write_text(json.dumps(conf, indent=2))
    rt.kill()
    rt.start()  # reads the two-range configuration
    web = new_spec("web")
    sid = rt.run_sandbox(web)
    ips = sandbox_ips(rt, sid)
    assert len(ips) == 2, ips
    first, second = sorted(ips, key=lambda ip: ":" in ip)  # IPv4 pod IP first, as status shows it
    rt.kill()  # the shims and web's sandbox keep running
    rt.wipe_state(metadata=True)
    rt.start()
    q = new_spec("q")
    qid = rt.run_sandbox(q)
    assert len(rt.shim_pids()) >= 2  # web's shim (and its pause process) still runs beside q's
    records = [pod_record(node, web, first), pod_record(node, q, sandbox_ips(rt, qid)[0])]
    snap = write_pods(tmp_path / "pods.json", records)
    report = one_cycle(node, rt, snap)
    done = [(i.key, o.detail) for i, o in report.outcomes if i.kind is Kind.IP_RESERVATION]
    assert (node.ipam_dir / NETWORK_NAME / first).exists()
    assert (node.ipam_dir / NETWORK_NAME / second).exists(), done
