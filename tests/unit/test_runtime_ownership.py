"""Ownership with the runtime's word (planning/runtime.py), fed literal inventories and runtime views."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from nodegc.model.findings import Finding, FindingClass
from nodegc.model.ipranges import AddressRange, HostLocalRange
from nodegc.model.resources import FirewallRule, Inventory, IptablesChain, Kind
from nodegc.model.runtime import RuntimeContainer, RuntimeSandbox, RuntimeView
from nodegc.planning.correlate import correlate
from nodegc.planning.runtime import runtime_unusable
from tests.unit.factories import NET, NOW, cache, desired, netns, pod, reservation

OLD_DT = NOW - timedelta(hours=1)


def sandbox(sid: str, uid: str, *, ready: bool = True, ips: tuple[str, ...] = (), created: datetime = OLD_DT,
            netns_path: str | None = None, name: str = "p") -> RuntimeSandbox:
    return RuntimeSandbox(id=sid, pod_uid=uid, pod_name=name, pod_namespace="default", attempt=0, ready=ready,
                          created_at=created, ips=ips, netns_path=netns_path, status_read=True)


def view(*sandboxes: RuntimeSandbox, reachable: bool = True,
         containers: tuple[RuntimeContainer, ...] = ()) -> RuntimeView:
    return RuntimeView(endpoint="unix:///run/containerd/containerd.sock", reachable=reachable,
                       runtime_name="containerd", runtime_version="1.6.20", api_version="v1",
                       sandboxes=sandboxes, containers=containers, read_at=NOW, error=None if reachable else "down")


def run(inv: Inventory, *pods: object) -> dict[tuple[Kind, str], Finding]:
    found = correlate(inv, desired(*pods), now=NOW)  # type: ignore[arg-type]
    return {(f.kind, f.id): f for f in found}


def ip_key(ip: str) -> tuple[Kind, str]:
    return (Kind.IP_RESERVATION, f"{NET}/{ip}")


def test_reboot_old_sandboxes_of_a_live_pod_are_residue() -> None:
    inv = Inventory(
        taken_at=NOW,
        ip_reservations=(reservation("10.0.0.2", "old"), reservation("10.0.0.3", "new")),
        cni_cache=(cache("old", uid="u1", ip="10.0.0.2"), cache("new", uid="u1", ip="10.0.0.3")),
        runtime=view(sandbox("new", "u1", ips=("10.0.0.3",))),
    )
    live = pod("web", "u1", ip="10.0.0.3")
    without = run(Inventory(taken_at=NOW, ip_reservations=inv.ip_reservations, cni_cache=inv.cni_cache), live)
    assert without[ip_key("10.0.0.2")].cls is FindingClass.IN_USE  # today's rule: tied to the live UID
    out = run(inv, live)
    assert out[ip_key("10.0.0.2")].cls is FindingClass.LEAKED_IP
    assert out[ip_key("10.0.0.2")].sandbox == "old"
    assert out[(Kind.CNI_CACHE, f"/cni/results/{NET}-old-eth0")].cls is FindingClass.STALE_CNI_CACHE
    assert out[ip_key("10.0.0.3")].cls is FindingClass.IN_USE
    assert out[(Kind.SANDBOX, "new")].cls is FindingClass.IN_USE


def test_id_only_file_of_an_unknown_sandbox_is_residue() -> None:
    inv = Inventory(taken_at=NOW,
                    ip_reservations=(reservation("10.0.0.9", "dead"), reservation("10.0.0.3", "new")),
                    cni_cache=(cache("new", uid="u1", ip="10.0.0.3"),),
                    runtime=view(sandbox("new", "u1", ips=("10.0.0.3",)),
                                 sandbox("boot", "u2", ready=False, name="starting")))
    # A pod still starting makes today's rules protect the id-only file; the runtime settles it, once it
    # shows the starting pod's sandbox (it lists a sandbox only after its CNI ADD).
    out = run(inv, pod("web", "u1", ip="10.0.0.3"), pod("starting", "u2", phase="Pending"))
    assert out[ip_key("10.0.0.9")].cls is FindingClass.LEAKED_IP
    # Before that, the starting pod's ADD may be this very reservation's.
    inv = dataclasses.replace(inv, runtime=view(sandbox("new", "u1", ips=("10.0.0.3",))))
    out = run(inv, pod("web", "u1", ip="10.0.0.3"), pod("starting", "u2", phase="Pending"))
    assert out[ip_key("10.0.0.9")].cls is FindingClass.PROTECTED


def test_young_or_foreign_unknown_ids_are_kept() -> None:
    young = reservation("10.0.0.9", "dead", mtime=NOW.timestamp() - 5)
    inv = Inventory(taken_at=NOW, ip_reservations=(young, reservation("10.0.0.3", "new"),
                                                   reservation("10.9.0.1", "x", network="other")),
                    runtime=view(sandbox("new", "u1", ips=("10.0.0.3",))))
    out = run(inv, pod("web", "u1", ip="10.0.0.3"), pod("starting", "u2", phase="Pending"))
    assert out[ip_key("10.0.0.9")].cls is FindingClass.PROTECTED
    # A network no known sandbox uses is not the runtime's to judge.
    assert out[(Kind.IP_RESERVATION, "other/10.9.0.1")].cls is FindingClass.PROTECTED


def test_a_ready_sandbox_keeps_its_parts_whatever_the_api_says() -> None:
    # Adversarial: the cache entry names a dead pod, but the runtime says the sandbox is READY.
    inv = Inventory(taken_at=NOW, ip_reservations=(reservation("10.0.0.2", "sb"),),
                    cni_cache=(cache("sb", uid="dead-uid", ip="10.0.0.2"),), netns=(netns("sb"),),
                    runtime=view(sandbox("sb", "dead-uid", ips=("10.0.0.2",), netns_path="/run/netns/cni-sb")))
    out = run(inv, pod("other", "u9", phase="Pending"))
    keys = (ip_key("10.0.0.2"), (Kind.CNI_CACHE, f"/cni/results/{NET}-sb-eth0"), (Kind.NETNS, "/run/netns/cni-sb"))
    for key in keys:
        assert out[key].cls is FindingClass.IN_USE, key
    assert out[(Kind.SANDBOX, "sb")].cls is FindingClass.RUNNING_ORPHAN
    assert not out[(Kind.SANDBOX, "sb")].cls.is_residue


def test_a_live_pods_address_on_an_unknown_sandbox_is_kept() -> None:
    reservations = (reservation("10.0.0.2", "ghost"), reservation("10.0.0.3", "new"))
    inv = Inventory(taken_at=NOW, ip_reservations=reservations,
                    runtime=view(sandbox("new", "u1", ips=("10.0.0.3",))))
    out = run(inv, pod("web", "u1", ip="10.0.0.3"), pod("db", "u2", ip="10.0.0.2"))
    assert not out[ip_key("10.0.0.2")].cls.is_residue


def test_notready_sandbox_parts_wait_for_the_runtime() -> None:
    inv = Inventory(taken_at=NOW, ip_reservations=(reservation("10.0.0.2", "sb"),),
                    cni_cache=(cache("sb", uid="gone", ip="10.0.0.2"),),
                    runtime=view(sandbox("sb", "gone", ready=False, ips=("10.0.0.2",))))
    out = run(inv)
    assert out[ip_key("10.0.0.2")].cls is FindingClass.PROTECTED
    assert out[(Kind.SANDBOX, "sb")].cls is FindingClass.ORPHANED_SANDBOX


def test_sandbox_verdicts() -> None:
    young = NOW - timedelta(seconds=5)
    sbs = (
        sandbox("a-old", "a", ready=False, created=OLD_DT), sandbox("a-new", "a", ready=True,
                                                                    created=OLD_DT + timedelta(minutes=1)),
        sandbox("b-only", "b", ready=False),  # newest of a pod that still exists (pending)
        sandbox("c", "c", ready=False),  # terminal pod
        sandbox("d", "d", ready=False, created=young),  # young
        sandbox("e", "e", ready=False),  # absent, but a container is still running in it
        sandbox("f", "f", ready=True, created=young),  # READY, pod not in the photograph, young
    )
    running = (RuntimeContainer(id="x", sandbox_id="e", name="app", state="running"),)
    inv = Inventory(taken_at=NOW, runtime=view(*sbs, containers=running))
    out = run(inv, pod("a", "a"), pod("b", "b", phase="Pending"), pod("c", "c", phase="Succeeded"))
    cls = {sid: out[(Kind.SANDBOX, sid)].cls for sid in ("a-old", "a-new", "b-only", "c", "d", "e", "f")}
    assert cls == {
        "a-old": FindingClass.ORPHANED_SANDBOX, "a-new": FindingClass.IN_USE, "b-only": FindingClass.PROTECTED,
        "c": FindingClass.ORPHANED_SANDBOX, "d": FindingClass.PROTECTED, "e": FindingClass.UNKNOWN,
        "f": FindingClass.PROTECTED,
    }


def test_an_unusable_view_changes_nothing() -> None:
    reservations = (reservation("10.0.0.2", "old"), reservation("10.0.0.3", "new"))
    base = Inventory(taken_at=NOW, ip_reservations=reservations,
                     cni_cache=(cache("old", uid="u1", ip="10.0.0.2"), cache("new", uid="u1", ip="10.0.0.3")),
                     chains=(IptablesChain("nat", "CNI-x", NET, "old"),))
    live = pod("web", "u1", ip="10.0.0.3")
    today = sorted(run(base, live).items())
    # Adversarial: unreachable, and reachable but empty on a node with running pods.
    for bad in (view(reachable=False), view()):
        inv = Inventory(taken_at=NOW, ip_reservations=base.ip_reservations, cni_cache=base.cni_cache,
                        chains=base.chains, runtime=bad)
        assert runtime_unusable(bad, [live]) is not None
        assert sorted(run(inv, live).items()) == today
    # An empty list on a node with no running pod is an answer.
    assert runtime_unusable(view(), []) is None
    # A list that misses a running pod's sandbox is not the node's runtime's whole word.
    other = view(sandbox("x", "someone-else"))
    assert runtime_unusable(other, [live]) is not None
    assert runtime_unusable(other, [pod("p", "someone-else")]) is None


def test_a_reused_sandbox_id_is_a_new_identity() -> None:
    from nodegc.planning.phases import identity_of

    a = sandbox("same", "u1", created=OLD_DT)
    b = sandbox("same", "u1", created=OLD_DT + timedelta(seconds=1))
    assert identity_of(a) != identity_of(b)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["s1", "s2", "s3", "s4"]), st.booleans(), st.booleans()),
                min_size=1, max_size=4, unique_by=lambda t: t[0]),
       st.lists(st.sampled_from(["s1", "s2", "s3", "s4", "s5"]), max_size=5, unique=True))
def test_nothing_of_a_ready_sandbox_is_ever_residue(
    known: list[tuple[str, bool, bool]], files: list[str]
) -> None:
    sbs = tuple(sandbox(sid, f"uid-{sid}", ready=ready, ips=(f"10.0.1.{i}",))
                for i, (sid, ready, _) in enumerate(known))
    pods = [pod(sid, f"uid-{sid}", ip=f"10.0.1.{i}") for i, (sid, _, in_api) in enumerate(known) if in_api]
    reservations = tuple(reservation(f"10.0.2.{i}", sid) for i, sid in enumerate(files))
    caches = tuple(cache(sid, uid=f"uid-{sid}", ip=f"10.0.2.{i}") for i, sid in enumerate(files))
    inv = Inventory(taken_at=NOW, ip_reservations=reservations, cni_cache=caches, runtime=view(*sbs))
    ready = {sb.id for sb in sbs if sb.ready}
    for f in correlate(inv, desired(*pods), now=NOW):
        if f.cls.is_residue:
            assert f.owner.container_id not in ready and f.id not in ready, f


def _fw(ip: str, direction: str = "s") -> FirewallRule:
    text = (f"-A CNI-FORWARD -s {ip}/32 -j ACCEPT" if direction == "s" else
            f"-A CNI-FORWARD -d {ip}/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")
    return FirewallRule(table="filter", chain="CNI-FORWARD", rule=text, ip=ip, family=0)


def test_firewall_rules_follow_the_address() -> None:
    ranges = (HostLocalRange(network=NET, ranges=(AddressRange("10.0.0.0/24", "10.0.0.2", "10.0.0.254",
                                                               "10.0.0.1", 253),), source="conf"),)
    inv = Inventory(
        taken_at=NOW,
        ip_reservations=(reservation("10.0.0.2", "old"), reservation("10.0.0.3", "new")),
        cni_cache=(cache("old", uid="gone", ip="10.0.0.2"), cache("new", uid="u1", ip="10.0.0.3")),
        firewall_rules=(_fw("10.0.0.2"), _fw("10.0.0.3"), _fw("10.0.0.9"), _fw("10.0.0.7"), _fw("192.168.9.9")),
        ip_ranges=ranges,
    )
    # 10.0.0.7 has no reservation but a live pod claims it (the address was reused): never taken.
    out = run(inv, pod("web", "u1", ip="10.0.0.3"), pod("reuse", "u2", ip="10.0.0.7"))

    def cls(ip: str) -> FindingClass:
        return out[(Kind.FIREWALL_RULE, f"filter/CNI-FORWARD/-s {ip}")].cls
    assert cls("10.0.0.2") is FindingClass.LEAKED_FIREWALL_RULE  # follows its dead reservation
    assert cls("10.0.0.3") is FindingClass.IN_USE
    assert cls("10.0.0.9") is FindingClass.LEAKED_FIREWALL_RULE  # no reservation, in a known range
    assert cls("10.0.0.7") is FindingClass.IN_USE
    assert cls("192.168.9.9") is FindingClass.UNKNOWN  # no range nodegc knows holds it


def test_firewall_parse_takes_only_the_plugins_two_shapes() -> None:
    from nodegc.inventory.iptables import firewall_rules_of

    text = "\n".join([
        "*filter",
        "-A CNI-FORWARD -m comment --comment \"CNI firewall plugin admin overrides\" -j CNI-ADMIN",
        "-A CNI-FORWARD -d 10.0.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        "-A CNI-FORWARD -s 10.0.0.2/32 -j ACCEPT",
        "-A CNI-FORWARD -s 10.0.0.0/24 -j ACCEPT",
        "-A CNI-FORWARD -d 10.0.0.5/32 -j ACCEPT",
        "-A CNI-FORWARD -s fd00::5/128 -j ACCEPT",
        "COMMIT",
        "*nat",
        "-A CNI-FORWARD -s 10.0.0.3/32 -j ACCEPT",
        "COMMIT",
    ])
    assert [(r.ip, r.family) for r in firewall_rules_of(text)] == [("10.0.0.2", 0), ("10.0.0.2", 0), ("fd00::5", 1)]


def test_an_incomplete_list_protects_what_it_shows_and_proves_no_absence() -> None:
    # Adversarial: the runtime lists a READY sandbox but none for the running pod "db" (another runtime's
    # socket, or one that just lost its state): the READY sandbox's parts stay in use, and nothing that is
    # merely absent from the list becomes residue.
    inv = Inventory(
        taken_at=NOW,
        ip_reservations=(reservation("10.0.0.2", "sb"), reservation("10.0.0.9", "ghost")),
        cni_cache=(cache("sb", uid="gone", ip="10.0.0.2"), cache("ghost", uid="u2", ip="10.0.0.9")),
        runtime=view(sandbox("sb", "gone", ips=("10.0.0.2",)), sandbox("nr", "gone2", ready=False)),
    )
    out = run(inv, pod("db", "u2", ip="10.0.0.9"))
    assert out[ip_key("10.0.0.2")].cls is FindingClass.IN_USE
    assert out[ip_key("10.0.0.9")].cls is FindingClass.IN_USE  # today's rule: the live pod's
    assert out[(Kind.SANDBOX, "nr")].cls is FindingClass.PROTECTED
    assert out[(Kind.SANDBOX, "sb")].cls is FindingClass.PROTECTED
