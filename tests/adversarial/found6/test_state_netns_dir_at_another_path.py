"""containerd's state-dir netns folder configured as `--netns-dir` under another path (the folder mounted
into nodegc's container at /host-cri-netns, say, alongside `--runtime-state-dir`): the scan reads the
folder once, as the netns dir, and keyed its files by bare name, while the runtime's netns path keys under
the state dir. The READY sandbox's own netns file was then named by no sandbox: a file that lost its mount
(containerd removes it at the next PodSandboxStatus; until then it is the sandbox's) read as an unmounted
leftover, `leaked_netns`, and was removed."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from nodegc.inventory.scanning import scan_node
from nodegc.model.resources import Kind
from nodegc.planning.correlate import correlate
from nodegc.settings import Roots, ScanOptions
from tests.unit.factories import NOW, OLD, desired, pod
from tests.unit.test_runtime_ownership import sandbox, view


def test_the_state_dir_netns_folder_as_netns_dir_keys_its_files_as_the_runtime_names_them(tmp_path: Path) -> None:
    state = tmp_path / "run-containerd"
    folder = state / "io.containerd.grpc.v1.cri" / "netns"
    folder.mkdir(parents=True)
    (folder / "cni-1").write_bytes(b"")
    os.utime(folder / "cni-1", (OLD, OLD))
    seen = tmp_path / "host-cri-netns"  # the same folder at another path in nodegc's container
    seen.symlink_to(folder)
    for d in ("kubelet", "cni", "manifests", "logs"):
        (tmp_path / d).mkdir()
    roots = Roots(kubelet_root=tmp_path / "kubelet", cni_data_dir=tmp_path / "cni", netns_dir=seen,
                  static_pod_dir=tmp_path / "manifests", pod_log_dir=tmp_path / "logs")
    inv = scan_node(roots, ScanOptions(runtime_state_dir=state))
    assert len(inv.netns) == 1, inv.netns  # read once
    # containerd reports the path on the node: /run/containerd/io.containerd.grpc.v1.cri/netns/cni-1
    runtime = view(sandbox("s", "u1", ips=("10.0.0.3",),
                           netns_path="/run/containerd/io.containerd.grpc.v1.cri/netns/cni-1"))
    live = desired(pod("web", "u1", ip="10.0.0.3"))
    found = {(f.kind, f.id): f for f in correlate(replace(inv, runtime=runtime), live, now=NOW)}
    ns = found[(Kind.NETNS, inv.netns[0].path)]
    assert not ns.cls.is_residue, ns
    assert ns.owner.container_id == "s", ns
