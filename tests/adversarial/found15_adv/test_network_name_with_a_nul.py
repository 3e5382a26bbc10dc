"""A cache entry whose `networkName` (and its cached configuration's `name`) holds a NUL: valid JSON
("\\u0000"), and no directory name. The direct teardown planned it like any other (a "/" or "." in the name
was refused, a NUL was not), then opened `<data dir>/networks/<name>` to take host-local's lock, and
os.open raised ValueError (embedded null byte) out of the whole batch: every attachment of the cycle failed
with "direct teardown raised ValueError", cycle after cycle while the entry stayed residue. Such an entry
goes through the plugins (which fail it alone), as any other whose name is no directory name. Nothing here
reaches the kernel: the batch stops before its first step either way.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from nodegc.inventory.cni_cache import scan_cni_cache
from nodegc.reclaim.teardown import Teardown, plan, tear_down
from nodegc.settings import Roots

NET = "k8s\u0000net"
CID = "c" * 64


def test_a_nul_in_the_network_name_is_no_direct_teardown(tmp_path: Path) -> None:
    data = tmp_path / "cni"
    conf = {"cniVersion": "1.0.0", "name": NET, "plugins": [
        {"type": "bridge", "bridge": "cni0",
         "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.0.0.0/24"}]], "dataDir": str(data / "networks")}}]}
    doc = {"kind": "cniCacheV1", "containerId": CID, "config": base64.b64encode(json.dumps(conf).encode()).decode(),
           "ifName": "eth0", "networkName": NET, "netns": "", "result": {"cniVersion": "1.0.0", "ips": []}}
    (data / "results").mkdir(parents=True)
    (data / "results" / f"k8s-net-{CID}-eth0").write_text(json.dumps(doc))
    (entry,), problems = scan_cni_cache(data)
    assert not problems and entry.network == NET
    roots = Roots(cni_data_dir=data, netns_dir=tmp_path / "netns", cni_bin_dirs=(tmp_path / "bin",))
    planned = plan(entry, roots=roots, identify=lambda _kind: None)
    if isinstance(planned, Teardown):
        tear_down([planned], roots=roots)  # raised ValueError for the whole batch
    assert isinstance(planned, str) and "no directory name" in planned, planned
