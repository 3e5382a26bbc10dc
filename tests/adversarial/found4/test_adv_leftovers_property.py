"""Adversarial property: random containerd leftovers (sandbox dirs, task bundles with or without a sandbox
annotation, shims), random runtime lists (READY and NotReady sandboxes, containers naming sandboxes the
list may not show) and random pods (on the host network or not, with or without a sandbox). Whatever the
mix, nothing is reclaimed that the runtime's word or the host says may be in use:
- an id the runtime lists as a sandbox or a container, or as the sandbox of a listed container, nor a task
  of such a sandbox;
- a directory while a shim of its id (or of its task's sandbox) runs, or its task's init process lives, or
  something else is mounted below it;
- anything younger than the photographs;
- anything at all while a running pod has no sandbox in the list, or while no READY sandbox's shim is in
  sight (the process table is not the node's).
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.model.pods import Pod
from nodegc.model.runtime import RuntimeContainer, RuntimeLeftover, RuntimeSandbox
from tests.unit.factories import NOW, OLD, pod
from tests.unit.test_runtime_leftovers import run, sandbox_dir, shim, task_dir

IDS = tuple(c * 64 for c in "abcdef")
ids = st.sampled_from(IDS)
RECENT = NOW.timestamp() - 5


@st.composite
def leftover(draw: st.DrawFn) -> RuntimeLeftover:
    what = draw(st.sampled_from(("sandbox_dir", "task_dir", "shim")))
    lid = draw(ids)
    mtime = draw(st.sampled_from((OLD, RECENT)))
    if what == "shim":
        return shim(lid, pid=draw(st.integers(100, 999)), mtime=mtime)
    kw: dict[str, object] = {}
    if draw(st.booleans()):
        kw["other_mounts"] = (f"/x/{lid}/extra",)
    if what == "task_dir":
        kw["sandbox_id"] = draw(st.none() | ids)
        if draw(st.booleans()):
            kw["busy"] = "its init process (pid 7) is alive"
        return task_dir(lid, mtime=mtime, **kw)
    return sandbox_dir(lid, mtime=mtime, **kw)


@st.composite
def world(draw: st.DrawFn) -> tuple[tuple[RuntimeLeftover, ...], tuple[RuntimeSandbox, ...],
                                    tuple[RuntimeContainer, ...], tuple[Pod, ...]]:
    pods: list[Pod] = []
    sandboxes: list[RuntimeSandbox] = []
    for i in range(draw(st.integers(0, 3))):
        p = pod(f"p{i}", f"u{i}", phase=draw(st.sampled_from(("Running", "Pending", "Succeeded"))))
        p = dataclasses.replace(p, host_network=draw(st.booleans()))
        pods.append(p)
        if draw(st.booleans()):
            sandboxes.append(RuntimeSandbox(id=draw(ids), pod_uid=p.uid, pod_name=p.name, pod_namespace="default",
                                            attempt=0, ready=draw(st.booleans()), created_at=NOW, status_read=True))
    containers = tuple(RuntimeContainer(id=draw(ids), sandbox_id=draw(ids), name="c", state="running")
                       for _ in range(draw(st.integers(0, 2))))
    leftovers = tuple(draw(st.lists(leftover(), max_size=6, unique_by=lambda x: x.path)))
    return leftovers, tuple(sandboxes), containers, tuple(pods)


@settings(max_examples=400, deadline=None)
@given(world(), st.booleans())
def test_nothing_that_may_be_in_use_is_reclaimed(w: tuple[tuple[RuntimeLeftover, ...], tuple[RuntimeSandbox, ...],
                                                           tuple[RuntimeContainer, ...], tuple[Pod, ...]],
                                                 stop_shims: bool) -> None:
    leftovers, sandboxes, containers, pods = w
    out = run(*leftovers, sandboxes=sandboxes, containers=containers, pods=pods, stop_shims=stop_shims)
    known = {sb.id for sb in sandboxes} | {i for c in containers for i in (c.id, c.sandbox_id)}
    shims = {x.id for x in leftovers if x.what == "shim"}
    busy = {i for x in leftovers if x.what == "task_dir" and x.busy for i in (x.id, x.sandbox_id) if i}
    with_sandbox = {sb.pod_uid for sb in sandboxes}
    some_pod_without = any(p.state.value == "live" and p.uid not in with_sandbox for p in pods)
    ready = {sb.id for sb in sandboxes if sb.ready}
    blind = bool(ready) and not (ready & shims)
    for left in leftovers:
        f = out.get(left.path)
        if f is None or not f.cls.is_residue:
            continue
        group = {i for i in (left.id, left.sandbox_id) if i}
        why = (left.what, f.cls, f.evidence)
        assert not (group & known), why
        assert not some_pod_without and not blind, why
        assert left.mtime is not None and left.mtime < RECENT, why
        if left.what == "shim":
            assert stop_shims, why
            continue
        assert not (group & shims) and not (group & busy) and not left.other_mounts, why
