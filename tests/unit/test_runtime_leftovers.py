"""containerd's leftovers (planning/runtime.py): which are reclaimed, which only reported, and why."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.model.findings import Finding, FindingClass
from nodegc.model.resources import Inventory, Kind, Mount
from nodegc.model.runtime import RuntimeContainer, RuntimeLeftover, RuntimeSandbox, RuntimeView
from nodegc.planning.correlate import CorrelationPolicy, correlate
from tests.unit.factories import NOW, OLD, desired, pod

STATE = "/run/containerd"
A, B, C, LIVE = ("a" * 64), ("b" * 64), ("c" * 64), ("d" * 64)


def sandbox_dir(sid: str, *, mtime: float = OLD, **kw: object) -> RuntimeLeftover:
    path = f"{STATE}/io.containerd.grpc.v1.cri/sandboxes/{sid}"
    return RuntimeLeftover("sandbox_dir", sid, path, mounted=True, inode=7, mtime=mtime, mount_id=99,
                           mount_point=f"{path}/shm", **kw)  # type: ignore[arg-type]


def task_dir(cid: str, *, mtime: float = OLD, **kw: object) -> RuntimeLeftover:
    path = f"{STATE}/io.containerd.runtime.v2.task/k8s.io/{cid}"
    return RuntimeLeftover("task_dir", cid, path, mounted=True, inode=8, mtime=mtime, mount_id=98,
                           mount_point=f"{path}/rootfs", **kw)  # type: ignore[arg-type]


def shim(sid: str, pid: int = 4242, *, mtime: float = OLD) -> RuntimeLeftover:
    return RuntimeLeftover("shim", sid, f"/proc/{pid}", pid=pid, start_time=1234, mtime=mtime,
                           address=f"{STATE}/containerd.sock")


def live_sandbox() -> RuntimeSandbox:
    return RuntimeSandbox(id=LIVE, pod_uid="u1", pod_name="web", pod_namespace="default", attempt=0, ready=True,
                          created_at=NOW, status_read=True)


def run(*leftovers: RuntimeLeftover, stop_shims: bool = False, sandboxes: tuple[RuntimeSandbox, ...] | None = None,
        containers: tuple[RuntimeContainer, ...] = (), reachable: bool = True,
        pods: tuple[object, ...] | None = None) -> dict[str, Finding]:
    if sandboxes is None:
        leftovers = (*leftovers, shim(LIVE, 4343))  # a READY sandbox's shim runs: the process table is the node's
    view = RuntimeView(endpoint="unix:///run/containerd/containerd.sock", reachable=reachable,
                       runtime_name="containerd", runtime_version="1.6.20",
                       sandboxes=(live_sandbox(),) if sandboxes is None else sandboxes, containers=containers,
                       read_at=NOW, state_dir=STATE, leftovers=leftovers)
    found = correlate(Inventory(taken_at=NOW, runtime=view),
                      desired(*(pods if pods is not None else (pod("web", "u1"),))),  # type: ignore[arg-type]
                      now=NOW, policy=CorrelationPolicy(min_age_seconds=60, stop_orphan_shims=stop_shims))
    return {f.id: f for f in found if f.kind is Kind.RUNTIME_LEFTOVER}


def test_an_unknown_old_idle_directory_is_reclaimed_with_the_runtimes_word() -> None:
    sd, td = sandbox_dir(A), task_dir(B)
    out = run(sd, td)
    assert out[sd.path].cls is FindingClass.ORPHANED_RUNTIME_DIR and out[sd.path].cls.is_residue
    assert out[td.path].cls is FindingClass.ORPHANED_RUNTIME_DIR
    # terminate asks the runtime again about that very id
    assert out[sd.path].sandbox == A and out[sd.path].owner.container_id == A


def test_a_directory_whose_id_the_runtime_knows_is_not_even_reported() -> None:
    out = run(sandbox_dir(LIVE), task_dir(LIVE), task_dir(C), shim(LIVE),
              containers=(RuntimeContainer(id=C, sandbox_id=LIVE, name="app", state="running"),))
    assert out == {}


def test_a_task_of_a_known_sandbox_is_kept() -> None:
    td = task_dir(C, sandbox_id=LIVE)
    assert run(td)[td.path].cls is FindingClass.RUNTIME_LEFTOVER


def test_shim_first_then_its_directories() -> None:
    sd, td, app, sh = sandbox_dir(A), task_dir(A), task_dir(C, sandbox_id=A), shim(A)
    out = run(sd, td, app, sh)
    assert out[sh.path].cls is FindingClass.RUNTIME_LEFTOVER  # reported only, without the opt-in
    assert "--stop-orphan-shims" in out[sh.path].evidence[-1]
    for left in (sd, td, app):
        assert out[left.path].cls is FindingClass.RUNTIME_LEFTOVER, left.what
        assert "shim (pid 4242) runs" in out[left.path].evidence[-1]
    out = run(sd, td, app, sh, stop_shims=True)
    assert out[sh.path].cls is FindingClass.ORPHANED_SHIM and out[sh.path].sandbox == A
    assert not any(out[left.path].cls.is_residue for left in (sd, td, app))
    # once the shim is gone, the directories go
    out = run(sd, td, app, stop_shims=True)
    assert all(out[left.path].cls is FindingClass.ORPHANED_RUNTIME_DIR for left in (sd, td, app))


def test_a_live_init_process_keeps_its_task_and_its_sandbox() -> None:
    sd, pause = sandbox_dir(A), task_dir(A, busy="its init process (pid 77) is alive")
    app = task_dir(C, sandbox_id=A)
    out = run(sd, pause, app)
    assert {out[x.path].cls for x in (sd, pause, app)} == {FindingClass.RUNTIME_LEFTOVER}
    assert "pid 77" in out[sd.path].evidence[-1]


def test_a_foreign_mount_below_or_a_bad_entry_is_reported_never_reclaimed() -> None:
    mounted = sandbox_dir(A, other_mounts=(f"{STATE}/io.containerd.grpc.v1.cri/sandboxes/{A}/x",))
    link = RuntimeLeftover("sandbox_dir", B, f"{STATE}/io.containerd.grpc.v1.cri/sandboxes/{B}",
                           problem="a symlink: not followed, not touched")
    odd = RuntimeLeftover("task_dir", "", f"{STATE}/io.containerd.runtime.v2.task/k8s.io/\udcff",
                          problem="'\\xff' is not a container id")
    out = run(mounted, link, odd)
    for left in (mounted, link, odd):
        assert out[left.path].cls is FindingClass.RUNTIME_LEFTOVER and not out[left.path].cls.is_residue
    assert "mounted below it" in out[mounted.path].evidence[-1]


def test_young_leftovers_are_protected() -> None:
    recent = NOW.timestamp() - 10
    out = run(sandbox_dir(A, mtime=recent), shim(B, mtime=recent), stop_shims=True)
    assert {f.cls for f in out.values()} == {FindingClass.PROTECTED}
    no_age = RuntimeLeftover("shim", C, "/proc/9", pid=9, start_time=None, mtime=None)
    assert run(no_age, stop_shims=True)[no_age.path].cls is FindingClass.PROTECTED


def test_a_pod_starting_without_a_sandbox_protects_recent_leftovers() -> None:
    """RunPodSandbox mounts the shm and starts the shim before the runtime lists the sandbox."""
    recent = NOW.timestamp() - 200  # older than the minimum age, younger than the ADD settle time
    leftovers = (sandbox_dir(A, mtime=recent), task_dir(B, mtime=recent), shim(C, mtime=recent))
    starting = (pod("web", "u1"), pod("new", "u2", phase="Pending"))
    out = run(*leftovers, stop_shims=True, pods=starting)
    assert {f.cls for f in out.values()} == {FindingClass.PROTECTED}
    assert "new is starting" in out[leftovers[0].path].evidence[-1]
    assert all(f.cls.is_residue for f in run(*leftovers, stop_shims=True).values())
    # long after the settle time they are judged again
    assert all(f.cls.is_residue for f in run(sandbox_dir(A), shim(C), stop_shims=True, pods=starting).values())


def test_no_conclusion_from_an_empty_incomplete_or_unreachable_runtime() -> None:
    leftovers = (sandbox_dir(A), task_dir(B), shim(C))
    # empty while a pod runs
    assert run(*leftovers, sandboxes=(), stop_shims=True) == {}
    # a list without the running pod's sandbox
    other = RuntimeSandbox(id=LIVE, pod_uid="someone-else", pod_name="x", pod_namespace="default", attempt=0,
                           ready=True, created_at=NOW)
    assert run(*leftovers, sandboxes=(other,), stop_shims=True) == {}
    assert run(*leftovers, reachable=False, stop_shims=True) == {}


def test_a_netns_is_never_a_leftover() -> None:
    """Netns files under the state dir are network namespaces (tests/unit/test_runtime_netns.py): a leftover
    of another kind than the three is never judged, least of all as an orphaned directory."""
    ns = RuntimeLeftover("netns", "cni-1", f"{STATE}/io.containerd.grpc.v1.cri/netns/cni-1", mounted=True)
    assert run(ns, stop_shims=True) == {}


ids = st.sampled_from((A, B, C, LIVE))


@settings(max_examples=200, deadline=None)
@given(what=st.sampled_from(("sandbox_dir", "task_dir", "shim")), lid=ids, sandbox_id=st.none() | ids,
       known_as_container=st.booleans())
def test_a_leftover_of_an_id_the_runtime_lists_is_never_residue(what: str, lid: str, sandbox_id: str | None,
                                                                known_as_container: bool) -> None:
    """The safety rule: nothing whose id (or whose task's sandbox) the runtime lists is planned for reclaim."""
    containers = (RuntimeContainer(id=C, sandbox_id=LIVE, name="app", state="exited"),) if known_as_container else ()
    known = {LIVE} | ({C} if known_as_container else set())
    left = (shim(lid) if what == "shim" else
            sandbox_dir(lid) if what == "sandbox_dir" else task_dir(lid, sandbox_id=sandbox_id))
    out = run(left, stop_shims=True, containers=containers)
    if left.id in known or (what == "task_dir" and sandbox_id in known):
        assert left.path not in out or not out[left.path].cls.is_residue


def test_the_container_a_process_cgroup_names(tmp_path: Path) -> None:
    """A shim's child is a container's only when every cgroup hierarchy names one container id, as the runc
    shim makes it (cgroupfs `.../<id>`, systemd `.../cri-containerd-<id>.scope`); on a hybrid node the v2
    hierarchy's root (`0::/`) is left to the v1 lines."""
    from nodegc.reclaim.runtime_leftovers import _container_of

    cid, other = "a" * 64, "b" * 64
    cases = {
        f"0::/kubepods/besteffort/pod1/{cid}\n": cid,
        f"12:memory:/kubepods/pod1/{cid}\n0::/kubepods/pod1/{cid}\n": cid,
        f"0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{cid}.scope\n": cid,
        f"12:memory:/kubepods/pod1/{cid}\n0::/kubepods/pod1/{other}\n": None,  # two ids: no one container
        f"12:memory:/kubepods/pod1/{cid}\n0::/system.slice/containerd.service\n": None,
        "0::/system.slice/containerd.service\n": None,
        f"0::/kubepods/pod1/{cid[:-1]}\n": None,
        "": None,
        # A hybrid node whose runtime left its containers at the v2 hierarchy's root: the v1 lines decide.
        f"9:name=systemd:/k/pod1/{cid}\n4:memory:/k/pod1/{cid}\n1:cpu:/k/pod1/{cid}\n0::/\n": cid,
        f"4:memory:/k/pod1/{cid}\n1:cpu:/\n0::/\n": None,  # a v1 hierarchy at its root: not the container's
        f"4:memory:/k/pod1/{cid}\n0::/system.slice/x.service\n": None,
        "0::/\n": None,  # a v2-only node's root cgroup
        "4:memory:/\n0::/\n": None,
        f"4:memory:/k/pod1/{cid}\n0::/\n0::/\n": cid,
        f"garbage/{cid}\n": None,
    }
    for i, (text, want) in enumerate(cases.items()):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "cgroup").write_text(text)
        assert _container_of(tmp_path, i) == want, text
    assert _container_of(tmp_path, 999) is None


def _hierarchies(tmp_path: Path, *names: str) -> list[Mount]:
    out = []
    for i, name in enumerate(names):
        (tmp_path / name).mkdir(parents=True)
        out.append(Mount(mount_id=100 + i, parent_id=1, device="0:1", root="/", mount_point=str(tmp_path / name),
                         options="rw", fs_type="cgroup2" if name == "unified" else "cgroup", source="cgroup"))
    return out


def test_a_bundles_cgroups_are_removed_only_as_its_containers_and_only_when_empty(tmp_path: Path) -> None:
    """`<hierarchy><cgroupsPath>` in each cgroup hierarchy below the root, by rmdir (a cgroup with a process
    or a child refuses it: here, a directory that is not empty); the path must end in the container id, no
    `..`, no symlink followed; the systemd driver's `slice:prefix:name` is systemd's."""
    import os

    from nodegc.reclaim.runtime_leftovers import _remove_cgroups

    cid = "c" * 64
    root = tmp_path / "cg"
    mounts = _hierarchies(root, "memory", "pids", "unified")
    elsewhere = _hierarchies(tmp_path / "other", "memory")
    path = f"/pods/pod1/{cid}"
    for m in (*mounts, *elsewhere):
        Path(m.mount_point + path).mkdir(parents=True)
    out = _remove_cgroups(cid, path, mounts=[*mounts, *elsewhere], cgroup_root=root)
    assert out == "removed its empty cgroup in 3 hierarchies"
    assert not any(Path(m.mount_point + path).exists() for m in mounts)
    assert all(Path(m.mount_point + "/pods/pod1").is_dir() for m in mounts)  # the pod's: not touched
    assert Path(elsewhere[0].mount_point + path).is_dir()  # outside the cgroup root
    assert _remove_cgroups(cid, path, mounts=mounts, cgroup_root=root) == ""  # idempotent

    Path(mounts[0].mount_point + path, "child").mkdir(parents=True)  # in use
    busy = _remove_cgroups(cid, path, mounts=mounts, cgroup_root=root)
    assert not isinstance(busy, str) and not busy.ok and "in use" in busy.detail
    assert Path(mounts[0].mount_point + path, "child").is_dir()

    for odd in (f"/pods/pod1/{'d' * 64}", f"/pods/../pods/pod1/{cid}", f"/pods/pod1/{cid}/.."):
        refused = _remove_cgroups(cid, odd, mounts=mounts, cgroup_root=root)
        assert not isinstance(refused, str) and not refused.ok, odd
    assert _remove_cgroups(cid, f"kubepods.slice:cri-containerd:{cid}", mounts=mounts, cgroup_root=root) == ""
    assert _remove_cgroups(cid, None, mounts=mounts, cgroup_root=root) == ""
    assert _remove_cgroups(cid, f"pods/pod1/{cid}", mounts=mounts, cgroup_root=root) == ""  # relative: not ours

    # A symlink on the way is not followed.
    target = tmp_path / "target" / "pod1" / cid
    target.mkdir(parents=True)
    os.symlink(tmp_path / "target", mounts[1].mount_point + "/linked")
    assert _remove_cgroups(cid, f"/linked/pod1/{cid}", mounts=mounts, cgroup_root=root) == ""
    assert target.is_dir()


def test_runcs_state_is_kept_while_the_init_it_names_runs(tmp_path: Path) -> None:
    import json
    import os

    from nodegc.inventory.cri.leftovers import start_ticks
    from nodegc.reclaim.runtime_leftovers import _remove_runc_state, _runc_init_alive

    cid = "c" * 64
    proc = Path("/proc")
    me, ticks = os.getpid(), start_ticks(proc, os.getpid())
    assert _runc_init_alive(json.dumps({"id": cid, "init_process_pid": me, "init_process_start": ticks}).encode(),
                            cid, proc) is not None
    assert _runc_init_alive(json.dumps({"id": cid, "init_process_pid": me,
                                        "init_process_start": (ticks or 0) - 1}).encode(), cid, proc) is None
    assert _runc_init_alive(json.dumps({"id": "d" * 64, "init_process_pid": 1}).encode(), cid, proc) is not None
    assert _runc_init_alive(b"{not json", cid, proc) is not None
    assert _runc_init_alive(None, cid, proc) is None

    state = tmp_path / "runc" / "k8s.io" / cid
    state.mkdir(parents=True)
    (state / "state.json").write_text(json.dumps({"id": cid, "init_process_pid": me, "init_process_start": ticks}))
    kept = _remove_runc_state(cid, tmp_path / "runc", proc_root=proc, timeout=5.0)
    assert not isinstance(kept, str) and not kept.ok and state.is_dir()
    (state / "state.json").write_text(json.dumps({"id": cid, "init_process_pid": 2**22 + 7}))
    assert _remove_runc_state(cid, tmp_path / "runc", proc_root=proc, timeout=5.0) == f"removed runc's state {state}"
    assert not state.exists()
    assert _remove_runc_state(cid, tmp_path / "runc", proc_root=proc, timeout=5.0) == ""
    assert _remove_runc_state(cid, tmp_path / "nothing", proc_root=proc, timeout=5.0) == ""
    # A symlink at the state's place is never followed: its target stays.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("x")
    state.symlink_to(elsewhere)
    linked = _remove_runc_state(cid, tmp_path / "runc", proc_root=proc, timeout=5.0)
    assert not isinstance(linked, str) and not linked.ok and (elsewhere / "keep").is_file() and state.is_symlink()
