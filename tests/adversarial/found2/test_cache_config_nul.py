"""A cache entry whose cached configuration sets host-local's `dataDir` to a string holding a NUL
(valid JSON: "\\u0000") crashes the host executor: `reclaim/teardown.py:_bridge` calls
`os.path.realpath(data_dir)`, which raises ValueError (embedded null byte), and `plan()` is called from
`dispatch._HostRun.cni_dels` outside any handler. The whole batch dies with it: every other sandbox of
the cycle stays TERMINATING, and since the entry is residue again next cycle, no cycle ever reclaims
anything (the agent logs "cycle failed" forever). Bad input must be a skip with a reason."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from nodegc.inventory.cni_cache import scan_cni_cache
from nodegc.model.items import Item, Phase, item_key
from nodegc.model.resources import Kind
from nodegc.planning.phases import identity_of
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.reclaim.outcomes import Outcome
from nodegc.settings import Roots

NET = "k8s-pod-network"
CID = "c" * 64


def _run(tmp_path: Path, *, data_dir: str, netns: str, direct: bool, extra_arg: str = "1") -> list[Outcome]:
    data = tmp_path / "cni"
    conf = {"cniVersion": "1.0.0", "name": NET, "plugins": [
        {"type": "bridge", "bridge": "cni0", "ipMasq": True,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.0.0.0/24"}]], "dataDir": data_dir}}]}
    doc = {"kind": "cniCacheV1", "containerId": CID, "config": base64.b64encode(json.dumps(conf).encode()).decode(),
           "ifName": "eth0", "networkName": NET, "netns": netns,
           "cniArgs": [["K8S_POD_UID", "gone-uid"], ["IgnoreUnknown", extra_arg]],
           "result": {"cniVersion": "1.0.0", "ips": []}}
    (data / "results").mkdir(parents=True)
    (data / "results" / f"{NET}-{CID}-eth0").write_text(json.dumps(doc))
    entries, problems = scan_cni_cache(data)
    assert len(entries) == 1 and not problems, problems
    entry = entries[0]
    item = Item(key=item_key(Kind.CNI_CACHE, entry.path), kind=Kind.CNI_CACHE, resource_id=entry.path,
                phase=Phase.TERMINATING, identity=identity_of(entry), finding_class="stale_cni_cache",
                owner_uid="gone-uid", owner_namespace=None, owner_name=None, container_id=CID,
                first_seen=0.0, last_seen=0.0, orphan_count=3)
    outcomes: list[Outcome] = []
    roots = Roots(cni_data_dir=data, cni_bin_dirs=(Path("/usr/lib/cni"),), netns_dir=tmp_path / "netns")
    HostExecutor(roots, direct_teardown=direct).execute([(item, entry)], on_outcome=lambda i, o: outcomes.append(o))
    return outcomes


def test_a_nul_in_the_cached_data_dir_is_a_failed_outcome_not_a_crash(tmp_path: Path) -> None:
    outcomes = _run(tmp_path, data_dir="/var/lib/cni\u0000x", netns="/var/run/netns/cni-x", direct=True)
    assert len(outcomes) == 1 and not outcomes[0].ok  # ValueError from teardown.py:_bridge (os.path.realpath)


def test_a_nul_in_the_cached_netns_is_an_outcome_not_a_crash(tmp_path: Path) -> None:
    """The path through the plugins: `cni_del.netns_for_del` lstat()s `<netns dir>/<name>` and caught
    OSError only; the ValueError came out of the DEL thread's future. Now such a path is no namespace of the
    netns directory, so DEL runs without CNI_NETNS (host side only), as for any other such path."""
    outcomes = _run(tmp_path, data_dir=str(tmp_path / "cni" / "networks"), netns="/var/run/netns/cni-\u0000x",
                    direct=False)
    assert len(outcomes) == 1


def test_a_nul_in_a_cached_cni_arg_is_a_failed_outcome_not_a_crash(tmp_path: Path) -> None:
    """CNI_ARGS goes into the plugin's environment: subprocess refuses a NUL with ValueError, and
    `cni_exec.exec_plugin` catches only TimeoutExpired and OSError."""
    outcomes = _run(tmp_path, data_dir=str(tmp_path / "cni" / "networks"), netns="/var/run/netns/cni-x",
                    direct=False, extra_arg="1\u0000")
    assert len(outcomes) == 1 and not outcomes[0].ok
