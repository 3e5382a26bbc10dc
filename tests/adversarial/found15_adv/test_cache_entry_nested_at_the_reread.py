"""A cache entry that libcni (or whoever writes the data dir) rewrites in place, same inode, between the scan
that verified it and the step that reclaims it, into JSON nested thousands deep. The scan's reader takes such
a file as unreadable (RecursionError caught: found2, found11), but the re-read right before the step
(`reclaim.cni_del.reread`, used by the plugins' DEL and by the direct teardown) let RecursionError out: the
direct teardown raised, and every other attachment of the cycle's batch failed with it ("direct teardown
raised RecursionError"). It is one entry's unreadable file: that entry fails, the others are untouched.
Nothing here reaches the kernel: the batch holds the one entry, which stops at the re-read.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from nodegc.inventory.cni_cache import scan_cni_cache
from nodegc.reclaim.cni_del import cni_del
from nodegc.reclaim.teardown import Teardown, tear_down
from nodegc.settings import Roots

NET = "k8s-pod-network"
CID = "c" * 64


def test_nested_rewrite_fails_its_entry_only(tmp_path: Path) -> None:
    data = tmp_path / "cni"
    conf = {"cniVersion": "1.0.0", "name": NET, "plugins": [{"type": "bridge", "bridge": "cni0"}]}
    doc = {"kind": "cniCacheV1", "containerId": CID, "config": base64.b64encode(json.dumps(conf).encode()).decode(),
           "ifName": "eth0", "networkName": NET, "netns": "", "result": {"cniVersion": "1.0.0", "ips": []}}
    path = data / "results" / f"{NET}-{CID}-eth0"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    (entry,), problems = scan_cni_cache(data)
    assert not problems
    with path.open("r+") as f:  # in place, as libcni writes: the inode stays
        f.truncate(0)
        f.write("[" * 100_000 + "]" * 100_000)
    roots = Roots(cni_data_dir=data, netns_dir=tmp_path / "netns", cni_bin_dirs=(tmp_path / "bin",))
    (outcome,) = tear_down([Teardown(entry=entry, plugins=("bridge",), bridge="cni0")], roots=roots)
    assert not outcome.ok and "unreadable" in outcome.detail, outcome
    again = cni_del(entry, roots=roots)
    assert not again.ok and "unreadable" in again.detail, again
