"""The deployment manifests and the Helm chart, checked offline.

Every built-in object, whether from a raw file in deploy/, from `kubectl kustomize deploy/` or from
`helm template`, is validated against the Kubernetes OpenAPI schemas that kubernetes-validate ships
(strict: unknown fields are errors) for the oldest and newest Kubernetes versions we claim. The
ServiceMonitor is a CRD (monitoring.coreos.com): its schema comes from the Prometheus Operator's CRD, which
kubernetes-validate does not ship, so its structure is checked here by hand against the Service it scrapes.
The schemas do not carry the API server's cross-field rules, so the one that bites this DaemonSet
(Bidirectional mount propagation only in privileged containers) is checked here too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from nodegc.cli import build_parser
from tests.deploy.conftest import CHART, DEPLOY, run

Obj = dict[str, Any]

NAMESPACE = "nodegc-system"
IMAGE = "nodegc:0.1.0"
# Chart.yaml says kubeVersion >=1.25; the newest is the newest schema set the package ships.
K8S_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
# Labels only the chart sets (release bookkeeping); everything else must be identical to the manifests.
CHART_ONLY_LABELS = {"app.kubernetes.io/instance", "app.kubernetes.io/managed-by",
                     "app.kubernetes.io/version", "helm.sh/chart"}
# Pod annotations only the chart sets (kustomize cannot hash the ConfigMap into the pod template).
CHART_ONLY_POD_ANNOTATIONS = {"checksum/config"}

RELABEL_ACTIONS = {"replace", "keep", "drop", "labelmap", "labeldrop", "labelkeep", "hashmod", "lowercase",
                   "uppercase", "keepequal", "dropequal"}
AGENT_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]},
]
CONTROLLER_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]
LEADER_ELECTION_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "patch"]},
]
# mountPath -> (hostPath, hostPath type, mountPropagation, readOnly)
AGENT_MOUNTS = {
    "/var/lib/kubelet": ("/var/lib/kubelet", "Directory", "Bidirectional", False),
    "/run/netns": ("/run/netns", "DirectoryOrCreate", "Bidirectional", False),
    # containerd's CRI socket and state dir in one hostPath; HostToContainer: the agent's own rootfs lives
    # below it on the node, so Bidirectional would nest the container's mounts back into it.
    "/run/containerd": ("/run/containerd", "Directory", "HostToContainer", False),
    # The node's cgroup tree, read-write (empty container cgroups go with their task bundles): the pod's own
    # /sys/fs/cgroup is its cgroup namespace's view on cgroup v2.
    "/host/sys/fs/cgroup": ("/sys/fs/cgroup", "Directory", "HostToContainer", False),
    "/var/lib/cni": ("/var/lib/cni", "DirectoryOrCreate", None, False),
    "/etc/cni/net.d": ("/etc/cni/net.d", "DirectoryOrCreate", None, True),
    "/opt/cni/bin": ("/opt/cni/bin", "DirectoryOrCreate", None, True),
    "/etc/kubernetes/manifests": ("/etc/kubernetes/manifests", "DirectoryOrCreate", None, True),
    "/var/log/pods": ("/var/log/pods", "DirectoryOrCreate", None, False),
    "/run/xtables.lock": ("/run/xtables.lock", "FileOrCreate", None, False),
    "/var/lib/nodegc": ("/var/lib/nodegc", "DirectoryOrCreate", None, False),
    "/tmp": (None, None, None, False),  # an emptyDir: the root filesystem is read-only
    "/etc/nodegc": (None, None, None, True),  # the config file, from a ConfigMap
}
AGENT_ARGS = ["agent", "--config=/etc/nodegc/agent.yaml", "--node=$(NODE_NAME)", "--metrics-address=0.0.0.0:9808",
              "--state-dir=/var/lib/nodegc", "--runtime-endpoint=unix:///run/containerd/containerd.sock",
              "--runtime-state-dir=/run/containerd", "--runc-root=/run/containerd/runc",
              "--cgroup-root=/host/sys/fs/cgroup"]
CONTROLLER_ARGS = ["controller", "--metrics-address=0.0.0.0:9809", f"--lease-namespace={NAMESPACE}"]


MONITORING_ON = ("--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true",
                 "--set", "grafanaDashboard.enabled=true")

# --- loading and rendering -------------------------------------------------------------------------


def load_all(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def raw_manifest_files() -> list[Path]:
    rules = DEPLOY / "monitoring" / "rules"  # Prometheus rule files, not Kubernetes objects
    return sorted(p for p in DEPLOY.rglob("*.yaml")
                  if CHART not in p.parents and rules not in p.parents and p.name != "kustomization.yaml")


def by_key(objs: Iterable[Obj]) -> dict[tuple[str, str, str], Obj]:
    out: dict[tuple[str, str, str], Obj] = {}
    for o in objs:
        key = (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        assert key not in out, f"duplicate object {key}"
        out[key] = o
    return out


def one(objs: Iterable[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def validate(objs: Iterable[Obj]) -> None:
    """Schema-validate built-ins; check CRD objects structurally (see `check_service_monitor`)."""
    for o in objs:
        if (o["apiVersion"], o["kind"]) in CRD_KINDS:
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                kubernetes_validate.validate(o, K8S_VERSIONS[-1], strict=True)
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(o, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{o['kind']}/{o['metadata']['name']} is invalid for Kubernetes {version}:"
                            f" {e.message} at {'/'.join(str(p) for p in e.path)}")


@pytest.fixture(scope="session")
def kustomized(kubectl: str) -> list[Obj]:
    """The base and the monitoring set, as `kubectl apply -k` would send them."""
    return (load_all(run([kubectl, "kustomize", str(DEPLOY)]))
            + load_all(run([kubectl, "kustomize", str(DEPLOY / "monitoring")])))


def helm_template(helm: str, *args: str) -> list[Obj]:
    return load_all(run([helm, "template", "nodegc", str(CHART), "--namespace", NAMESPACE, *args]))


@pytest.fixture(scope="session")
def charted(helm: str) -> list[Obj]:
    """The chart with its defaults plus the monitoring objects (off by default, like the base) and the
    Namespace (the base creates it; the chart leaves it to --create-namespace by default)."""
    return helm_template(helm, *MONITORING_ON, "--set", "namespace.create=true")


def pod_spec(o: Obj) -> Obj:
    spec: Obj = o["spec"]["template"]["spec"]
    return spec


def containers(o: Obj) -> Iterator[Obj]:
    yield from pod_spec(o).get("initContainers", [])
    yield from pod_spec(o)["containers"]


# --- schema validation -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", raw_manifest_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_raw_manifest_files_validate(path: Path) -> None:
    objs = load_all(path.read_text())
    assert objs, f"{path} holds no object"
    validate(objs)


def test_kustomize_output_validates(kustomized: list[Obj]) -> None:
    validate(kustomized)
    assert {o["kind"] for o in kustomized} == {
        "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service",
        "DaemonSet", "Deployment", "ServiceMonitor", "PrometheusRule", "ConfigMap", "PodDisruptionBudget"}
    for o in kustomized:
        if o["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding"}:
            assert o["metadata"]["namespace"] == NAMESPACE, o["metadata"]["name"]


def test_helm_lint(helm: str) -> None:
    run([helm, "lint", "--strict", str(CHART)])
    run([helm, "lint", "--strict", str(CHART), *MONITORING_ON])


def test_chart_renders_valid_objects(charted: list[Obj], helm: str) -> None:
    validate(charted)
    defaults = helm_template(helm)
    assert not {"ServiceMonitor", "PrometheusRule"} & {o["kind"] for o in defaults}
    # The one ConfigMap by default is the agent's config file, not the (optional) dashboard.
    assert [o["metadata"]["name"] for o in defaults if o["kind"] == "ConfigMap"] == ["nodegc-agent-config"]
    validate(defaults)


def test_chart_options_render_valid_objects(helm: str) -> None:
    objs = helm_template(
        helm, "--set", "agent.dryRun=true", "--set", "agent.paths.kubeletRoot=/var/lib/k0s/kubelet",
        "--set", "agent.paths.cniBinDir=/usr/libexec/cni", "--set", "agent.paths.staticPodDir=/etc/k0s/manifests",
        "--set", "agent.extraArgs={--interval=60,--grace=300}",
        "--set", "image.tag=dev", "--set", "namespace.create=false", "--set", "fullnameOverride=gc")
    validate(objs)
    assert "Namespace" not in {o["kind"] for o in objs}
    agent = one(objs, "DaemonSet", "gc-agent")
    c = pod_spec(agent)["containers"][0]
    assert c["image"] == "nodegc:dev"
    assert c["args"] == [*AGENT_ARGS, "--kubelet-root=/var/lib/k0s/kubelet", "--cni-bin-dir=/usr/libexec/cni",
                         "--static-pod-dir=/etc/k0s/manifests", "--dry-run", "--interval=60", "--grace=300"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    hosts = {v["name"]: v["hostPath"]["path"] for v in pod_spec(agent)["volumes"] if "hostPath" in v}
    assert mounts["kubelet-root"] == hosts["kubelet-root"] == "/var/lib/k0s/kubelet"
    assert mounts["cni-bin"] == hosts["cni-bin"] == "/usr/libexec/cni"
    assert mounts["static-pods"] == hosts["static-pods"] == "/etc/k0s/manifests"
    parse_agent_args(c["args"])


# --- the chart and the manifests are the same objects ----------------------------------------------


def strip_chart_labels(o: Obj) -> Obj:
    labels = o["metadata"].get("labels", {})
    for k in CHART_ONLY_LABELS:
        labels.pop(k, None)
    template = o.get("spec", {}).get("template", {}).get("metadata")
    if template is not None:
        annotations = template.get("annotations", {})
        for k in CHART_ONLY_POD_ANNOTATIONS:
            annotations.pop(k, None)
        if not annotations:
            template.pop("annotations", None)
    return o


def test_chart_defaults_render_the_manifests(charted: list[Obj], kustomized: list[Obj]) -> None:
    chart = by_key(strip_chart_labels(o) for o in charted)
    manifests = by_key(kustomized)
    assert sorted(chart) == sorted(manifests)
    for key, want in manifests.items():
        assert chart[key] == want, f"{key}: the chart's default differs from deploy/"


# --- least privilege -------------------------------------------------------------------------------


@pytest.fixture(params=["kustomize", "helm"])
def rendered(request: pytest.FixtureRequest) -> list[Obj]:
    name = "kustomized" if request.param == "kustomize" else "charted"
    objs: list[Obj] = request.getfixturevalue(name)
    return objs


def test_rbac_is_exactly_least_privilege(rendered: list[Obj]) -> None:
    assert one(rendered, "ClusterRole", "nodegc-agent")["rules"] == AGENT_RULES
    assert one(rendered, "ClusterRole", "nodegc-controller")["rules"] == CONTROLLER_RULES
    role = one(rendered, "Role", "nodegc-controller-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == LEADER_ELECTION_RULES
    roles = [o for o in rendered if o["kind"] in {"ClusterRole", "Role"}]
    assert len(roles) == 3
    for r in roles:
        for rule in r["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in rule.get(field, []), f"wildcard in {r['metadata']['name']}: {rule}"
            assert not {"escalate", "bind", "impersonate", "delete", "deletecollection"} & set(rule["verbs"])


def test_bindings_grant_each_role_to_its_own_service_account(rendered: list[Obj]) -> None:
    expected = {
        ("ClusterRoleBinding", "nodegc-agent"): ("ClusterRole", "nodegc-agent", "nodegc-agent"),
        ("ClusterRoleBinding", "nodegc-controller"):
            ("ClusterRole", "nodegc-controller", "nodegc-controller"),
        ("RoleBinding", "nodegc-controller-leader-election"):
            ("Role", "nodegc-controller-leader-election", "nodegc-controller"),
    }
    bindings = {(o["kind"], o["metadata"]["name"]): o for o in rendered if o["kind"].endswith("Binding")}
    assert set(bindings) == set(expected)
    for key, (role_kind, role_name, sa) in expected.items():
        b = bindings[key]
        assert (b["roleRef"]["kind"], b["roleRef"]["name"]) == (role_kind, role_name)
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    assert pod_spec(one(rendered, "DaemonSet", "nodegc-agent"))["serviceAccountName"] == "nodegc-agent"
    controller = one(rendered, "Deployment", "nodegc-controller")
    assert pod_spec(controller)["serviceAccountName"] == "nodegc-controller"


# --- the agent DaemonSet ---------------------------------------------------------------------------


def parse_agent_args(args: list[str]) -> None:
    """The flags the manifests pass exist in the CLI (argparse exits on an unknown one)."""
    expanded = [a.replace("$(NODE_NAME)", "node-a") for a in args]
    ns = build_parser().parse_args(expanded)
    assert ns.command == "agent"


def test_agent_mounts_exactly_the_node_paths(rendered: list[Obj]) -> None:
    ds = one(rendered, "DaemonSet", "nodegc-agent")
    spec = pod_spec(ds)
    (c,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    seen = {}
    for m in c["volumeMounts"]:
        v = volumes[m["name"]]
        host = v.get("hostPath", {})
        seen[m["mountPath"]] = (host.get("path"), host.get("type"), m.get("mountPropagation"),
                                bool(m.get("readOnly", False)))
    assert seen == AGENT_MOUNTS
    assert set(volumes) == {m["name"] for m in c["volumeMounts"]}
    assert volumes["tmp"]["emptyDir"]["medium"] == "Memory"


def test_bidirectional_propagation_only_where_the_api_server_allows_it(rendered: list[Obj]) -> None:
    """The API server rejects Bidirectional in a container that is not privileged; schemas do not know."""
    for o in rendered:
        if o["kind"] not in {"DaemonSet", "Deployment"}:
            continue
        for c in containers(o):
            bidirectional = [m["mountPath"] for m in c.get("volumeMounts", [])
                             if m.get("mountPropagation") == "Bidirectional"]
            if bidirectional:
                privileged = c.get("securityContext", {}).get("privileged")
                assert privileged is True, (o["metadata"]["name"], bidirectional)


def test_agent_pod_shape(rendered: list[Obj]) -> None:
    ds = one(rendered, "DaemonSet", "nodegc-agent")
    spec = pod_spec(ds)
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    # The node's pid namespace: shims and task init processes are judged from /proc (runtime leftovers).
    assert spec["hostPID"] is True and not spec.get("hostIPC")
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["tolerations"] == [{"operator": "Exists"}]
    (c,) = spec["containers"]
    assert c["image"] == IMAGE
    assert c["args"] == AGENT_ARGS
    parse_agent_args(c["args"])
    assert c["env"] == [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    assert c["securityContext"] == {"privileged": True, "readOnlyRootFilesystem": True}
    assert c["ports"] == [{"name": "metrics", "containerPort": 9808, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "memory" in c["resources"]["limits"] and "cpu" in c["resources"]["requests"]
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_metrics_service_and_service_monitor_reach_the_agent(rendered: list[Obj]) -> None:
    ds = one(rendered, "DaemonSet", "nodegc-agent")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    svc = one(rendered, "Service", "nodegc-agent-metrics")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 9808, "targetPort": "metrics", "protocol": "TCP"}]
    check_service_monitor(one(rendered, "ServiceMonitor", "nodegc-agent"), svc)


def check_service_monitor(sm: Obj, svc: Obj) -> None:
    """The structure Prometheus Operator needs, and that it selects the metrics Service by its labels."""
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(sm) == {"apiVersion", "kind", "metadata", "spec"}
    spec = sm["spec"]
    assert set(spec) <= {"endpoints", "selector", "namespaceSelector", "jobLabel", "targetLabels",
                         "podTargetLabels"}
    assert spec["namespaceSelector"] == {"matchNames": [svc["metadata"]["namespace"]]}
    assert set(spec["selector"]) == {"matchLabels"}
    assert spec["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    port_names = {p["name"] for p in svc["spec"]["ports"]}
    assert spec["endpoints"], "a ServiceMonitor without endpoints scrapes nothing"
    for ep in spec["endpoints"]:
        assert set(ep) <= {"port", "path", "interval", "scrapeTimeout", "scheme", "relabelings",
                           "metricRelabelings"}
        assert ep["port"] in port_names
        assert ep["path"] == "/metrics"
        assert ep["interval"].endswith("s") and ep["interval"][:-1].isdigit()
        for r in ep.get("relabelings", []):
            assert set(r) <= {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement",
                              "action"}
            assert r.get("action", "replace") in RELABEL_ACTIONS


# --- the controller Deployment ---------------------------------------------------------------------


def test_controller_is_unprivileged_and_leader_elected(rendered: list[Obj]) -> None:
    d = one(rendered, "Deployment", "nodegc-controller")
    assert d["spec"]["replicas"] == 2
    spec = pod_spec(d)
    assert not spec.get("hostNetwork") and not spec.get("hostPID")
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "volumes" not in spec
    (c,) = spec["containers"]
    assert c["image"] == IMAGE
    assert c["args"] == CONTROLLER_ARGS
    assert c["ports"] == [{"name": "metrics", "containerPort": 9809, "protocol": "TCP"}]
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}
    assert {e["name"] for e in c["env"]} == {"POD_NAME", "POD_NAMESPACE"}


def test_controller_args_exist_in_the_cli() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert commands is not None
    if "controller" not in commands:
        pytest.skip("`nodegc controller` is not in the CLI yet")
    assert parser.parse_args(CONTROLLER_ARGS).command == "controller"


def test_namespace_allows_the_privileged_agent(rendered: list[Obj]) -> None:
    ns = one(rendered, "Namespace", NAMESPACE)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"



def test_every_node_path_the_agent_reads_is_mounted_at_its_own_path(rendered: list[Obj]) -> None:
    """What the agent's flags (and their defaults) name on the node is a hostPath mounted at the same path:
    a path that is not mounted is read inside the image, where it is empty or absent, so the agent silently
    finds nothing there (no runtime, no static manifests, no pod log directories)."""
    from nodegc.inventory.cri.client import socket_path
    from nodegc.wiring import agent_from_args

    ds = one(rendered, "DaemonSet", "nodegc-agent")
    spec = pod_spec(ds)
    (c,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounted = {m["mountPath"] for m in c["volumeMounts"]
               if volumes[m["name"]].get("hostPath", {}).get("path") == m["mountPath"]}

    def covered(path: Path) -> bool:
        return any(str(path) == m or str(path).startswith(m + "/") for m in mounted)

    s = agent_from_args(build_parser().parse_args([a.replace("$(NODE_NAME)", "node-a") for a in c["args"]]))
    r = s.roots
    for path in (r.kubelet_root, r.cni_conf_dir, r.cni_data_dir, r.netns_dir, r.static_pod_dir, r.pod_log_dir,
                 s.safety.state_dir):
        assert covered(path), f"{path} is not mounted from the node"
    assert any(covered(d) for d in r.cni_bin_dirs)
    assert s.safety.runtime_endpoint is not None and s.safety.runtime_state_dir is not None
    assert covered(socket_path(s.safety.runtime_endpoint)) and covered(s.safety.runtime_state_dir)
    assert r.proc_root == Path("/proc") and spec["hostPID"] is True


def test_the_agent_removes_container_cgroups_in_the_nodes_tree(rendered: list[Obj]) -> None:
    """--cgroup-root names the node's /sys/fs/cgroup, mounted read-write: the pod's own /sys/fs/cgroup is its
    cgroup namespace's view on cgroup v2 (its own cgroup, none of the node's containers), where a dead
    container's cgroup is never found."""
    from nodegc.wiring import agent_from_args

    ds = one(rendered, "DaemonSet", "nodegc-agent")
    spec = pod_spec(ds)
    (c,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    s = agent_from_args(build_parser().parse_args([a.replace("$(NODE_NAME)", "node-a") for a in c["args"]]))
    root = s.safety.cgroup_root
    assert root is not None and root != Path("/sys/fs/cgroup")
    (m,) = [m for m in c["volumeMounts"] if m["mountPath"] == str(root)]
    assert volumes[m["name"]]["hostPath"] == {"path": "/sys/fs/cgroup", "type": "Directory"}
    assert not m.get("readOnly") and m.get("mountPropagation") == "HostToContainer"
