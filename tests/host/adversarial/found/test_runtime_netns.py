"""Finding, on a real containerd and the real CNI plugins: a stale cache entry of a live pod's old sandbox
that names the live sandbox's namespace gets its CNI DEL run inside that namespace."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from nodegc.inventory.cri.reading import sandbox_from_status
from nodegc.model.resources import Kind
from nodegc.sandbox.containerd import SandboxContainerd, SandboxSpec, new_spec, pod_record, sandbox_ips, write_pods
from nodegc.sandbox.node import NETWORK_NAME, SandboxNode
from tests.host.adversarial.found.cycle import one_cycle

Runtime = tuple[SandboxNode, SandboxContainerd]


def _addresses(netns: str) -> str:
    return subprocess.run(["nsenter", f"--net={netns}", "ip", "-o", "addr", "show"], capture_output=True,
                          text=True, timeout=10, check=False).stdout


def test_old_sandbox_entry_naming_the_live_netns_is_not_deld_there(containerd_node: Runtime, tmp_path: Path) -> None:
    """Pod web's sandbox `old` is lost in a reboot (containerd metadata gone), its attachments stay; web
    runs again in READY sandbox `new`. The old entry (K8S_POD_UID of web, still a live pod) names the
    namespace of `new` (a broken runtime, a restored /var/lib/cni). network.py calls it in_use (owner
    live, so no netns check), runtime.py turns it into stale_cni_cache, terminate skips the live GET
    (sandbox set, owner live), and the bridge plugin's DEL deletes eth0 inside the live pod's namespace."""
    node, rt = containerd_node
    web = new_spec("web")
    old = rt.run_sandbox(web)
    rt.kill_everything()
    rt.wipe_state(metadata=True)
    rt.start()
    new = rt.run_sandbox(SandboxSpec(web.name, web.namespace, web.uid, attempt=1))
    new_ip = sandbox_ips(rt, new)[0]
    with rt.client() as c:
        state_path = sandbox_from_status(c.sandbox_status(new, verbose=True)).netns_path
    assert state_path
    # As with containerd's default (netns under /var/run/netns): the live namespace in the netns directory.
    live_netns = str(node.netns_dir / Path(state_path).name)
    Path(live_netns).touch()
    subprocess.run(["mount", "--bind", state_path, live_netns], check=True, timeout=10)
    old_entry = node.cni_data_dir / "results" / f"{NETWORK_NAME}-{old}-eth0"
    doc = json.loads(old_entry.read_text())
    doc["netns"] = f"/var/run/netns/{Path(state_path).name}"
    old_entry.write_text(json.dumps(doc))
    assert new_ip in _addresses(live_netns)
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, web, new_ip)])
    report = one_cycle(node, rt, snap)
    dels = [(i.key, o.detail) for i, o in report.outcomes if i.kind is Kind.CNI_CACHE]
    after = _addresses(live_netns)
    subprocess.run(["umount", live_netns], check=False, timeout=10)
    assert new_ip in after, (dels, after)
