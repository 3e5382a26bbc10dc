"""Changes of the desired state between two scans, drawn by hypothesis, in every way the network verdicts
read the pods: a pod added that claims an existing record by its UID (a cache entry's, a pod directory's),
by an address (a reservation's, a cache entry's, one inside a namespace, one a chain's rules name) or by
its name (a cache entry written without a UID); a pod removed; a pod's phase or addresses changed; the same
UID moving (listed elsewhere in the list, under another name, on or off the host network, or taken by
another pod after its own left); two pods claiming one record (one address, one name, a mirror's config
hash equal to a UID); pods still starting coming and going; every pod listed anew as an equal object."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from nodegc.model.pods import DesiredState, Pod
from nodegc.model.resources import Inventory

PHASES = ("Running", "Running", "Pending", None, "Succeeded", "Failed", "Unknown")
OPS = ("add_by_uid", "add_by_ip", "add_by_name", "add_by_netns", "add_by_chain", "remove", "phase", "ip", "uid_moves",
       "uid_renamed", "uid_taken", "twice_ip", "twice_name", "mirror_hash", "host_network", "starting",
       "started", "listed_anew", "reordered", "static_mirror", "absent_named")

changes = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 1 << 30), st.integers(0, 1 << 30),
                             st.sampled_from(PHASES)), min_size=1, max_size=10)


def record_names(inv: Inventory) -> dict[str, list[str]]:
    """What a pod may claim a record by: UIDs, addresses of each kind, names of cache entries."""
    listed = {(e.container_id, ip) for e in inv.cni_cache for ip in e.ips}
    # The addresses a chain's rules name that no cache entry of its container lists first (their rules'
    # verdicts read those claimants apart), then the others.
    named = [(c.container_id, w.split("/")[0]) for c in inv.chains for text in (*c.rules, *c.jumps)
             for w in text.split() if w[:1].isdigit() and "." in w and "/" not in w.removesuffix("/32")]
    chain_ips = [ip for cid, ip in named if (cid, ip) not in listed] or [ip for _, ip in named]
    return {
        "uid": sorted({e.pod_uid for e in inv.cni_cache if e.pod_uid} | {d.uid for d in inv.pod_dirs}) or ["u0"],
        "ip": sorted({r.ip for r in inv.ip_reservations} | {ip for e in inv.cni_cache for ip in e.ips}) or ["10.9.0.1"],
        "netns": sorted({a for ns in inv.netns for a in ns.addresses}) or ["10.9.0.2"],
        "chain": sorted(set(chain_ips)) or ["10.9.0.3"],
        "name": sorted({e.pod_name for e in inv.cni_cache if e.pod_name}) or ["pod-0"],
    }


def apply(desired: DesiredState, op: tuple[str, int, int, str | None], names: dict[str, list[str]],  # noqa: PLR0915
          step: int) -> DesiredState:
    """The desired state after one change (the node's name and time kept)."""
    what, a, b, phase = op
    pods = list(desired.pods)

    def pick(kind: str, n: int) -> str:
        return names[kind][n % len(names[kind])]

    def new(uid: str, *, name: str | None = None, ips: tuple[str, ...] = ()) -> Pod:
        return Pod(uid=uid, namespace="default", name=name or f"new-{step}-{a % 97}", node_name=desired.node,
                   phase=phase, pod_ips=ips)

    if what == "add_by_uid":
        pods.append(new(pick("uid", a), ips=(pick("ip", b),) if b % 2 else ()))
    elif what == "add_by_ip":
        pods.append(new(f"ip-{step}-{a}", ips=(pick("ip", a),)))
    elif what == "add_by_netns":
        pods.append(new(f"ns-{step}-{a}", ips=(pick("netns", a),)))
    elif what == "add_by_chain":
        pods.append(new(f"ch-{step}-{a}", ips=(pick("chain", a),)))
    elif what == "add_by_name":
        pods.append(new(f"nm-{step}-{a}", name=pick("name", a), ips=(pick("ip", b),) if b % 3 else ()))
    elif not pods:
        pods.append(new(f"first-{step}", ips=(pick("ip", a),)))
    elif what == "remove":
        del pods[a % len(pods)]
    elif what == "phase":
        j = a % len(pods)
        pods[j] = replace(pods[j], phase=phase)
    elif what == "ip":
        j = a % len(pods)
        pods[j] = replace(pods[j], pod_ips=(pick("ip", b),) if b % 4 else ())
    elif what == "uid_moves":  # the same pod listed at another place
        pod = pods.pop(a % len(pods))
        pods.insert(b % (len(pods) + 1), pod)
    elif what == "uid_renamed":  # the same UID under another name, or in another namespace
        j = a % len(pods)
        pods[j] = replace(pods[j], name=pick("name", b)) if b % 2 else replace(pods[j], namespace="other")
    elif what == "uid_taken":  # a pod leaves; another takes its UID (and keeps its own name and addresses)
        i, j = a % len(pods), b % len(pods)
        uid = pods[i].uid
        if i != j:
            pods[j] = replace(pods[j], uid=uid)
            del pods[i]
    elif what == "twice_ip":
        pod = pods[a % len(pods)]
        pods.append(new(f"twin-{step}-{a}", ips=pod.pod_ips or (pick("ip", b),)))
    elif what == "twice_name":
        pod = pods[a % len(pods)]
        pods.append(replace(pod, uid=f"{pod.uid}-again-{step}", phase=phase))
    elif what == "mirror_hash":  # a mirror pod whose config hash is another pod's UID
        pods.append(new(f"mirror-{step}-{a}", ips=(pick("ip", b),)))
        pods[-1] = replace(pods[-1], static_uid=pick("uid", a))
    elif what == "host_network":
        j = a % len(pods)
        pods[j] = replace(pods[j], host_network=not pods[j].host_network)
    elif what == "starting":
        pods.append(Pod(uid=f"start-{step}", namespace="default", name=f"start-{a % 5}", node_name=desired.node,
                        phase="Pending", pod_ips=()))
    elif what == "started":
        starting = [i for i, p in enumerate(pods) if p.uid.startswith("start-")]
        if starting:
            del pods[starting[a % len(starting)]]
    elif what == "static_mirror":  # the mirror of a static pod manifest comes or goes (`_odd`'s static.yaml)
        mirrors = [i for i, p in enumerate(pods) if p.name == f"static-{desired.node}"]
        if mirrors:
            del pods[mirrors[0]]
        else:
            pods.append(Pod(uid=f"mirror-{step}", namespace="kube-system", name=f"static-{desired.node}",
                            node_name=desired.node, phase=phase, static_uid=f"hash-{a % 3}", host_network=True))
    elif what == "absent_named":  # a pod named as a static pod's mirror would be
        pods.append(new(f"named-{step}", name=f"absent-{desired.node}", ips=(pick("ip", b),)))
    elif what == "listed_anew":
        pods = [replace(p) for p in pods]
    elif what == "reordered":
        pods.reverse()
    return replace(desired, pods=tuple(pods))
