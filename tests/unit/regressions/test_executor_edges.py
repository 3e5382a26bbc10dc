"""Executors: an incomplete mount table refuses a lazy detach, a FIFO lock cannot hang the IPAM release, and
a second removal of a cache entry reports it gone."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from nodegc.hostio.libc import MNT_DETACH
from nodegc.model.resources import CNICacheEntry, NetnsEntry, VolumeDir
from nodegc.reclaim.cni_del import remove_cache_entry
from nodegc.reclaim.netns import remove_netns
from nodegc.reclaim.unmounting import unmount_volume

VOL = "/k/pods/u1/volumes/kubernetes.io~nfs/v"


def _fake_child(tmp: Path) -> tuple[list[str], Path]:
    """A child that answers EBUSY to a plain unmount and ok to a lazy one, logging the flags."""
    log = tmp / "calls"
    code = textwrap.dedent(f"""
        import sys
        flags = int(sys.argv[3])
        open({str(log)!r}, "a").write(f"{{flags}}\\n")
        print("ok" if flags & 2 else "errno 16")
    """)
    return [sys.executable, "-c", code], log


def test_unmount_refuses_when_mountinfo_has_unparsable_lines(tmp_path: Path) -> None:
    """unmounting._look ignores parse problems (removing.py refuses on them): a submount on a skipped line
    is invisible, the plain unmount fails EBUSY, and the lazy detach then takes the hidden submount along."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(
        "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
        f"100 1 0:50 / {VOL} rw - nfs srv:/x rw\n"
        f"101 100 BAD / {VOL}/inner rw - tmpfs tmpfs rw\n"  # the kernel's line, unparsable to us
    )
    child, log = _fake_child(tmp_path)
    vol = VolumeDir(pod_uid="u1", plugin="kubernetes.io~nfs", name="v", path=VOL, mount_id=100)
    outcome = unmount_volume(vol, proc_root=proc, timeout=5, child=child)
    calls = log.read_text().split() if log.exists() else []
    assert str(MNT_DETACH) not in calls, f"lazy detach ran although the table was incomplete: {outcome}"
    assert not outcome.ok


def test_ipam_lock_fifo_does_not_hang(tmp_path: Path) -> None:
    """ipam._lock opens `lock` O_RDONLY without O_NONBLOCK: a FIFO there blocks forever (lock_timeout
    does not apply to open)."""
    net = tmp_path / "networks" / "net1"
    net.mkdir(parents=True)
    os.mkfifo(net / "lock")
    (net / "10.0.0.5").write_bytes(b"cid\r\neth0")
    prog = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from nodegc.model.resources import IPReservation
        from nodegc.reclaim.ipam import release_ip
        from nodegc.settings import Roots
        p = {str(net / "10.0.0.5")!r}
        res = IPReservation(network="net1", ip="10.0.0.5", path=p, inode=os.stat(p).st_ino, mtime=0.0,
                            container_id="cid", ifname="eth0")
        print(release_ip(res, roots=Roots(cni_data_dir=Path({str(tmp_path)!r})), lock_timeout=0.5))
    """)
    try:
        subprocess.run([sys.executable, "-c", prog], timeout=5, check=False, capture_output=True)
    except subprocess.TimeoutExpired:
        raise AssertionError("release_ip hung on a FIFO named lock (lock_timeout=0.5s)") from None


def test_remove_cache_entry_second_run_reports_gone(tmp_path: Path) -> None:
    entry = CNICacheEntry(path=str(tmp_path / "results" / "net-cid-eth0"), inode=1, mtime=0.0,
                          network="net", container_id="cid", ifname="eth0")
    outcome = remove_cache_entry(entry)
    assert outcome.ok and outcome.already_gone, outcome


def test_netns_outside_the_netns_directory_is_refused(tmp_path: Path) -> None:
    stray = tmp_path / "elsewhere" / "cni-1"
    stray.parent.mkdir()
    stray.write_bytes(b"")
    ns = NetnsEntry(name="cni-1", path=str(stray), mounted=False, file_inode=stray.stat().st_ino)
    outcome = remove_netns(ns, netns_dir=tmp_path / "netns")
    assert not outcome.ok and stray.exists()
