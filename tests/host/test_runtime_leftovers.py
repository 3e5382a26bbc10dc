"""containerd's leftovers against a real containerd: sandbox state dirs with their shm mounts, task bundles
with their rootfs mounts and shim processes whose id the runtime no longer lists, made by real faults, and
what `nodegc clean --apply` does with them (and what it must not touch).

Faults: containerd dies and loses its metadata while its shims keep running (a fresh containerd no longer
knows them, their task bundles and rootfs mounts stay); a power loss (every process dies, the mounts stay)
whose state containerd's start-up recovery did not see (it cleans orphans only when it starts, so the
tests hold the directories aside while it starts and put them back).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodegc.desired.snapshot import SnapshotSource
from nodegc.engine.cycle import Engine, EngineSettings, NullMetrics
from nodegc.inventory.cri.leftovers import start_ticks
from nodegc.inventory.cri.reading import sandbox_from_status
from nodegc.ledger.store import Ledger
from nodegc.model.runtime import RuntimeLeftover
from nodegc.planning.correlate import CorrelationPolicy
from nodegc.planning.phases import PhasePolicy
from nodegc.reclaim.dispatch import HostExecutor
from nodegc.reclaim.runtime_leftovers import remove_runtime_dir, stop_shim
from nodegc.sandbox.containerd import SandboxContainerd, SandboxSpec, new_spec, pod_record, write_pods
from nodegc.sandbox.node import SandboxNode, _sys_mount, _sys_umount, is_mounted
from nodegc.settings import ScanOptions

Runtime = tuple[SandboxNode, SandboxContainerd]
CRI = "io.containerd.grpc.v1.cri"
TASKS = "io.containerd.runtime.v2.task/k8s.io"


def _nodegc(node: SandboxNode, rt: SandboxContainerd, snap: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nodegc", *argv, *_roots(node, rt, snap)], capture_output=True,
                          text=True, timeout=300, check=False)


def _roots(node: SandboxNode, rt: SandboxContainerd, snap: Path) -> list[str]:
    r = node.roots
    return ["--kubelet-root", str(r.kubelet_root), "--cni-data-dir", str(r.cni_data_dir), "--netns-dir",
             str(r.netns_dir), "--net-ns", str(r.net_ns), "--cni-bin-dir", "/usr/lib/cni",
             "--cni-conf-dir", str(r.cni_conf_dir), "--pods-from", str(snap), "--node", node.node_name,
             "--runtime-endpoint", rt.endpoint, "--runtime-state-dir", str(rt.state), "--min-age", "0",
             "--pod-log-dir", str(rt.log_root)]


def _status(rt: SandboxContainerd, sid: str) -> tuple[bool, tuple[str, ...], str | None] | None:
    with rt.client() as c:
        reply = c.sandbox_status(sid, verbose=True)
    if reply is None:
        return None
    sb = sandbox_from_status(reply)
    return sb.ready, sb.ips, sb.netns_path


def _leftovers(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["id"]: f for f in doc["findings"] if f["kind"] == "runtime_leftover"}


def _own_mounts(rt: SandboxContainerd, sid: str, cids: tuple[str, ...]) -> list[Path]:
    return [rt.state / CRI / "sandboxes" / sid / "shm", *(rt.state / TASKS / i / "rootfs" for i in (sid, *cids))]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and b"zombie" not in Path(f"/proc/{pid}/status").read_bytes().lower()


def _shims_of(rt: SandboxContainerd) -> dict[str, int]:
    out = {}
    for pid in rt.shim_pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited since it was listed: not a shim any more
        if b"-id" in argv:
            out[argv[argv.index(b"-id") + 1].decode()] = pid
    return out


def test_shims_that_lost_their_runtime_are_stopped_only_on_opt_in(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    lost = new_spec("lost")
    lost_sid = rt.run_sandbox(lost)
    lost_cid = rt.run_container(lost_sid, lost)
    rt.kill()  # the daemon dies; its shims and the sandbox's processes keep running, its state stays...
    shutil.rmtree(rt.root / "io.containerd.metadata.v1.bolt", ignore_errors=True)  # ...its database is lost
    rt.start()
    live = new_spec("live")
    live_sid = rt.run_sandbox(live)
    live_cid = rt.run_container(live_sid, live)
    before = _status(rt, live_sid)
    assert before is not None and before[0]
    shims = _shims_of(rt)
    assert set(shims) == {lost_sid, live_sid}
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, live, before[1][0])])

    scan = _nodegc(node, rt, snap, "scan", "-o", "json")
    assert scan.returncode in (0, 3), scan.stderr[-2000:]
    left = _leftovers(json.loads(scan.stdout))
    shim_finding = left[f"/proc/{shims[lost_sid]}"]
    assert shim_finding["class"] == "runtime_leftover" and "--stop-orphan-shims" in shim_finding["evidence"][-1]
    for cid in (lost_sid, lost_cid):
        task = left[str(rt.state / TASKS / cid)]
        assert task["class"] == "runtime_leftover" and "shim" in task["evidence"][-1], task  # its shim runs
    assert not [f for f in left.values() if f["owner"]["container_id"] in (live_sid, live_cid)]

    state = str(tmp_path / "state")
    clean = _nodegc(node, rt, snap, "clean", "--apply", "--state-dir", state, "-o", "json")
    assert clean.returncode in (0, 3), clean.stderr[-2000:]
    assert _alive(shims[lost_sid]), "reported, never stopped by default"
    assert (rt.state / TASKS / lost_cid).is_dir()

    clean = _nodegc(node, rt, snap, "clean", "--apply", "--stop-orphan-shims", "--state-dir", state, "-o", "json")
    assert clean.returncode in (0, 3), clean.stderr[-2000:]
    deadline = time.monotonic() + 10
    while _alive(shims[lost_sid]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(shims[lost_sid]), clean.stdout[-3000:]
    assert _alive(shims[live_sid])
    # The shim first; its task bundles and rootfs mounts after it. containerd runs its own cleanup of the
    # exited shim (`containerd-shim-runc-v2 ... delete`, which nodegc never signals and waits for).
    while lost_sid in _shims_of(rt) and time.monotonic() < deadline + 10:
        time.sleep(0.1)
    again = _nodegc(node, rt, snap, "clean", "--apply", "--stop-orphan-shims", "--state-dir", state, "-o", "json")
    assert again.returncode in (0, 3), again.stderr[-2000:]
    for cid in (lost_sid, lost_cid):
        seen = _leftovers(json.loads(_nodegc(node, rt, snap, "scan", "-o", "json").stdout))
        assert not (rt.state / TASKS / cid).exists(), (seen.get(str(rt.state / TASKS / cid)) or {}).get("evidence")
    assert _status(rt, live_sid) == before
    assert all(is_mounted(p) for p in _own_mounts(rt, live_sid, (live_cid,)))


def _hold_aside(rt: SandboxContainerd, held: Path, sid: str, cid: str) -> list[tuple[Path, Path]]:
    moves = [(rt.state / CRI / "sandboxes" / sid, held / "sandbox"), (rt.state / TASKS / sid, held / "pause"),
             (rt.state / TASKS / cid, held / "app")]
    held.mkdir()
    for src, dst in moves:
        src.rename(dst)
    return moves


def _plant(rt: SandboxContainerd, tmp: Path) -> tuple[Path, Path, bytes]:
    """A sandbox dir that is a symlink to a directory outside the state dir, and a name that is not UTF-8."""
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not containerd's")
    planted = rt.state / CRI / "sandboxes" / ("e" * 64)
    planted.symlink_to(outside)
    odd_name = os.path.join(os.fsencode(rt.state / CRI / "sandboxes"), b"\xff\xfe")
    os.mkdir(odd_name)
    return planted, outside, odd_name


def _executor_refuses(rt: SandboxContainerd, planted: Path, outside: Path) -> None:
    """Asked directly, the executor refuses the symlink and anything outside the state dir."""
    for inode in (os.lstat(planted).st_ino, outside.stat().st_ino):
        link = RuntimeLeftover("sandbox_dir", "e" * 64, str(planted), inode=inode)
        assert not remove_runtime_dir(link, state_dir=rt.state, endpoint=rt.endpoint, timeout=5.0).ok
    away = RuntimeLeftover("sandbox_dir", "e" * 64, str(outside), inode=outside.stat().st_ino)
    assert "refused" in remove_runtime_dir(away, state_dir=rt.state, endpoint=rt.endpoint, timeout=5.0).detail
    assert planted.is_symlink() and (outside / "keep").read_text() == "not containerd's"


def _power_loss_leftovers(rt: SandboxContainerd, *names: str) -> list[tuple[str, str]]:
    """(sandbox id, container id) of pods whose state dirs and mounts outlived a power loss unseen by
    containerd's start-up recovery."""
    specs = [new_spec(name) for name in names]
    ids = []
    for spec in specs:
        sid = rt.run_sandbox(spec)
        ids.append((sid, rt.run_container(sid, spec)))
    rt.kill_everything()  # a power loss: every process dies, the mounts stay
    shutil.rmtree(rt.root / "io.containerd.metadata.v1.bolt", ignore_errors=True)
    moves = [m for (sid, cid), name in zip(ids, names, strict=True)
             for m in _hold_aside(rt, rt.state.parent / f"held-{name}", sid, cid)]
    rt.start()
    for src, dst in moves:
        dst.rename(src)
    assert all(is_mounted(p) for sid, cid in ids for p in _own_mounts(rt, sid, (cid,)))
    return ids


def test_state_dirs_and_mounts_without_a_runtime_behind_them(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    (gone_sid, gone_cid), (odd_sid, odd_cid) = _power_loss_leftovers(rt, "gone", "odd")
    gone_mounts, odd_mounts = _own_mounts(rt, gone_sid, (gone_cid,)), _own_mounts(rt, odd_sid, (odd_cid,))
    live = new_spec("live")
    live_sid = rt.run_sandbox(live)
    live_cid = rt.run_container(live_sid, live)
    before = _status(rt, live_sid)
    assert before is not None and before[0]
    live_mounts = _own_mounts(rt, live_sid, (live_cid,))
    # A mount below a leftover that is not its own shm: that directory is not touched.
    foreign = rt.state / CRI / "sandboxes" / odd_sid / "extra"
    foreign.mkdir()
    _sys_mount("tmpfs", foreign, "tmpfs", 0, None)
    planted, outside, odd_name = _plant(rt, tmp_path)
    try:
        snap = write_pods(tmp_path / "pods.json", [pod_record(node, live, before[1][0])])
        scan = _nodegc(node, rt, snap, "scan", "-o", "json")
        left = _leftovers(json.loads(scan.stdout))
        for path in (rt.state / CRI / "sandboxes" / gone_sid, rt.state / TASKS / gone_sid, rt.state / TASKS / gone_cid):
            assert left[str(path)]["class"] == "orphaned_runtime_dir", left.get(str(path))
        assert left[str(rt.state / CRI / "sandboxes" / odd_sid)]["class"] == "runtime_leftover"
        assert "symlink" in left[str(planted)]["evidence"][-1]
        assert not [f for f in left.values() if f["owner"]["container_id"] in (live_sid, live_cid)]

        clean = _nodegc(node, rt, snap, "clean", "--apply", "--state-dir", str(tmp_path / "state"), "-o", "json")
        assert clean.returncode in (0, 3), clean.stderr[-2000:]
        for path in (rt.state / CRI / "sandboxes" / gone_sid, rt.state / TASKS / gone_sid, rt.state / TASKS / gone_cid):
            assert not path.exists(), clean.stdout[-3000:]
        assert not any(is_mounted(p) for p in gone_mounts)
        # The sandbox dir with a foreign mount below it stays whole (its task bundles are leftovers of their own).
        assert is_mounted(odd_mounts[0]) and is_mounted(foreign) and (foreign.parent / "shm").is_dir()
        assert planted.is_symlink() and (outside / "keep").read_text() == "not containerd's"
        assert os.path.isdir(odd_name)
        _executor_refuses(rt, planted, outside)
        assert all(is_mounted(p) for p in live_mounts)
        assert _status(rt, live_sid) == before
    finally:
        with contextlib.suppress(OSError):
            _sys_umount(foreign, 0)


def test_a_crash_after_a_directory_went_resumes_from_the_checkpoint(containerd_node: Runtime,
                                                                     tmp_path: Path) -> None:
    node, rt = containerd_node
    [(sid, cid)] = _power_loss_leftovers(rt, "gone")
    dirs = [rt.state / CRI / "sandboxes" / sid, rt.state / TASKS / sid, rt.state / TASKS / cid]
    snap = write_pods(tmp_path / "pods.json", [])
    state = ["--state-dir", str(tmp_path / "state"), "--allow-empty-desired"]
    env = {**os.environ, "NODEGC_FAULT": "after_clean:runtime_leftover"}
    crashed = subprocess.run([sys.executable, "-m", "nodegc", "clean", "--apply", *state, *_roots(node, rt, snap)],
                             env=env, capture_output=True, text=True, timeout=300, check=False)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert sum(not d.exists() for d in dirs) == 1  # the first step ran, its result was never recorded
    again = _nodegc(node, rt, snap, "clean", "--apply", *state, "-o", "json")
    assert again.returncode in (0, 3), again.stderr[-2000:]
    assert not any(d.exists() for d in dirs) and not any(is_mounted(p) for p in _own_mounts(rt, sid, (cid,)))
    history = subprocess.run([sys.executable, "-m", "nodegc", "history", *state[:2], "-o", "json"],
                             capture_output=True, text=True, timeout=60, check=False)
    rows = [r for r in json.loads(history.stdout)["items"] if r["kind"] == "runtime_leftover"]
    closed = {r["item"] for r in rows if r["to"] == "closed"}
    assert closed == {f"runtime_leftover:{d}" for d in dirs}, rows
    assert any("interrupted" in r["reason"] for r in rows if r["to"] in ("closed", "cleaned")), rows


def test_an_empty_or_incomplete_runtime_list_blocks_every_leftover(containerd_node: Runtime, tmp_path: Path) -> None:
    node, rt = containerd_node
    lost = new_spec("lost")
    lost_sid = rt.run_sandbox(lost)
    rt.run_container(lost_sid, lost)
    rt.kill()
    shutil.rmtree(rt.root / "io.containerd.metadata.v1.bolt", ignore_errors=True)
    rt.start()
    shim_pid = _shims_of(rt)[lost_sid]
    # The API still shows the pod running: the fresh runtime's empty list is not the node's whole word.
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, lost, "10.22.0.99")])

    class Counting(NullMetrics):
        def __init__(self) -> None:
            self.blocks: list[str] = []

        def blocked(self, reason: str) -> None:
            self.blocks.append(reason)

    metrics = Counting()
    settings = EngineSettings(phases=PhasePolicy(consecutive_scans=1, grace_seconds=0),
                              correlation=CorrelationPolicy(min_age_seconds=0, stop_orphan_shims=True),
                              scan=ScanOptions(min_age_seconds=0, runtime_endpoint=rt.endpoint,
                                               runtime_state_dir=rt.state))
    with Ledger(":memory:") as ledger:
        def cycle() -> None:
            Engine(roots=node.roots, source=SnapshotSource(snap, node.node_name), ledger=ledger,
                   executor=HostExecutor(node.roots, runtime_endpoint=rt.endpoint, runtime_state_dir=rt.state),
                   settings=settings, metrics=metrics).cycle()
        cycle()
        assert "runtime_unavailable" in metrics.blocks
        # Then a list with a sandbox, but none of the running pod's.
        other = new_spec("other")
        rt.run_sandbox(other)
        cycle()
        cycle()
        assert metrics.blocks.count("runtime_unavailable") >= 3
        assert not [i for i in ledger.items().values() if i.kind.value == "runtime_leftover"]
    assert _alive(shim_pid)
    assert (rt.state / TASKS / lost_sid).is_dir()


def test_another_containerd_clients_tasks_and_shims_are_never_judged(containerd_node: Runtime,
                                                                     tmp_path: Path) -> None:
    """Docker (namespace `moby`) or nerdctl share containerd: the CRI lists none of their containers, so
    their shims and task bundles are not the CRI's leftovers, even with --stop-orphan-shims."""
    node, rt = containerd_node
    ctr = ["ctr", "--address", str(rt.socket), "--namespace", "moby"]
    subprocess.run([*ctr, "images", "import", str(rt.images_dir / "busybox.tar")], check=True, capture_output=True,
                   timeout=60)
    name = "dockerish"
    subprocess.run([*ctr, "run", "-d", "--cgroup", f"/{rt.cgroup_parent}/moby", "localhost/nodegc/busybox:1", name,
                    "/bin/sleep", "600"], check=True, capture_output=True, timeout=60)
    try:
        task = rt.state / "io.containerd.runtime.v2.task/moby" / name
        assert task.is_dir() and is_mounted(task / "rootfs")
        [shim_pid] = [p for p in rt.shim_pids() if b"moby" in Path(f"/proc/{p}/cmdline").read_bytes()]
        snap = write_pods(tmp_path / "pods.json", [])
        scan = _nodegc(node, rt, snap, "scan", "-o", "json")
        assert not [f for f in _leftovers(json.loads(scan.stdout)).values() if "moby" in f["id"]
                    or f["id"] == f"/proc/{shim_pid}"]
        clean = _nodegc(node, rt, snap, "clean", "--apply", "--stop-orphan-shims", "--allow-empty-desired",
                        "--state-dir", str(tmp_path / "state"), "-o", "json")
        assert clean.returncode in (0, 3), clean.stderr[-2000:]
        assert _alive(shim_pid) and is_mounted(task / "rootfs")
    finally:
        subprocess.run([*ctr, "task", "kill", "-s", "KILL", name], capture_output=True, timeout=30, check=False)
        time.sleep(0.5)
        subprocess.run([*ctr, "task", "delete", "-f", name], capture_output=True, timeout=30, check=False)
        subprocess.run([*ctr, "container", "delete", name], capture_output=True, timeout=30, check=False)


def test_a_shim_is_signalled_only_while_it_is_the_verified_unknown_one(containerd_node: Runtime) -> None:
    _, rt = containerd_node
    live = new_spec("live")
    live_sid = rt.run_sandbox(live)
    pid = _shims_of(rt)[live_sid]
    shim = RuntimeLeftover("shim", live_sid, f"/proc/{pid}", pid=pid, start_time=start_ticks(Path("/proc"), pid),
                           address=str(rt.socket))
    # The runtime knows that id (again): never signalled.
    out = stop_shim(shim, endpoint=rt.endpoint, timeout=5.0)
    assert out.identity_changed and not out.ok and "lists" in out.detail
    assert _alive(pid) and _status(rt, live_sid) is not None
    # A pid reused by another process (another start time, or not a shim at all): never signalled.
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        ticks = start_ticks(Path("/proc"), sleeper.pid)
        assert ticks is not None
        fake = dataclasses.replace(shim, id="f" * 64, pid=sleeper.pid, path=f"/proc/{sleeper.pid}")
        for reused in (dataclasses.replace(fake, start_time=ticks - 1), dataclasses.replace(fake, start_time=ticks)):
            out = stop_shim(reused, endpoint=rt.endpoint, timeout=5.0)
            assert out.identity_changed and not out.ok, out
            assert sleeper.poll() is None
        # A pid namespace that is not this process's: nothing is signalled.
        other = stop_shim(fake, endpoint=rt.endpoint, timeout=5.0, proc_root=Path("/nonexistent"))
        assert not other.ok and "pid namespace" in other.detail
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()
    assert _alive(pid)


def test_reclaims_from_a_host_to_container_view_reach_the_node(containerd_node: Runtime, tmp_path: Path) -> None:
    """The DaemonSet mounts the runtime's state dir with HostToContainer (rslave), not Bidirectional (the
    agent's own rootfs lives below it on a node). nodegc runs here in a mount namespace whose mounts are
    slaves of this one's (the node's, whose /run is shared as systemd makes it): it unmounts only its copy of
    a leftover's shm and rootfs, and removing the directory then detaches the node's mount too. The live
    sandbox's mounts, seen in that view as well, are untouched."""
    node, rt = containerd_node
    ((gone_sid, gone_cid),) = _power_loss_leftovers(rt, "gone")
    gone_mounts = _own_mounts(rt, gone_sid, (gone_cid,))
    live = new_spec("live")
    live_sid = rt.run_sandbox(live)
    live_cid = rt.run_container(live_sid, live)
    before = _status(rt, live_sid)
    assert before is not None and before[0]
    live_mounts = _own_mounts(rt, live_sid, (live_cid,))
    for point in (*gone_mounts, *live_mounts):
        _run_checked(["mount", "--make-shared", str(point)])
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, live, before[1][0])])
    clean = subprocess.run(["unshare", "--mount", "--propagation", "slave", sys.executable, "-m", "nodegc", "clean",
                            "--apply", "--state-dir", str(tmp_path / "state"), "-o", "json",
                            *_roots(node, rt, snap)], capture_output=True, text=True, timeout=300, check=False)
    assert clean.returncode in (0, 3), clean.stderr[-2000:]
    for path in (rt.state / CRI / "sandboxes" / gone_sid, rt.state / TASKS / gone_sid, rt.state / TASKS / gone_cid):
        assert not path.exists(), clean.stdout[-3000:]
    assert not any(is_mounted(p) for p in gone_mounts), "the node kept the leftover's mounts"
    assert all(is_mounted(p) for p in live_mounts)
    assert _status(rt, live_sid) == before


def _run_checked(argv: list[str]) -> None:
    subprocess.run(argv, capture_output=True, timeout=30, check=True)


def _container_pids(rt: SandboxContainerd, *cids: str) -> dict[str, int]:
    return {cid: int((rt.state / TASKS / cid / "init.pid").read_text()) for cid in cids}


@dataclasses.dataclass
class _Lost:
    """A shim its daemon does not know, with its sandbox's and app's containers, and a live pod beside it."""

    shim: RuntimeLeftover
    sid: str
    cid: str
    pids: dict[str, int]
    live_shim: int
    live_sid: str
    live_pids: dict[str, int]
    live: SandboxSpec


def _lost_shim(rt: SandboxContainerd) -> _Lost:
    lost = new_spec("lost")
    lost_sid = rt.run_sandbox(lost)
    lost_cid = rt.run_container(lost_sid, lost)
    rt.kill()
    shutil.rmtree(rt.root / "io.containerd.metadata.v1.bolt", ignore_errors=True)
    moves = _hold_aside(rt, rt.state.parent / "held-lost", lost_sid, lost_cid)
    rt.start()  # the daemon does not load the shim: its bundles are not there
    for src, dst in moves:
        dst.rename(src)
    live = new_spec("live")
    live_sid = rt.run_sandbox(live)
    live_cid = rt.run_container(live_sid, live)
    shims = _shims_of(rt)
    lost_pids = _container_pids(rt, lost_sid, lost_cid)
    live_pids = _container_pids(rt, live_sid, live_cid)
    assert all(_alive(p) for p in (*lost_pids.values(), *live_pids.values()))
    pid = shims[lost_sid]
    shim = RuntimeLeftover("shim", lost_sid, f"/proc/{pid}", pid=pid, start_time=start_ticks(Path("/proc"), pid),
                           address=str(rt.socket))
    return _Lost(shim, lost_sid, lost_cid, lost_pids, shims[live_sid], live_sid, live_pids, live)


def _wait_gone(*pids: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(_alive(p) for p in pids)


def test_stopping_a_shim_its_daemon_does_not_know_stops_its_containers(containerd_node: Runtime) -> None:
    """What a real containerd leaves: a shim its daemon loaded at start-up (its task bundle was there) is
    cleaned up after by the daemon when it exits (`... delete`: runc delete --force, the bundle removed).
    A shim the daemon does not know (its bundles were not there when it started) leaves its containers
    running, reparented, in their cgroups, the rootfs mounted. nodegc pins the shim's children (the
    containers' init processes, each in its container's cgroup, an id the runtime does not list) before it
    signals the shim, and kills them after; another sandbox's containers and shim are untouched."""
    _, rt = containerd_node
    lost = _lost_shim(rt)
    out = stop_shim(lost.shim, endpoint=rt.endpoint, timeout=5.0)
    assert out.ok and "killed its 2 container process(es)" in out.detail, out
    assert _wait_gone(lost.shim.pid or 0, *lost.pids.values())
    assert all(_alive(p) for p in (lost.live_shim, *lost.live_pids.values()))
    assert _status(rt, lost.live_sid) is not None


def _cgroup_mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, controllers or name=) of this mount namespace's cgroup hierarchies."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, right = line.split(" - ", 1)
        fstype, _, opts = right.split(" ", 2)
        if fstype in ("cgroup", "cgroup2"):
            out.append((left.split(" ")[4], fstype, set(opts.split(",")) if fstype == "cgroup" else set()))
    return out


def test_on_a_hybrid_node_a_container_left_at_the_v2_root_is_still_its_containers(
        containerd_node: Runtime) -> None:
    """cgroup v1 controllers plus the v2 hierarchy at /sys/fs/cgroup/unified (this machine's layout): a
    runtime that does not join the v2 hierarchy leaves its containers at its root (`0::/`). The v1
    hierarchies name the container: the shim's children are still its containers, killed, the shim stopped."""
    hierarchies = _cgroup_mounts()
    v2 = [point for point, fstype, _ in hierarchies if fstype == "cgroup2"]
    if not v2 or not any(fstype == "cgroup" for _, fstype, _ in hierarchies):
        pytest.skip("not a hybrid cgroup node (v1 controllers and a v2 hierarchy)")
    _, rt = containerd_node
    lost = _lost_shim(rt)
    for pid in lost.pids.values():
        Path(v2[0], "cgroup.procs").write_text(str(pid))  # as a runtime that never joined it leaves them
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        assert "0::/" in lines and any(lost.sid in line or lost.cid in line for line in lines), lines
    out = stop_shim(lost.shim, endpoint=rt.endpoint, timeout=5.0)
    assert out.ok and "killed its 2 container process(es)" in out.detail, out
    assert _wait_gone(lost.shim.pid or 0, *lost.pids.values())
    assert all(_alive(p) for p in (lost.live_shim, *lost.live_pids.values()))


def _freezer_state(pid: int) -> Path | None:
    """The v1 freezer.state of the process's freezer cgroup, when a v1 freezer is mounted."""
    point = next((p for p, fstype, opts in _cgroup_mounts() if fstype == "cgroup" and "freezer" in opts), None)
    if point is None:
        return None
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "freezer" in controllers.split(","):
            return Path(point + path, "freezer.state")
    return None


def test_a_container_process_that_does_not_die_fails_the_stop_with_the_shim_left_running(
        containerd_node: Runtime) -> None:
    """The forced survivor: the app container's cgroup is frozen (cgroup v1 freezer), so its init process
    holds the SIGKILL and does not exit within the bound. The step fails, the shim is never signalled (it
    keeps the container findable); once thawed the process dies, and the next attempt stops the shim."""
    _, rt = containerd_node
    lost = _lost_shim(rt)
    app = lost.pids[lost.cid]
    state = _freezer_state(app)
    if state is None:
        pytest.skip("no cgroup v1 freezer: a frozen v2 cgroup lets SIGKILL through")
    state.write_text("FROZEN")
    try:
        deadline = time.monotonic() + 10
        while state.read_text().strip() != "FROZEN" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state.read_text().strip() == "FROZEN"
        out = stop_shim(lost.shim, endpoint=rt.endpoint, timeout=5.0, term_wait=1.0)
        # The sandbox's pause too, when the app shares its pid namespace: its exit waits for the app's.
        assert not out.ok and not out.identity_changed and "still run" in out.detail, out
        assert str(app) in out.detail.split("[", 1)[1].split("]", 1)[0], out
        assert _alive(lost.shim.pid or 0) and _alive(app)
        assert all(_alive(p) for p in (lost.live_shim, *lost.live_pids.values()))
    finally:
        state.write_text("THAWED")
    assert _wait_gone(app), "the thawed process got its SIGKILL"
    # Dead is not yet reaped: until its shim waits for it, the zombie is still the shim's child, out of every
    # cgroup, and the stop refuses it as a child in no container's cgroup (safe, but not what is tested here).
    deadline = time.monotonic() + 10
    while Path(f"/proc/{app}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    again = stop_shim(lost.shim, endpoint=rt.endpoint, timeout=5.0)
    assert again.ok, again
    assert _wait_gone(lost.shim.pid or 0, *lost.pids.values())
    assert all(_alive(p) for p in (lost.live_shim, *lost.live_pids.values()))


def test_a_shim_whose_child_is_in_no_containers_cgroup_is_not_signalled(containerd_node: Runtime) -> None:
    """A process that looks like an orphan shim of this runtime (its command line, its socket) but whose
    child is no container's (no container id in its cgroups): nothing is signalled, neither is stopped."""
    _, rt = containerd_node
    fake_id = "d" * 64
    shim = subprocess.Popen(["containerd-shim-runc-v2", "-c", "sleep 600 & wait", "-namespace", "k8s.io", "-id",
                             fake_id, "-address", str(rt.socket)], executable="/bin/bash")
    try:
        deadline = time.monotonic() + 5
        children: list[int] = []
        while not children and time.monotonic() < deadline:
            children = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()
                        and _ppid_of(int(e.name)) == shim.pid]
            time.sleep(0.05)
        assert children
        left = RuntimeLeftover("shim", fake_id, f"/proc/{shim.pid}", pid=shim.pid,
                               start_time=start_ticks(Path("/proc"), shim.pid), address=str(rt.socket))
        out = stop_shim(left, endpoint=rt.endpoint, timeout=5.0, term_wait=1.0)
        assert not out.ok and "in no container's cgroup" in out.detail, out
        assert shim.poll() is None and all(_alive(c) for c in children)
    finally:
        shim.kill()
        shim.wait()
        for c in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(c, signal.SIGKILL)


def _ppid_of(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(raw[raw.rindex(b")") + 2:].split()[1])


def _join_cgroups_of(pid: int, target: int) -> None:
    """Moves `pid` into every cgroup (each hierarchy) `target` is in."""
    mounts: list[tuple[str, set[str]]] = []  # (mount point, controllers); cgroup2 has none
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, right = line.split(" - ", 1)
        fstype, _, opts = right.split(" ", 2)
        if fstype in ("cgroup", "cgroup2"):
            mounts.append((left.split(" ")[4], set(opts.split(",")) if fstype == "cgroup" else set()))
    for line in Path(f"/proc/{target}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        wanted = set(controllers.split(",")) if controllers else set()
        point = next(m for m, c in mounts if (wanted <= c if wanted else not c))
        Path(point + path, "cgroup.procs").write_text(str(pid))


def test_a_shim_whose_child_is_in_a_listed_containers_cgroup_is_not_signalled(containerd_node: Runtime) -> None:
    """A process that looks like an orphan shim of this runtime, with a child in the cgroups of a container
    the runtime lists (a live pod's): the fresh list names that id, nothing is signalled."""
    _, rt = containerd_node
    live = new_spec("live")
    live_sid = rt.run_sandbox(live)
    live_cid = rt.run_container(live_sid, live)
    live_pid = _container_pids(rt, live_cid)[live_cid]
    fake_id = "d" * 64
    shim = subprocess.Popen(["containerd-shim-runc-v2", "-c", "sleep 600 & wait", "-namespace", "k8s.io", "-id",
                             fake_id, "-address", str(rt.socket)], executable="/bin/bash")
    children: list[int] = []
    try:
        deadline = time.monotonic() + 5
        while not children and time.monotonic() < deadline:
            children = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()
                        and _ppid_of(int(e.name)) == shim.pid]
            time.sleep(0.05)
        assert len(children) == 1
        _join_cgroups_of(children[0], live_pid)
        left = RuntimeLeftover("shim", fake_id, f"/proc/{shim.pid}", pid=shim.pid,
                               start_time=start_ticks(Path("/proc"), shim.pid), address=str(rt.socket))
        out = stop_shim(left, endpoint=rt.endpoint, timeout=5.0, term_wait=1.0)
        assert out.identity_changed and not out.ok and f"lists {live_cid[:12]}" in out.detail, out
        assert shim.poll() is None and _alive(children[0]) and _alive(live_pid)
    finally:
        shim.kill()
        shim.wait()
        for c in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(c, signal.SIGKILL)


def _container_cgroups(cgroups_path: str) -> list[Path]:
    """The container's cgroup directory in every hierarchy this mount namespace shows."""
    return [Path(point + cgroups_path) for point, _, _ in _cgroup_mounts()]


def _cgroups_path(rt: SandboxContainerd, cid: str) -> str:
    spec = json.loads((rt.state / TASKS / cid / "config.json").read_text())
    return str(spec["linux"]["cgroupsPath"])


RUNC = Path("/run/containerd/runc/k8s.io")


def _clean_until(node: SandboxNode, rt: SandboxContainerd, snap: Path, *flags: str, done: Any) -> list[str]:
    outs = []
    for _ in range(4):
        clean = _nodegc(node, rt, snap, "clean", "--apply", "--stop-orphan-shims", *flags, "-o", "json")
        assert clean.returncode in (0, 3), clean.stderr[-2000:]
        outs.append(clean.stdout)
        if done():
            break
        time.sleep(0.5)
    return outs


def test_after_an_orphan_shim_stops_runcs_state_and_the_empty_cgroups_go_with_its_bundles(
        containerd_node: Runtime, tmp_path: Path) -> None:
    """A shim its daemon does not know exits without containerd's cleanup (`runc delete`): runc's state dir
    of each container (<runc root>/k8s.io/<id>) and the containers' cgroups stay. They go in the task
    bundle's step, before the bundle. The live pod's runc state and cgroups are untouched."""
    node, rt = containerd_node
    lost = _lost_shim(rt)
    ids = (lost.sid, lost.cid)
    lost_cgroups = [cg for i in ids for cg in _container_cgroups(_cgroups_path(rt, i))]
    live_ids = [c for c in os.listdir(RUNC) if c not in ids]
    live_cgroups = [cg for i in live_ids for cg in _container_cgroups(_cgroups_path(rt, i))]
    assert all((RUNC / i / "state.json").is_file() for i in ids) and len(live_ids) == 2
    assert all(cg.is_dir() for cg in (*lost_cgroups, *live_cgroups))
    before = _status(rt, lost.live_sid)
    assert before is not None
    snap = write_pods(tmp_path / "pods.json", [pod_record(node, lost.live, before[1][0])])

    def done() -> bool:
        return not any((rt.state / TASKS / i).exists() for i in ids)

    outs = _clean_until(node, rt, snap, "--state-dir", str(tmp_path / "state"), done=done)
    assert done(), outs[-1][-3000:]
    assert _wait_gone(lost.shim.pid or 0, *lost.pids.values())
    assert not any((RUNC / i).exists() for i in ids)
    assert not [cg for cg in lost_cgroups if cg.exists()]
    assert all(cg.parent.is_dir() for cg in lost_cgroups)  # the pod's cgroup is the kubelet's
    assert all((RUNC / i / "state.json").is_file() for i in live_ids)
    assert all(cg.is_dir() for cg in live_cgroups)
    assert all(_alive(p) for p in (lost.live_shim, *lost.live_pids.values()))
    assert _status(rt, lost.live_sid) == before


def test_a_container_cgroup_that_still_holds_a_process_keeps_its_bundle_and_runc_state(
        containerd_node: Runtime, tmp_path: Path) -> None:
    """After the shim stopped, a process sits in the lost app's (empty) cgroups (moved there, or a descendant
    that outlived the kill outside the container's pid namespace): the bundle's step fails on the cgroup
    (EBUSY), and the cgroup, runc's state and the bundle stay. Once it is gone, a later attempt removes them."""
    node, rt = containerd_node
    lost = _lost_shim(rt)
    app_cgroups = _container_cgroups(_cgroups_path(rt, lost.cid))
    snap = write_pods(tmp_path / "pods.json", [])
    state = str(tmp_path / "state")
    flags = ("--allow-empty-desired", "--state-dir", state)
    first = _nodegc(node, rt, snap, "clean", "--apply", "--stop-orphan-shims", *flags, "-o", "json")
    assert first.returncode in (0, 3), first.stderr[-2000:]
    assert _wait_gone(lost.shim.pid or 0, *lost.pids.values()), first.stdout[-3000:]
    assert (rt.state / TASKS / lost.cid).is_dir() and (RUNC / lost.cid / "state.json").is_file()
    assert all(cg.is_dir() for cg in app_cgroups)
    stray = subprocess.Popen(["sleep", "600"])
    try:
        for cg in app_cgroups:
            (cg / "cgroup.procs").write_text(str(stray.pid))
        outs = _clean_until(node, rt, snap, *flags, done=lambda: not (rt.state / TASKS / lost.sid).exists())
        assert not (rt.state / TASKS / lost.sid).exists() and not (RUNC / lost.sid).exists(), outs[-1][-3000:]
        assert stray.poll() is None
        assert (rt.state / TASKS / lost.cid).is_dir() and (RUNC / lost.cid / "state.json").is_file()
        assert all(cg.is_dir() for cg in app_cgroups)
        assert "in use" in "".join(outs)
    finally:
        stray.kill()
        stray.wait()
    # A new ledger: the failed step's backoff (10 s, doubling) is not waited for here.
    outs = _clean_until(node, rt, snap, "--allow-empty-desired", "--state-dir", state + "-2",
                        done=lambda: not (rt.state / TASKS / lost.cid).exists())
    assert not (rt.state / TASKS / lost.cid).exists() and not (RUNC / lost.cid).exists(), outs[-1][-3000:]
    assert not [cg for cg in app_cgroups if cg.exists()]


def _stand_in_shim(rt: SandboxContainerd, child: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    """A process that looks like an orphan shim of this runtime, with one child (`child`, a bash command);
    it stays after the child ended (a builtin read: no other child)."""
    shim = subprocess.Popen(["containerd-shim-runc-v2", "-c", f"{child} & wait; read -r -t 600 _", "-namespace",
                             "k8s.io", "-id", "d" * 64, "-address", str(rt.socket)], executable="/bin/bash",
                            stdin=subprocess.PIPE)
    deadline = time.monotonic() + 5
    children: list[int] = []
    while not children and time.monotonic() < deadline:
        children = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()
                    and _ppid_of(int(e.name)) == shim.pid]
        time.sleep(0.05)
    assert children
    return shim, children


def test_a_runc_call_of_the_shim_is_waited_for_then_the_shim_is_stopped(containerd_node: Runtime) -> None:
    """A child of the shim in no container's cgroup whose command is `runc` is the shim's own call in flight:
    it is never signalled, the step waits a bounded time for it to end and reads the children again."""
    _, rt = containerd_node
    shim, _ = _stand_in_shim(rt, "(exec -a runc sleep 1)")
    try:
        left = RuntimeLeftover("shim", "d" * 64, f"/proc/{shim.pid}", pid=shim.pid,
                               start_time=start_ticks(Path("/proc"), shim.pid), address=str(rt.socket))
        out = stop_shim(left, endpoint=rt.endpoint, timeout=5.0, term_wait=2.0)
        assert out.ok and "SIGTERM" in out.detail, out
        assert shim.wait(timeout=10) == -signal.SIGTERM
    finally:
        with contextlib.suppress(ProcessLookupError):
            shim.kill()
        shim.wait()


def test_a_runc_call_that_does_not_end_fails_the_step_and_signals_nothing(containerd_node: Runtime) -> None:
    _, rt = containerd_node
    shim, children = _stand_in_shim(rt, "(exec -a runc sleep 600)")
    try:
        left = RuntimeLeftover("shim", "d" * 64, f"/proc/{shim.pid}", pid=shim.pid,
                               start_time=start_ticks(Path("/proc"), shim.pid), address=str(rt.socket))
        out = stop_shim(left, endpoint=rt.endpoint, timeout=5.0, term_wait=1.0)
        assert not out.ok and "runc, a call still in flight" in out.detail, out
        assert shim.poll() is None and all(_alive(c) for c in children)
    finally:
        shim.kill()
        shim.wait()
        for c in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(c, signal.SIGKILL)
