"""A libcni cache entry planted by whoever can write the CNI data dir, on a real node with the real plugins:
its cached configuration (base64 in the entry, run as it is by CNI DEL) sets host-local's `dataDir` outside
nodegc's roots. The entry names a pod UID no pod has: a stale entry, and reclaimed through the plugins (a
data dir other than nodegc's keeps it off the direct teardown).

host-local's DEL makes `<dataDir>/<network name>` (and a `lock` file in it), then walks that tree and removes
every file whose content is `<container id>\\r\\n<ifname>`, or, when none is, just `<container id>`: with the
container id set to the node's name and the tree to /etc, nodegc (root) removed /etc/hostname. Here the
"/etc" is a directory of the test's node root outside every configured root. The plugins now run only with
a host-local that keeps its files in nodegc's `<cni data dir>/networks/<network>`, the network the entry
names; anything else fails the DEL (kept, reported), as the direct teardown already refused it.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegc.sandbox.node import SandboxNode
from tests.host.adversarial.found15_adv.one_cycle import run_cycle


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SandboxNode]:
    made = SandboxNode.create(tmp_path, plugins=("bridge", "portmap"))
    try:
        yield made
    finally:
        made.close()


def plant(node: SandboxNode, *, container_id: str, network: str, ipam: dict[str, object],
          config_name: str | None = None) -> Path:
    conf = {"cniVersion": "1.0.0", "name": config_name or network,
            "plugins": [{"type": "bridge", "bridge": "cni9", "ipam": ipam}]}
    doc = {"kind": "cniCacheV1", "containerId": container_id, "networkName": network, "ifName": "eth0",
           "netns": "", "config": base64.b64encode(json.dumps(conf).encode()).decode(),
           "cniArgs": [["IgnoreUnknown", "1"], ["K8S_POD_NAMESPACE", "default"], ["K8S_POD_NAME", "gone"],
                       ["K8S_POD_UID", "0c0c0c0c-0000-4000-8000-000000000000"]],
           "result": {"cniVersion": "1.0.0", "interfaces": [], "ips": []}}
    path = node.cni_data_dir / "results" / f"{network}-{container_id}-eth0"
    path.write_text(json.dumps(doc))
    old = time.time() - 3600
    os.utime(path, (old, old))
    return path


@pytest.mark.parametrize("how", ["data_dir", "network_name"])
def test_planted_data_dir_outside_the_roots_is_never_walked(node: SandboxNode, tmp_path: Path, how: str) -> None:
    node.add_pod("live")
    outside = node.root / "etc"
    (outside / "conf.d").mkdir(parents=True)
    victim = outside / "conf.d" / "hostname"
    victim.write_text("victim-node\n")
    ranges = [[{"subnet": "192.0.2.0/24"}]]
    if how == "data_dir":
        plant(node, container_id="victim-node", network="conf.d",
              ipam={"type": "host-local", "ranges": ranges, "dataDir": str(outside)})
    else:
        # nodegc's data dir, but a network name that climbs out of it (the entry's name is a plain one; the
        # plugins refuse such a name themselves).
        up = os.path.relpath(outside, node.ipam_dir)
        plant(node, container_id="victim-node", network="conf.d", config_name=f"{up}/conf.d",
              ipam={"type": "host-local", "ranges": ranges, "dataDir": str(node.ipam_dir)})
    outcomes = run_cycle(node, tmp_path / "ledger.db")
    assert victim.exists(), outcomes
    assert sorted(os.listdir(outside / "conf.d")) == ["hostname"], outcomes
    if how == "data_dir":
        assert any("CNI DEL not run" in detail for _, detail in outcomes), outcomes
