"""A cache entry whose cached configuration puts host-local's `dataDir` on a file system that never answers
(an NFS volume whose server is gone, a FUSE mount nobody serves; the entry planted by whoever can write the
CNI data dir). Whether the attachment is nodegc's to tear down was decided with `os.path.realpath(dataDir)`,
which looks up every component of the path: the lookup inside the dead mount never returned, and the
executor's step (with it the agent's cycle) was held for good, on the direct teardown's plan and on CNI DEL's
check alike. The cached path is compared as it is spelt with nodegc's own data dir (as configured, or
resolved): nothing the entry names is looked up.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path

from nodegc.inventory.cni_cache import scan_cni_cache
from nodegc.model.resources import CNICacheEntry
from nodegc.reclaim.cni_del import cni_del
from nodegc.reclaim.outcomes import Outcome
from nodegc.reclaim.teardown import Teardown, plan
from nodegc.settings import Roots
from tests.host.adversarial.unserved_fuse import mount_unserved_fuse, unmount_lazily

NET = "k8s-pod-network"
CID = "c" * 64


def _entry(data: Path, data_dir: str) -> CNICacheEntry:
    conf = {"cniVersion": "1.0.0", "name": NET, "plugins": [
        {"type": "bridge", "bridge": "cni0",
         "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.0.0.0/24"}]], "dataDir": data_dir}}]}
    doc = {"kind": "cniCacheV1", "containerId": CID, "config": base64.b64encode(json.dumps(conf).encode()).decode(),
           "ifName": "eth0", "networkName": NET, "netns": "", "result": {"cniVersion": "1.0.0", "ips": []}}
    (data / "results").mkdir(parents=True)
    (data / "results" / f"{NET}-{CID}-eth0").write_text(json.dumps(doc))
    (entry,), problems = scan_cni_cache(data)
    assert not problems
    return entry


def test_a_data_dir_that_never_answers_holds_no_step(tmp_path: Path) -> None:
    hung = tmp_path / "hung"
    hung.mkdir()
    fd = mount_unserved_fuse(hung)
    steps: list[threading.Thread] = []
    try:
        data = tmp_path / "cni"
        entry = _entry(data, str(hung / "ipam"))
        roots = Roots(cni_data_dir=data, netns_dir=tmp_path / "netns", cni_bin_dirs=(tmp_path / "bin",))
        planned: list[Teardown | str] = []
        deleted: list[Outcome] = []
        steps = [threading.Thread(target=lambda: planned.append(plan(entry, roots=roots, identify=lambda _k: None)),
                                  daemon=True),
                 threading.Thread(target=lambda: deleted.append(cni_del(entry, roots=roots)), daemon=True)]
        for step in steps:
            step.start()
        for step in steps:
            step.join(10)
        assert not any(step.is_alive() for step in steps), "a step is held looking up the cached dataDir"
        assert isinstance(planned[0], str) and "keeps its files" in planned[0], planned
        assert not deleted[0].ok and "CNI DEL not run" in deleted[0].detail, deleted
    finally:
        os.close(fd)  # the FUSE connection ends: a lookup still waiting fails
        for step in steps:
            step.join(10)
        unmount_lazily(hung)
