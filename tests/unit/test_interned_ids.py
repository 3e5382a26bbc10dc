"""The ids, paths and addresses several readers name are one string each (sys.intern): a node's scan keeps
thousands of records, and each pod's container id, UID, netns path and addresses would otherwise be held
once per reader and once more per finding."""

from __future__ import annotations

import base64
import json
import sys

from nodegc.hostio.iptables import parse_iptables_save
from nodegc.hostio.mountinfo import parse_mountinfo
from nodegc.inventory.cni_cache import parse_cache_entry
from nodegc.model.addresses import interface_ip, normalized_ip
from nodegc.planning.owners import netns_key

CID = "ab" * 32
UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def fresh(text: str) -> str:
    """An equal string that is not the interned object (a reader's new spelling of it)."""
    out = "".join(list(text))
    assert out == text
    return out


def interned(value: str | None) -> bool:
    return value is not None and sys.intern(fresh(value)) is value


def test_a_cache_entry_holds_interned_ids() -> None:
    doc = {"kind": "cniCacheV1", "containerId": CID, "ifName": "eth0", "networkName": "net",
           "netns": "/var/run/netns/cni-1", "config": base64.b64encode(b"{}").decode(),
           "cniArgs": [["K8S_POD_NAMESPACE", "default"], ["K8S_POD_NAME", "web"], ["K8S_POD_UID", UID],
                       ["K8S_POD_INFRA_CONTAINER_ID", CID]],
           "result": {"ips": [{"address": "10.1.0.7/24"}]}}
    entry = parse_cache_entry("/results/net-x-eth0", json.dumps(doc).encode(), inode=1, mtime=0.0)
    assert all(interned(v) for v in (entry.container_id, entry.netns, entry.pod_uid, entry.pod_name, *entry.ips))
    assert entry.infra_container_id is entry.container_id


def test_addresses_mount_points_chain_owners_and_netns_keys_are_interned() -> None:
    assert interned(normalized_ip(fresh("10.1.0.9"))) and interned(interface_ip(fresh("fd00::1/64")))
    line = f"36 25 0:40 / /var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~empty-dir/data rw - tmpfs tmpfs rw"
    (mount,), _ = parse_mountinfo(line + "\n")
    assert interned(mount.mount_point)
    comment = f'-m comment --comment "name: \\"net\\" id: \\"{CID}\\""'
    dump = "\n".join(["*nat", ":CNI-0123456789abcdef01234567 - [0:0]",
                      f"-A CNI-0123456789abcdef01234567 -d 10.1.0.0/24 {comment} -j ACCEPT", "COMMIT", ""])
    (chain,), _, _ = parse_iptables_save(dump)
    assert interned(chain.container_id)
    assert interned(netns_key(fresh("/var/run/netns/cni-2")))
