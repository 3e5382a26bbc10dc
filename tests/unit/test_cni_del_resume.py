"""A CNI DEL handed its progress again resumes at the plugin that failed: the plugins whose DEL succeeded
are not run again. A firewall plugin whose DEL already ran is then not run again either, so the check that
every cached address is still this container's (it guards the firewall's address-only DEL) is not made on
the resume; it is made while the firewall's DEL is still to come.

Stand-in plugins are shell scripts that log each call and fail while a marker file exists."""

from __future__ import annotations

import json
from pathlib import Path

from nodegc.inventory.cni_cache import scan_cni_cache
from nodegc.model.resources import CNICacheEntry
from nodegc.reclaim.cni_del import DelProgress, cni_del
from nodegc.sandbox.cni import write_cache_entry
from nodegc.settings import Roots

CID = "ab" * 32
_PLUGIN = """#!/bin/sh
cat >/dev/null
echo "$(basename "$0") $CNI_COMMAND $CNI_IFNAME" >> {log}
if [ -e {fail}.$(basename "$0") ]; then
  echo '{{"cniVersion":"1.0.0","code":11,"msg":"busy"}}'
  exit 1
fi
exit 0
"""


def _node(tmp: Path, plugins: list[str]) -> tuple[Roots, CNICacheEntry, Path]:
    bin_dir, data = tmp / "bin", tmp / "cni"
    bin_dir.mkdir()
    log = tmp / "calls.log"
    for name in ("bridge", "portmap", "firewall"):
        script = bin_dir / name
        script.write_text(_PLUGIN.format(log=log, fail=tmp / "fail"))
        script.chmod(0o755)
    conflist = {"cniVersion": "1.0.0", "name": "net", "plugins": [{"type": p} for p in plugins]}
    write_cache_entry(cni_data_dir=data, network="net", container_id=CID, ifname="eth0", netns="",
                      conflist_bytes=json.dumps(conflist).encode(), cni_args=[], capability_args={},
                      result={"cniVersion": "1.0.0", "ips": [{"address": "10.9.0.5/24"}]})
    [entry], _ = scan_cni_cache(data)
    return Roots(cni_data_dir=data, cni_bin_dirs=(bin_dir,)), entry, log


def _calls(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def test_a_del_resumes_at_the_plugin_that_failed(tmp_path: Path) -> None:
    roots, entry, log = _node(tmp_path, ["bridge", "portmap"])
    (tmp_path / "fail.bridge").touch()
    progress = DelProgress()
    first = cni_del(entry, roots=roots, keep_cache=True, progress=progress)
    assert not first.ok and "busy" in first.detail
    assert _calls(log) == ["portmap", "bridge"]  # DEL runs the plugins in reverse
    assert progress.plugins_done == 1 and progress.failed_plugin == "bridge"
    (tmp_path / "fail.bridge").unlink()
    again = cni_del(entry, roots=roots, keep_cache=True, progress=progress)
    assert again.ok, again.detail
    assert _calls(log) == ["portmap", "bridge", "bridge"]  # portmap's DEL is not repeated
    assert progress.plugins_done == 2 and progress.failed_plugin is None


def test_without_progress_every_del_runs_every_plugin(tmp_path: Path) -> None:
    roots, entry, log = _node(tmp_path, ["bridge", "portmap"])
    assert cni_del(entry, roots=roots, keep_cache=True).ok
    assert cni_del(entry, roots=roots, keep_cache=True).ok
    assert _calls(log) == ["portmap", "bridge", "portmap", "bridge"]


def test_the_address_check_guards_a_firewall_del_still_to_come_only(tmp_path: Path) -> None:
    """No reservation of the cached address exists (released, as after host-local's DEL): a DEL whose
    firewall step is still to come is refused before any plugin runs; one resumed after the firewall's
    DEL went through goes on with the plugins after it."""
    roots, entry, log = _node(tmp_path, ["bridge", "firewall"])
    refused = cni_del(entry, roots=roots, keep_cache=True)
    assert not refused.ok and "no longer reserved" in refused.detail and _calls(log) == []
    resumed = cni_del(entry, roots=roots, keep_cache=True, progress=DelProgress(plugins_done=1))
    assert resumed.ok, resumed.detail
    assert _calls(log) == ["bridge"]
