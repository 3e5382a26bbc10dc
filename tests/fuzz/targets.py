"""Fuzz targets: every parser of host and desired-state input, and the correlate+plan pipeline.

Each target is a hypothesis strategy and a check. The check calls the code under test and may let only the
documented error type escape (a rejection: the input was refused with a reason); anything else it raises
is a crash, and a `Violation` is a broken property. `tests/fuzz/test_fuzz.py` runs every target at a
modest count in `make test`; `scripts/fuzz.py` (`make fuzz`) runs them at scale and counts.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from nodegc.api.errors import KubeError
from nodegc.api.objects import pod_from_object
from nodegc.desired.snapshot import parse_snapshot
from nodegc.desired.source import SourceError
from nodegc.hostio.cni_files import parse_reservation
from nodegc.hostio.iptables import HOSTPORT_CHAINS, PER_CONTAINER_CHAIN, parse_iptables_save
from nodegc.hostio.mountinfo import parse_mountinfo
from nodegc.hostio.netlink import NetlinkError, _messages, _parse_link
from nodegc.inventory.cni_cache import parse_cache_entry
from nodegc.inventory.netns import _odd_name
from nodegc.ledger.store import Ledger
from nodegc.model.findings import FindingClass
from nodegc.model.items import Item, Phase
from nodegc.model.pods import DesiredState, OwnerState, Pod
from nodegc.model.resources import (
    CNICacheEntry,
    HostportRule,
    Inventory,
    IPReservation,
    IptablesChain,
    Kind,
    NetnsEntry,
    PodDir,
    VethLink,
    VolumeDir,
)
from nodegc.planning.correlate import CorrelationPolicy, correlate
from nodegc.planning.guards import BlastRadius, blast_radius_refusal
from nodegc.planning.owners import cni_chain_name
from nodegc.planning.phases import PhasePolicy, Transition, hostport_rule_id, identities, reconcile


class Violation(AssertionError):
    """A property the code promises did not hold for this input."""


@dataclass(frozen=True)
class Target:
    name: str
    strategy: st.SearchStrategy[Any]
    check: Callable[[Any], None]
    rejects: tuple[type[BaseException], ...] = ()
    """The documented errors: raising one of these is a refusal with a reason, not a crash."""

    def run(self, value: Any) -> bool:
        """True when the input was accepted, False when it was refused with a documented error."""
        try:
            self.check(value)
        except Violation:
            raise
        except self.rejects:
            return False
        return True


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise Violation(what)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# -- bytes as the readers see them ----------------------------------------------------------------

NASTY = ["", " ", "\t", "\n", "\r\n", "\\", "\\040", "\\134", "\\777", "-", ":", "/", '"', "'", "\x00", "\x1c",
         "\u2028", "\udcff", "é", "🙂", "9" * 40, "[", "{", "}", "]", "name:", "id:", "-A", "-j", "COMMIT", "*nat"]


def _fs_text(draw: st.DrawFn, tokens: list[str]) -> str:
    """Text as a reader decodes file bytes (UTF-8 with surrogateescape), built from tokens and noise."""
    parts = draw(st.lists(st.one_of(st.sampled_from(tokens + NASTY), st.text(max_size=8),
                                    st.binary(max_size=6).map(lambda b: b.decode("utf-8", "surrogateescape"))),
                          max_size=40))
    return "".join(parts)


# -- mountinfo ------------------------------------------------------------------------------------


def _escape(field: str) -> str:
    return "".join({" ": "\\040", "\t": "\\011", "\n": "\\012", "\\": "\\134"}.get(c, c) for c in field)


_path_chars = st.one_of(st.characters(codec="utf-8", exclude_characters="\x00"),
                        st.sampled_from([" ", "\t", "\n", "\\", "\udcff", "\udc80"]))
_paths = st.lists(st.text(_path_chars, min_size=1, max_size=8), min_size=1, max_size=4).map(
    lambda parts: "/" + "/".join(parts))


@st.composite
def _mountinfo(draw: st.DrawFn) -> tuple[str, list[tuple[int, int, str, str, str, str]]]:
    good: list[tuple[int, int, str, str, str, str]] = []
    lines: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            mid, parent = draw(st.integers(0, 2**31)), draw(st.integers(0, 2**31))
            root, point, source = draw(_paths), draw(_paths), draw(st.one_of(st.just(""), _paths))
            fs_type = draw(st.sampled_from(["tmpfs", "ext4", "nsfs", "fuse.sshfs", "a b"]))
            optional = " ".join(draw(st.lists(st.sampled_from(["shared:1", "master:7", "unbindable"]), max_size=2)))
            lines.append(f"{mid} {parent} 0:{draw(st.integers(0, 999))} {_escape(root)} {_escape(point)} rw"
                         f"{' ' + optional if optional else ''} - {_escape(fs_type)} {_escape(source)} rw")
            good.append((mid, parent, root, point, fs_type, source))
        else:
            junk = _fs_text(draw, ["1 2 0:3 / /x rw - tmpfs t rw", "0:0", " - ", "shared:1"])
            lines.append(junk.replace("\n", " "))
            good.append((-1, -1, "", "", "", ""))
    return "\n".join(lines), good


def _check_mountinfo(case: tuple[str, list[tuple[int, int, str, str, str, str]]]) -> None:
    text, expected = case
    mounts, reasons = parse_mountinfo(text)
    nonblank = sum(1 for line in text.split("\n") if line.strip())
    _expect(len(mounts) + len(reasons) == nonblank, "a line was neither parsed nor reported")
    wanted = [e for e in expected if e[0] >= 0]
    got = [(m.mount_id, m.parent_id, m.root, m.mount_point, m.fs_type, m.source) for m in mounts]
    for entry in wanted:
        _expect(entry in got, f"a well-formed line was not read back exactly: {entry!r}")


# -- host-local IPAM reservation files -----------------------------------------------------------


@st.composite
def _reservation(draw: st.DrawFn) -> tuple[bytes, str]:
    if draw(st.booleans()):
        content = draw(st.binary(max_size=80))
    else:
        cid = draw(st.one_of(st.text(st.sampled_from("0123456789abcdef"), min_size=1, max_size=64),
                             st.text(max_size=10)))
        sep = draw(st.sampled_from(["\r\n", "\n", "\r", "", "\n\n", " \r\n"]))
        ifname = draw(st.sampled_from(["eth0", "net1", "", " ", "eth0\n", "a b", "\x00"]))
        content = (cid + sep + ifname).encode("utf-8", "surrogatepass")
    name = draw(st.one_of(st.sampled_from(["10.0.0.5", "fd00::5", "010.0.0.5", "10.0.0.256", "::ffff:10.0.0.1",
                                           "lock", "last_reserved_ip.0", "fe80::1%eth0"]), st.text(max_size=20)))
    return content, name


def _check_reservation(case: tuple[bytes, str]) -> None:
    content, name = case
    try:
        ip = str(ipaddress.ip_address(name))
    except ValueError:
        ip = None
    if ip is not None:
        _expect(str(ipaddress.ip_address(ip)) == ip, "address normalization is not idempotent")
    cid, ifname, legacy = parse_reservation(content)
    _expect(bool(cid) and cid is not None and cid.isprintable() and " " not in cid, f"container id {cid!r}")
    _expect(legacy == (ifname is None), "legacy format flag disagrees with the interface name")
    if ifname is not None:
        _expect(ifname.isprintable() and " " not in ifname, f"interface name {ifname!r}")


# -- libcni cache entries -------------------------------------------------------------------------

_json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                          st.text(max_size=12), st.sampled_from(["\ud800", "10.0.0.5/24", "fd00::1/64", "cniCacheV1"]))
_json = st.recursive(_json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                              st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                     max_leaves=12)

_VALID_CACHE = {
    "kind": "cniCacheV1", "containerId": "c" * 64, "networkName": "k8s-pod-network", "ifName": "eth0",
    "netns": "/var/run/netns/cni-1", "config": "eyJjbmlWZXJzaW9uIjoiMS4wLjAifQ==",
    "cniArgs": [["K8S_POD_NAMESPACE", "shop"], ["K8S_POD_NAME", "web-0"], ["K8S_POD_UID", "u1"]],
    "capabilityArgs": {"portMappings": [{"hostPort": 8080}]},
    "result": {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.5/24"}], "ip4": {"ip": "10.0.0.6/24"}},
}


@st.composite
def _cache_entry(draw: st.DrawFn) -> bytes:
    how = draw(st.sampled_from(["binary", "json", "mutated", "truncated", "plausible", "plausible"]))
    if how == "binary":
        return bytes(draw(st.binary(max_size=200)))
    if how == "json":
        return json.dumps(draw(_json)).encode("utf-8", "surrogatepass")
    doc: dict[str, Any] = json.loads(json.dumps(_VALID_CACHE))
    if how == "plausible":  # what libcni writes, with names, ids and addresses drawn
        doc["containerId"] = draw(st.text(min_size=1, max_size=70))
        doc["cniArgs"] = [[k, draw(st.text(max_size=20))] for k in ("K8S_POD_NAMESPACE", "K8S_POD_NAME", "K8S_POD_UID")]
        doc["result"]["ips"] = [{"address": draw(st.sampled_from(["10.0.0.5/24", "fd00::5/64", "10.0.0.5", "x/24",
                                                                  "::ffff:10.0.0.5/96", "010.0.0.5/24"]))}]
        doc["netns"] = draw(st.sampled_from(["/var/run/netns/cni-1", "/proc/1/ns/net", "", None]))
        return json.dumps(doc).encode("utf-8", "surrogatepass")
    if how == "mutated":
        for key in draw(st.lists(st.sampled_from([*_VALID_CACHE, "extra"]), min_size=1, max_size=3)):
            doc[key] = draw(_json)
        return json.dumps(doc).encode("utf-8", "surrogatepass")
    text = json.dumps(doc).encode()
    return text[: draw(st.integers(0, len(text)))]


def _check_cache_entry(content: bytes) -> None:
    entry = parse_cache_entry("/r/net-c-eth0", content, inode=1, mtime=0.0)
    for field in dataclasses.fields(entry):
        value = getattr(entry, field.name)
        texts: list[str] = [value] if isinstance(value, str) else []
        if field.name == "ips":
            texts = list(entry.ips)
        elif field.name == "cni_args":
            texts = [t for pair in entry.cni_args for t in pair]
        for text in texts:
            _expect(_utf8(text), f"{field.name} carries text that is not valid Unicode")
    _expect(bool(entry.container_id and entry.network and entry.ifname), "an entry without its identity")
    for ip in entry.ips:
        _expect(str(ipaddress.ip_address(ip)) == ip, f"unnormalized address {ip!r}")


# -- iptables-save --------------------------------------------------------------------------------

_CIDS = ["a" * 64, "b" * 64, "0123456789abcdef" * 4]


@st.composite
def _iptables(draw: st.DrawFn) -> str:
    lines: list[str] = []
    for _ in range(draw(st.integers(0, 25))):
        cid = draw(st.sampled_from(_CIDS))
        chain = draw(st.sampled_from([cni_chain_name("net", cid), "CNI-DN-" + "1f" * 6, "CNI-HOSTPORT-DNAT",
                                      "CNI-HOSTPORT-SETMARK", "POSTROUTING", "CNI-FORWARD", "CNI-xyz"]))
        comment = draw(st.sampled_from([f'-m comment --comment "name: \\"net\\" id: \\"{cid}\\""',
                                        f"-m comment --comment 'name: net id: {cid}'", "", '-m comment --comment "',
                                        '-m comment --comment "unterminated \\"']))
        lines.append(draw(st.sampled_from([
            "*nat", "*filter", "COMMIT", f":{chain} - [0:0]", f":{chain} ACCEPT", ":", "*", "# comment",
            f"-A {chain} -s 10.0.0.5/32 {comment} -j {draw(st.sampled_from([chain, 'MASQUERADE', 'CNI-DN-1f']))}",
            f"[1:2] -A {chain} {comment} -j ACCEPT", f"-A {chain} -p tcp --dport 8080 -j DNAT --to 10.0.0.5:80",
            f"-N {chain}", f"-A {chain}",
        ])))
        if draw(st.integers(0, 9)) == 0:
            lines.append(_fs_text(draw, ["-A", "-j", "*nat", "COMMIT", '"', "'", "\\"]))
    return "\n".join(lines)


def _check_iptables(text: str) -> None:
    chains, rules, skipped = parse_iptables_save(text)
    for chain in chains:
        _expect(PER_CONTAINER_CHAIN.match(chain.name) is not None, f"shared chain {chain.name!r} reported")
    for rule in rules:
        _expect(rule.chain in HOSTPORT_CHAINS, f"a rule of chain {rule.chain!r} reported as a hostport rule")
    _expect(all(isinstance(s, str) for s in skipped), "a skipped line without a reason")


# -- pods files and pod objects -------------------------------------------------------------------

_phases = st.sampled_from([None, "Running", "Pending", "Succeeded", "Failed", "Unknown", "", "running", 7])


@st.composite
def _pod_object(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(_json)
    odd = draw(st.integers(0, 3)) == 0  # one pod in four carries odd values; the rest are plausible
    meta: dict[str, Any] = {
        "name": draw(st.sampled_from(["a", "b", "", None, 3, "x\ud800"] if odd else ["a", "b", "c"])),
        "namespace": draw(st.sampled_from(["d", None, "", ["x"]] if odd else ["d", None])),
        "uid": draw(st.sampled_from(["u1", "u2", "", None, {"a": 1}, "u\udcff"] if odd else ["u1", "u2", "u3"]))}
    if draw(st.booleans()):
        meta["creationTimestamp"] = draw(st.sampled_from(["2024-05-01T10:00:00Z", "yesterday", 12, None,
                                                          "9999-12-31T23:59:59+23:59"] if odd else
                                                         ["2024-05-01T10:00:00Z", None]))
    if draw(st.booleans()):
        meta["annotations"] = draw(st.sampled_from([{"kubernetes.io/config.mirror": "h1"}, [], None, {"a": 1}]))
    status: dict[str, Any] = {"phase": draw(_phases if odd else st.sampled_from(["Running", "Pending", "Succeeded"]))}
    if draw(st.booleans()):
        status["podIPs"] = draw(st.sampled_from([[{"ip": "10.0.0.5"}], [{"ip": "fd00::05"}], [{"ip": 5}], "x",
                                                 [None], [{"ip": "10.0.0.5 "}], []] if odd else
                                                [[{"ip": "10.0.0.5"}], [{"ip": "fd00::05"}], []]))
    if draw(st.booleans()):
        status["podIP"] = draw(st.sampled_from(["10.0.0.6", "", "nope", None, 6] if odd else ["10.0.0.6", None]))
    spec = {"nodeName": draw(st.sampled_from(["n1", "n2", None, "", 1] if odd else ["n1", "n1", "n2"])),
            "hostNetwork": draw(st.sampled_from([False, True, None, "yes"] if odd else [False, True]))}
    obj: dict[str, Any] = {"kind": draw(st.sampled_from(["Pod", None, "List", ["Pod"]] if odd else ["Pod"])),
                           "metadata": meta, "spec": spec, "status": status}
    if odd:
        for key in draw(st.lists(st.sampled_from(["metadata", "spec", "status"]), max_size=1)):
            obj[key] = draw(_json)
    return obj


@st.composite
def _pods_file(draw: st.DrawFn) -> tuple[bytes, str | None]:
    how = draw(st.sampled_from(["list", "list", "yaml", "single", "binary", "deep", "bigint", "json"]))
    node = draw(st.sampled_from([None, "n1"]))
    if how == "binary":
        return bytes(draw(st.binary(max_size=200))), node
    if how == "deep":
        depth = draw(st.sampled_from([999, 1001, 1500, 3000]))  # 100,000 deep: tests/adversarial
        return draw(st.sampled_from(["[" * depth + "]" * depth, "a: " + "[" * depth, "{\"a\":" * depth])).encode(), node
    if how == "bigint":
        return (f'{{"kind": "List", "items": [], "x": {"9" * draw(st.integers(4000, 6000))}}}').encode(), node
    if how == "json":
        return json.dumps(draw(_json)).encode("utf-8", "surrogatepass"), node
    items = draw(st.lists(_pod_object(), max_size=5))
    meta: Any = draw(st.sampled_from([{}, {"continue": "x"}, {"remainingItemCount": 2}, {"remainingItemCount": 0},
                                 {"selfLink": "/api/v1/pods?labelSelector=a%3Db"}, {"selfLink": "?%zz"}, None, [],
                                 {"selfLink": "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1"}]))
    doc: Any = items[0] if how == "single" and items else {"kind": draw(st.sampled_from(["List", "PodList", None])),
                                                            "metadata": meta, "items": items}
    if how == "yaml":
        try:
            return yaml.safe_dump(doc, allow_unicode=False).encode("utf-8", "surrogatepass"), node
        except yaml.YAMLError:
            return b"- [", node
    return json.dumps(doc).encode("utf-8", "surrogatepass"), node


def _check_pods_file(case: tuple[bytes, str | None]) -> None:
    content, node = case
    state = parse_snapshot(content, path=Path("pods.json"), node=node, written=datetime(2026, 1, 1, tzinfo=UTC),
                           source="fuzz")
    _expect(isinstance(state.node, str) and bool(state.node), "a desired state without a node")
    for pod in state.pods:
        _check_pod(pod)
        _expect(pod.node_name == state.node, "a pod of another node in the node's desired state")
    if state.pods:
        _expect(not all(p.state is OwnerState.TERMINAL for p in state.pods), "a list of finished pods accepted")


def _check_pod(pod: Pod) -> None:
    for text in (pod.uid, pod.name, pod.namespace, pod.static_uid or "", pod.node_name or "", pod.phase or ""):
        _expect(isinstance(text, str) and _utf8(text), "a pod field is not valid Unicode text")
    _expect(bool(pod.uid and pod.name), "a pod without identity")
    for ip in pod.pod_ips:
        _expect(str(ipaddress.ip_address(ip)) == ip, f"unnormalized pod IP {ip!r}")


def _check_pod_object(obj: Any) -> None:
    _check_pod(pod_from_object(obj))


# -- YAML files the operator or the kubelet's user writes: agent config, kubeconfig, static pod manifests --


def _bomb(depth: int) -> tuple[str, str]:
    """Anchors whose last stands for 4**depth leaves (a walker that visits the graph as a tree explodes),
    and its alias."""
    parts = ['&a0 ["x", "x", "x", "x"]'] + [f"&a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
                                             for i in range(1, depth + 1)]
    return "[" + ", ".join(parts) + "]", f"*a{depth}"


@st.composite
def _yaml_text(draw: st.DrawFn, keys: list[str], shape: Callable[[str, Any], Any],
               base: dict[str, Any] | None = None) -> bytes:
    """A YAML file: a document built from `keys` by `shape` (over a valid `base` half the time), or one of the
    known bad forms in its place."""
    how = draw(st.sampled_from(["doc", "doc", "doc", "bomb", "deep", "bigint", "nul", "binary", "multi", "noise"]))
    key = draw(st.sampled_from(keys))
    if how == "binary":
        return bytes(draw(st.binary(max_size=200)))
    if how == "deep":
        depth = draw(st.sampled_from([200, 999, 1001, 3000]))
        return f"{key}: {'[' * depth}{']' * depth}\n".encode()
    if how == "bigint":
        return f"{key}: {'9' * draw(st.integers(4000, 6000))}\n".encode()
    if how == "bomb":  # at the key, or where `shape` puts a value below it (a manifest's metadata.namespace)
        defs, alias = _bomb(draw(st.integers(4, 12)))  # 4**12: 16 million leaves as a tree
        doc = dict(base or {}) | {key: shape(key, "@BOMB@")}
        text = yaml.safe_dump(doc, width=1 << 20).replace("'@BOMB@'", alias)  # block style: not JSON-sniffed
        return f"x: {defs}\n{text}".encode()
    if how == "nul":
        return f'{key}: "/a\\0b"\n'.encode()
    if how == "noise":
        return _fs_text(draw, [f"{k}:" for k in keys] + ["&a", "*a", "!!python/object", "---", "<<: *a"]).encode(
            "utf-8", "surrogateescape")
    doc = dict(base or {}) if draw(st.booleans()) else {}
    doc |= {k: shape(k, draw(_json)) for k in draw(st.lists(st.sampled_from(keys), max_size=3 if doc else 6))}
    text = yaml.safe_dump(doc, allow_unicode=False) if doc else ""
    return (text + ("---\n" + text if how == "multi" else "")).encode("utf-8", "surrogatepass")


_VALID_CONFIG = {"apiVersion": "nodegc.io/v1alpha1", "kind": "AgentConfig", "interval": "30s", "grace": "2m",
                 "markRules": ["volume_mount=5,10m"], "dryRun": True, "kubeletRoot": "/var/lib/kubelet"}
_CONFIG_KEYS = ["apiVersion", "kind", "interval", "consecutiveScans", "grace", "markRules", "dryRun", "maxShare",
                "kubeletRoot", "stateDir", "metricsAddress", "logLevel", "unknownKey", "cniBinDirs"]


def _check_agent_config(content: bytes) -> None:
    import tempfile

    from nodegc.config import apply
    from nodegc.flags import build_parser

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "agent.yaml"
        path.write_bytes(content)
        parser = build_parser()
        argv = ["agent", "--config", str(path)]
        args = parser.parse_args(argv)
        try:
            apply(parser, "agent", argv, args, path)
        except ValueError as e:  # ConfigError: one line that names the file, a bounded quote of the value
            _expect(str(e).startswith(f"{path}: "), f"a config error that does not name the file: {e}")
            _expect(len(str(e)) <= 2 * len(content) + 2000, f"a config error of {len(str(e))} characters")
            raise
        for value in vars(args).values():
            if isinstance(value, (str, Path)):
                _expect("\0" not in str(value), "a setting holding a NUL byte")


_VALID_KUBECONFIG = {"current-context": "c", "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                     "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                     "users": [{"name": "u", "user": {"token": "t"}}]}
_KUBECONFIG_KEYS = ["clusters", "contexts", "users", "current-context", "preferences", "apiVersion"]


def _kubeconfig_shape(key: str, value: Any) -> Any:
    if key == "current-context":
        return value if not isinstance(value, (list, dict)) else "c"
    named = {"clusters": "cluster", "contexts": "context", "users": "user"}.get(key)
    if named is None:
        return value
    body = {"cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": value},
            "context": {"cluster": "c", "user": "u", "namespace": value},
            "user": {"token": "t", "tokenFile": value if isinstance(value, str) else "/dev/null"}}[named]
    return [{"name": "c" if named != "user" else "u", named: body}]


def _check_kubeconfig(content: bytes) -> None:
    import tempfile

    from nodegc.api.client import load_config

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config"
        path.write_bytes(content)
        load_config(path)


_VALID_MANIFEST = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "etcd", "namespace": "kube-system"},
                   "spec": {"containers": [{"name": "etcd"}], "hostNetwork": True}}
_MANIFEST_KEYS = ["apiVersion", "kind", "metadata", "spec"]


def _manifest_shape(key: str, value: Any) -> Any:
    if key == "metadata":
        named = isinstance(value, (list, dict)) or value == "@BOMB@"  # a bomb goes below a name that holds
        return {"name": "p" if named else value, "namespace": value, "uid": value}
    if key == "spec":
        return {"containers": [{"name": value}], "hostNetwork": value}
    return value


def _check_static_manifest(content: bytes) -> None:
    from nodegc.inventory.static_pods import _manifest

    m = _manifest("/etc/kubernetes/manifests/p.yaml", content)
    _expect(isinstance(m.name, str) and bool(m.name), "a manifest taken without a name")
    _expect(isinstance(m.namespace, str) and len(m.namespace) < len(content) + 10, "a manifest's namespace")
    _expect(m.uid is None or isinstance(m.uid, str), "a manifest's uid that is not text")
    _expect(all(isinstance(c, str) for c in m.containers), "a container name that is not text")


# -- the IP range window file ---------------------------------------------------------------------


@st.composite
def _range_window(draw: st.DrawFn) -> Any:
    number = st.one_of(st.integers(-5, 10**6), st.integers(10**300, 10**400), st.floats(), st.booleans(),
                       st.sampled_from([1.0e9, 1.7e9]))
    row = st.one_of(st.lists(number, min_size=6, max_size=6), _json)
    series = st.fixed_dictionaries({"network": st.sampled_from(["net", "net", "net", 5]),
                                    "range": st.sampled_from(["10.0.0.0/24", "10.0.0.0/24", None]),
                                    "samples": st.one_of(st.lists(row, max_size=4), st.lists(row, max_size=4), _json)})
    return draw(st.one_of(_json, st.fixed_dictionaries({
        "version": st.sampled_from([1, 1, 1, 2, "1", None]),
        "node": st.sampled_from(["n1", "n1", None, None, "", 5, ["n1"]]),
        "series": st.one_of(st.lists(series, max_size=3), _json)})))


def _check_range_window(doc: Any) -> None:
    import math

    from nodegc.planning.ipranges import RangeTracker

    tracker = RangeTracker(window_seconds=10**9)
    taken = tracker.restore(doc, 2.0e9)
    snapshot = tracker.snapshot()
    rows = [r for s in snapshot["series"] for r in s["samples"]]
    _expect(taken == len(rows), f"{taken} samples taken, {len(rows)} kept")
    _expect(all(math.isfinite(v) and v >= 0 for r in rows for v in r), "a sample kept with a bad number")
    json.dumps(snapshot, allow_nan=False)


# -- netns names and link messages ----------------------------------------------------------------


@st.composite
def _netns_name(draw: st.DrawFn) -> str:
    return draw(st.one_of(st.sampled_from(["cni-1234", ".hidden", "a b", "cni-\t", "\udcff", "ok\u2028", "é"]),
                          st.binary(min_size=1, max_size=16).map(lambda b: b.decode("utf-8", "surrogateescape"))))


def _check_netns_name(name: str) -> None:
    if _odd_name(name) is None:
        _expect(_utf8(name) and name.isprintable() and not any(c.isspace() for c in name)
                and not name.startswith("."), f"netns name {name!r} accepted")


_NLMSG = struct.Struct("=LHHLL")
_IFINFO = struct.Struct("=BxHiII")
_NLA = struct.Struct("=HH")


@st.composite
def _link_dump(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 3)) == 0:
        return bytes(draw(st.binary(max_size=120)))
    out = b""
    for _ in range(draw(st.integers(1, 3))):
        attrs = b""
        for _ in range(draw(st.integers(0, 5))):
            atype = draw(st.sampled_from([1, 3, 10, 18, 37, 5, 0x8012]))  # address, ifname, master, linkinfo...
            payload = draw(st.one_of(st.binary(max_size=12), st.sampled_from([b"veth0\0", b"\xff\xfe\0", b"a\0b\0",
                                                                              b"\x08\x00\x01\x00veth"])))
            length = 4 + len(payload) if draw(st.integers(0, 9)) else draw(st.integers(0, 40))
            attrs += _NLA.pack(length & 0xFFFF, atype) + payload + b"\0" * ((4 - len(payload) % 4) % 4)
        body = _IFINFO.pack(0, 1, draw(st.integers(-5, 2**31 - 1)), 0, 0) if draw(st.integers(0, 5)) else b"\0" * 3
        body += attrs
        length = _NLMSG.size + len(body) if draw(st.integers(0, 9)) else draw(st.integers(0, 200))
        out += _NLMSG.pack(length, 16, 2, 1, 0) + body
    return out


def _check_link_dump(data: bytes) -> None:
    buf = bytearray(data)
    for _mtype, _flags, _seq, start, end in _messages(buf, len(buf)):
        link = _parse_link(buf, start, end)
        _expect(link.name is None or _utf8(link.name), "a link name that is not valid Unicode")


# -- the ledger: whatever text an item carries comes back exactly --------------------------------

_any_text = st.text(st.one_of(st.characters(), st.sampled_from(["\ud800", "\udcff", "\x00", "'", "%"])), max_size=12)


@st.composite
def _ledger_item(draw: st.DrawFn) -> tuple[Item, str]:
    kind = draw(st.sampled_from(list(Kind)))
    rid = draw(_any_text)
    opt = st.one_of(st.none(), _any_text)
    item = Item(key=f"{kind.value}:{rid}", kind=kind, resource_id=rid, phase=draw(st.sampled_from(list(Phase))),
                identity=tuple(draw(st.lists(st.tuples(_any_text, _any_text), max_size=2))),
                finding_class=draw(_any_text), owner_uid=draw(opt), owner_namespace=draw(opt), owner_name=draw(opt),
                container_id=draw(opt), first_seen=draw(st.floats(0, 1e10)), last_seen=draw(st.floats(0, 1e10)),
                orphan_count=draw(st.integers(0, 2**62)), attempts=draw(st.integers(0, 2**62)),
                next_attempt=draw(st.one_of(st.none(), st.floats(0, 1e10))), last_error=draw(opt),
                lazy=draw(st.booleans()))
    return item, draw(_any_text)


def _check_ledger(case: tuple[Item, str]) -> None:
    item, reason = case
    with Ledger(":memory:") as ledger:
        ledger.apply([Transition(item, None, reason)], now=1.0)
        _expect(ledger.get(item.key) == item, "an item did not come back exactly")
        _expect(ledger.items() == {item.key: item}, "the item list differs")
        for row in ledger.history(key=item.key):
            _expect(all(_utf8(t) for t in (row.key, row.reason, row.owner or "")), "a history row is unprintable")


# -- correlate + plan -----------------------------------------------------------------------------

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
OLD = (NOW - timedelta(hours=1)).timestamp()
YOUNG = (NOW - timedelta(seconds=5)).timestamp()
UIDS = [f"u{i}" for i in range(6)]
CIDS = [f"{i:x}" * 64 for i in range(8)]
IPS = ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.1.2", "fd00::2", "fd00::3"]
NETS = ["k8s-pod-network", "net2"]
KUBELET = "/kubelet/pods"


@dataclass(frozen=True)
class Scenario:
    inventory: Inventory
    desired: DesiredState


@st.composite
def _scenario(draw: st.DrawFn) -> Scenario:
    pods: list[Pod] = []
    for uid in draw(st.lists(st.sampled_from(UIDS), unique=True, max_size=6)):
        ips = tuple(draw(st.lists(st.sampled_from(IPS), unique=True, max_size=2)))
        pods.append(Pod(uid=uid, namespace="d", name=f"pod-{uid}", node_name="n1",
                        phase=draw(st.sampled_from([None, "Running", "Running", "Pending", "Succeeded", "Failed",
                                                    "Unknown"])),
                        pod_ips=ips, host_network=draw(st.integers(0, 9)) == 0,
                        created_at=NOW - timedelta(seconds=draw(st.sampled_from([5, 3600, 86400]))),
                        static_uid=draw(st.sampled_from([None, None, None, f"hash-{uid}"]))))
    owners = UIDS + [f"hash-{u}" for u in UIDS]
    mtime = st.sampled_from([OLD, OLD, YOUNG])
    dirs = []
    for uid in draw(st.lists(st.sampled_from(owners), unique=True, max_size=6)):
        vols = []
        for name in draw(st.lists(st.sampled_from(["a", "b"]), unique=True, max_size=2)):
            mounted = draw(st.booleans())
            path = f"{KUBELET}/{uid}/volumes/kubernetes.io~empty-dir/{name}"
            vols.append(VolumeDir(pod_uid=uid, plugin="kubernetes.io~empty-dir", name=name, path=path,
                                  mount_id=draw(st.integers(100, 999)) if mounted else None,
                                  fs_type="tmpfs" if mounted else None))
        dirs.append(PodDir(uid=uid, path=f"{KUBELET}/{uid}", inode=draw(st.integers(1, 99)), mtime=draw(mtime),
                           volumes=tuple(vols), mounts_below=tuple(v.mount_id for v in vols if v.mount_id)))
    reservations = [IPReservation(network=net, ip=ip, path=f"/cni/networks/{net}/{ip}", inode=1, mtime=draw(mtime),
                                  container_id=draw(st.sampled_from([*CIDS, None])), ifname="eth0")
                    for net, ip in draw(st.lists(st.tuples(st.sampled_from(NETS), st.sampled_from(IPS)), unique=True,
                                                 max_size=6))]
    caches = []
    for cid in draw(st.lists(st.sampled_from(CIDS), unique=True, max_size=5)):
        owner = draw(st.sampled_from([*UIDS, None]))
        caches.append(CNICacheEntry(
            path=f"/cni/results/k8s-pod-network-{cid}-eth0", inode=2, mtime=draw(mtime), network="k8s-pod-network",
            container_id=cid, ifname="eth0", netns=draw(st.sampled_from([f"/run/netns/cni-{cid[:8]}", None])),
            pod_namespace="d", pod_name=draw(st.sampled_from([f"pod-{owner}", None, "pod-u0"])), pod_uid=owner,
            ips=tuple(draw(st.lists(st.sampled_from(IPS), unique=True, max_size=2)))))
    netns = []
    for cid in draw(st.lists(st.sampled_from(CIDS), unique=True, max_size=5)):
        mounted = draw(st.booleans())
        read = mounted and draw(st.integers(0, 3)) > 0
        netns.append(NetnsEntry(name=f"cni-{cid[:8]}", path=f"/run/netns/cni-{cid[:8]}", mounted=mounted,
                                ns_inode=draw(st.integers(1, 9)) if mounted else None, mtime=draw(mtime),
                                addresses=tuple(draw(st.lists(st.sampled_from(IPS), unique=True, max_size=2)))
                                if read else (), addresses_read=read))
    veths = [VethLink(name=f"veth{cid[:6]}", index=i + 10, mac=None, master="cni0", peer_netnsid=i, peer_ifindex=2,
                      peer_netns_path=f"/run/netns/cni-{cid[:8]}")
             for i, cid in enumerate(draw(st.lists(st.sampled_from(CIDS), unique=True, max_size=4)))]
    chains, rules = [], []
    for cid in draw(st.lists(st.sampled_from(CIDS), unique=True, max_size=4)):
        name = cni_chain_name("k8s-pod-network", cid)
        ip = draw(st.sampled_from(IPS))
        chains.append(IptablesChain("nat", name, "k8s-pod-network", cid, jumps=(f"-A POSTROUTING -s {ip} -j {name}",)))
        if draw(st.booleans()):
            rules.append(HostportRule("nat", "CNI-HOSTPORT-DNAT", f"-A CNI-HOSTPORT-DNAT -j CNI-DN-{cid[:24]}",
                                      "k8s-pod-network", cid, f"CNI-DN-{cid[:24]}"))
    inventory = Inventory(taken_at=NOW, pod_dirs=tuple(dirs), ip_reservations=tuple(reservations),
                          cni_cache=tuple(caches), netns=tuple(netns), veths=tuple(veths), chains=tuple(chains),
                          hostport_rules=tuple(rules))
    age = draw(st.sampled_from([0, 0, 30, 300]))
    desired = DesiredState(node="n1", pods=tuple(pods), source="fuzz", fetched_at=NOW - timedelta(seconds=age))
    return Scenario(inventory, desired)


def bound_to_live_pods(s: Scenario) -> dict[str, str]:
    """Resource ids that a live pod certainly uses, by the design's rules, with the rule that binds each."""
    inv, pods = s.inventory, s.desired.pods
    holding = [p for p in pods if p.state is not OwnerState.TERMINAL]
    bound: dict[str, str] = {}
    for p in pods:
        for uid in (p.uid, p.static_uid):
            if uid:
                bound[f"{KUBELET}/{uid}"] = "the directory of a pod that exists"
    for p in holding:
        for d in inv.pod_dirs:
            if d.uid in (p.uid, p.static_uid):
                for v in d.volumes:
                    if v.mounted:
                        bound[v.path] = f"a volume of {p.state.value} pod {p.uid}"
    claimed = {ip for p in holding if not p.host_network for ip in p.pod_ips}
    live_cids: set[str] = set()
    for r in inv.ip_reservations:
        if r.ip in claimed:
            bound[f"{r.network}/{r.ip}"] = "an address a live pod's status claims"
            if r.container_id:
                live_cids.add(r.container_id)
    by_uid = {u: p for p in holding for u in (p.uid, p.static_uid) if u}
    for c in inv.cni_cache:
        pod = by_uid.get(c.pod_uid or "")
        if pod is None:
            continue
        starting = pod.state is not OwnerState.LIVE or not pod.pod_ips
        if starting or set(c.ips) & set(pod.pod_ips):
            live_cids.add(c.container_id)
    for ns in inv.netns:
        if ns.mounted and set(ns.addresses) & claimed:
            bound[ns.path] = "a namespace holding an address a live pod claims"
    for cid in live_cids:
        why = f"part of sandbox {cid[:8]}, which a live pod uses"
        for r in inv.ip_reservations:
            if r.container_id == cid:
                bound[f"{r.network}/{r.ip}"] = why
        for c in inv.cni_cache:
            if c.container_id == cid:
                bound[c.path] = why
                if c.netns:
                    live_ns = [n for n in inv.netns if n.path == c.netns and n.mounted]
                    for n in live_ns:
                        bound[n.path] = why
        for ch in inv.chains:
            if ch.container_id == cid:
                bound[ch.name] = why
        for rule in inv.hostport_rules:
            if rule.container_id == cid:
                bound[hostport_rule_id(rule)] = why
    live_paths = {p for p, _ in bound.items() if p.startswith("/run/netns/")}
    for link in inv.veths:
        if link.peer_netns_path in live_paths:
            bound[link.name] = "the host end of a live namespace's veth"
    return bound


def _check_pipeline(s: Scenario) -> None:
    findings = correlate(s.inventory, s.desired, now=NOW, policy=CorrelationPolicy(min_age_seconds=60))
    blast_radius_refusal(findings, s.desired, BlastRadius())
    bound = bound_to_live_pods(s)
    for f in findings:
        if f.cls.is_residue and f.id in bound:
            raise Violation(f"{f.cls.value} {f.id}: {bound[f.id]}; evidence: {'; '.join(f.evidence)}")
    eager = PhasePolicy(consecutive_scans=1, grace_seconds=0)
    transitions = reconcile({}, findings, identities(s.inventory), now=NOW.timestamp(), policy=eager)
    for t in transitions:
        if t.item.phase is Phase.MARKED and t.item.resource_id in bound:
            raise Violation(f"marked {t.item.key}: {bound[t.item.resource_id]}")
    for f in findings:
        _expect(f.cls is not FindingClass.IN_USE or f.owner_state is not OwnerState.ABSENT,
                f"in use by an absent owner: {f.id}")


TARGETS: tuple[Target, ...] = (
    Target("mountinfo", _mountinfo(), _check_mountinfo),
    Target("ipam_reservation", _reservation(), _check_reservation, rejects=(ValueError,)),
    Target("cni_cache_entry", _cache_entry(), _check_cache_entry, rejects=(ValueError,)),
    Target("iptables_save", _iptables(), _check_iptables),
    Target("pods_file", _pods_file(), _check_pods_file, rejects=(SourceError,)),
    Target("pod_object", _pod_object(), _check_pod_object, rejects=(ValueError,)),
    Target("netns_name", _netns_name(), _check_netns_name),
    Target("link_dump", _link_dump(), _check_link_dump, rejects=(NetlinkError,)),
    Target("ledger_roundtrip", _ledger_item(), _check_ledger),
    Target("correlate_plan", _scenario(), _check_pipeline),
    Target("agent_config", _yaml_text(_CONFIG_KEYS, lambda _k, v: v, _VALID_CONFIG), _check_agent_config,
           rejects=(ValueError,)),
    Target("kubeconfig", _yaml_text(_KUBECONFIG_KEYS, _kubeconfig_shape, _VALID_KUBECONFIG), _check_kubeconfig,
           rejects=(KubeError,)),
    Target("static_pod_manifest", _yaml_text(_MANIFEST_KEYS, _manifest_shape, _VALID_MANIFEST),
           _check_static_manifest, rejects=(ValueError,)),
    Target("ip_range_window", _range_window(), _check_range_window),
)
