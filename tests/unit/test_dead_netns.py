"""A network namespace left dead after a partial CNI DEL (or an ADD that failed and was torn down): the
runtime removed its sandbox (or never stored it), libcni removed its cache entry, the veth with the pod's
address is gone, and the bind-mounted file stays, holding nothing but its loopback. No cache entry and no
address tie it to a pod, so it stayed `unknown` forever. It is reclaimed only on proof of death: the
runtime answers with a complete list whose every sandbox's netns is known and none names it, it has the
name the runtime gives (or lies in the runtime's state dir), no pod claims an address inside, and the
node's process table (shown to be the node's by the READY sandboxes' namespaces, each with a process in
it) has no task inside it; old enough. Short of any of these it stays `unknown`, and says which is
missing. Each rule is attacked here: every missing piece of the proof keeps it."""

from __future__ import annotations

import dataclasses

import pytest

from nodegc.model.findings import FindingClass
from nodegc.model.resources import Inventory, Kind, Mount, NetnsEntry
from nodegc.model.runtime import RuntimeSandbox
from tests.unit.factories import NOW, OLD, pod
from tests.unit.test_runtime_ownership import run, sandbox, view

DEAD = "cni-5b1c7a8e-1f2d-4c3b-9a8e-7d6c5b4a3f21"
LIVE = "cni-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


def netns(name: str, *, tasks: int | None = 0, addresses: tuple[str, ...] = (), inode: int = 7,
          runtime_dir: bool = False, mtime: float = OLD, read: bool = True) -> NetnsEntry:
    where = "/run/containerd/io.containerd.grpc.v1.cri/netns" if runtime_dir else "/run/netns"
    return NetnsEntry(name=name, path=f"{where}/{name}", mounted=True, ns_inode=inode, ns_dev=4, file_inode=3,
                      mtime=mtime, addresses=addresses, addresses_read=read, runtime_dir=runtime_dir, tasks=tasks)


def live_sandbox(**kw: object) -> RuntimeSandbox:
    return sandbox("live", "u1", ips=("10.0.0.3",), netns_path=f"/run/netns/{LIVE}", **kw)  # type: ignore[arg-type]


def nsfs(path: str, inode: int, mount_id: int = 90) -> Mount:
    return Mount(mount_id=mount_id, parent_id=1, device="0:4", root=f"net:[{inode}]", mount_point=path,
                 options="rw", fs_type="nsfs", source="nsfs")


def node(dead: NetnsEntry, *, witness_tasks: int | None = 1, sandboxes: tuple[RuntimeSandbox, ...] | None = None,
         mounts: tuple[Mount, ...] | None = None) -> Inventory:
    witness = netns(LIVE, tasks=witness_tasks, addresses=("10.0.0.3",), inode=8)
    if mounts is None:
        mounts = (nsfs(dead.path, dead.ns_inode or 0, 91), nsfs(witness.path, 8, 92))
    return Inventory(taken_at=NOW, netns=(dead, witness), mounts=mounts,
                     runtime=view(*(sandboxes if sandboxes is not None else (live_sandbox(),))))


def verdict(inv: Inventory, *pods: object) -> tuple[FindingClass, tuple[str, ...]]:
    pods = pods or (pod("web", "u1", ip="10.0.0.3"),)
    f = run(inv, *pods)[(Kind.NETNS, inv.netns[0].path)]
    return f.cls, f.evidence


def test_a_dead_namespace_with_the_whole_proof_is_reclaimed() -> None:
    cls, evidence = verdict(node(netns(DEAD)))
    assert cls is FindingClass.LEAKED_NETNS
    assert any("no task" in e and "no sandbox" in e for e in evidence)
    cls, _ = verdict(node(netns("cni-1", runtime_dir=True)))  # the runtime's state dir: its own file
    assert cls is FindingClass.LEAKED_NETNS
    assert verdict(node(netns(DEAD, addresses=("10.9.9.9",))))[0] is FindingClass.LEAKED_NETNS  # claimed by none


def _kept(inv: Inventory, why: str, *pods: object) -> None:
    cls, evidence = verdict(inv, *pods)
    assert cls is not FindingClass.LEAKED_NETNS
    assert any(why in e for e in evidence), evidence


@pytest.mark.parametrize(("dead", "why"), [
    (netns(DEAD, tasks=1), "1 task(s)"),
    (netns(DEAD, tasks=None), "not counted"),
    (netns("vpn"), "not a name the runtime gives"),
    (netns("cni-1"), "not a name the runtime gives"),
])
def test_a_process_inside_an_unknown_count_or_a_foreign_name_keeps_it(dead: NetnsEntry, why: str) -> None:
    _kept(node(dead), why)


def test_a_process_table_that_is_not_the_nodes_keeps_it() -> None:
    _kept(node(netns(DEAD), witness_tasks=0), "not the node's")
    _kept(node(netns(DEAD), witness_tasks=None), "not the node's")
    # No READY sandbox at all: nothing shows that the table is the node's.
    _kept(node(netns(DEAD), sandboxes=(live_sandbox(ready=False),)), "no READY sandbox",
          pod("web", "u1", phase="Succeeded", ip="10.0.0.3"))


def test_a_runtime_that_cannot_say_keeps_it() -> None:
    _kept(node(netns(DEAD), sandboxes=(dataclasses.replace(live_sandbox(), status_read=False),)), "not known")
    unreachable = dataclasses.replace(node(netns(DEAD)), runtime=view(reachable=False))
    assert verdict(unreachable)[0] is FindingClass.UNKNOWN
    # A running pod the list does not show: the list is not the runtime's whole word.
    _kept(node(netns(DEAD)), "incomplete", pod("web", "u1", ip="10.0.0.3"), pod("other", "u9", ip="10.0.0.9"))
    assert verdict(dataclasses.replace(node(netns(DEAD)), runtime=None))[0] is FindingClass.UNKNOWN


def test_a_sandbox_naming_it_a_pod_claiming_its_address_or_youth_keeps_it() -> None:
    named = (live_sandbox(), sandbox("old", "u1", ready=False, netns_path=f"/run/netns/{DEAD}"))
    assert verdict(node(netns(DEAD), sandboxes=named))[0] is not FindingClass.LEAKED_NETNS
    claimed = node(netns(DEAD, addresses=("10.0.0.7",)))
    assert verdict(claimed, pod("web", "u1", ip="10.0.0.3"), pod("db", "u1", ip="10.0.0.7"))[0] is FindingClass.IN_USE
    assert verdict(node(netns(DEAD, mtime=NOW.timestamp())))[0] is FindingClass.PROTECTED
    # A pod still starting: its sandbox's namespace exists before the runtime lists the sandbox.
    _kept(node(netns(DEAD)), "still starting", pod("web", "u1", ip="10.0.0.3"), pod("new", "u5", phase="Pending"))
    unread = netns(DEAD, read=False)
    assert verdict(node(unread))[0] is not FindingClass.LEAKED_NETNS


def test_another_mount_of_the_same_namespace_keeps_it() -> None:
    dead = netns(DEAD)
    twice = (nsfs(dead.path, 7, 91), nsfs("/var/run/other/ns", 7, 93))
    _kept(node(dead, mounts=twice), "mounted 2 times")
    _kept(node(dead, mounts=()), "mounted 0 times")  # its own mount missing from the table: nothing is sure
