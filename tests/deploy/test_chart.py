"""The Helm chart as a platform team installs it: namespace conventions, the values schema, NOTES, the
agent's config file, the controller's Service, probes and PodDisruptionBudget, both ServiceMonitors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from nodegc.config import apply
from nodegc.flags import build_parser
from nodegc.wiring import agent_from_args
from tests.deploy.conftest import CHART, run
from tests.deploy.test_manifests import (
    NAMESPACE,
    Obj,
    check_service_monitor,
    helm_template,
    load_all,
    one,
    pod_spec,
    validate,
)


def template(helm: str, *args: str) -> list[Obj]:
    return load_all(run([helm, "template", "nodegc", str(CHART), *args]))


def template_fails(helm: str, *args: str) -> str:
    proc = subprocess.run([helm, "template", "nodegc", str(CHART), *args], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode != 0, f"helm template {' '.join(args)} should have failed"
    return proc.stderr


@pytest.mark.parametrize("namespace", [None, NAMESPACE])
def test_no_namespace_object_by_default(helm: str, namespace: str | None) -> None:
    """`helm template` without -n, and `helm install -n X --create-namespace`, never get a Namespace."""
    objs = template(helm, *(["--namespace", namespace] if namespace else []))
    validate(objs)
    assert "Namespace" not in {o["kind"] for o in objs}
    expected = namespace or "default"
    for o in objs:
        if o["kind"] not in {"ClusterRole", "ClusterRoleBinding"}:
            assert o["metadata"]["namespace"] == expected, o["metadata"]["name"]


def test_the_namespace_only_when_asked(helm: str) -> None:
    objs = template(helm, "--namespace", "gc", "--set", "namespace.create=true")
    ns = one(objs, "Namespace", "gc")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "agent.metricsPrt=9808"], "metricsPrt"),
    (["--set", "agnet.dryRun=true"], "agnet"),
    (["--set", "agent.config.intervall=30s"], "intervall"),
    (["--set", "agent.metricsPort=70000"], "metricsPort"),
    (["--set", "controller.metricsPort=0"], "metricsPort"),
    (["--set", "agent.config.maxShare=2"], "maxShare"),
    (["--set", "agent.config.consecutiveScans=0"], "consecutiveScans"),
    (["--set", "agent.config.interval=soon"], "interval"),
    (["--set", "agent.dryRun=maybe"], "dryRun"),
    (["--set", "image.pullPolicy=Sometimes"], "pullPolicy"),
    (["--set", "image.repository="], "repository"),
    (["--set", "controller.replicas=-1"], "replicas"),
])
def test_schema_rejects_bad_values(helm: str, args: list[str], message: str) -> None:
    err = template_fails(helm, *args)
    assert message in err, err


def test_helm_lint_with_every_option(helm: str) -> None:
    run([helm, "lint", "--strict", str(CHART), "--set", "serviceMonitor.enabled=true", "--set",
         "agent.dryRun=true", "--set", "agent.config.interval=1m", "--set", "namespace.create=true"])


@pytest.mark.parametrize(("dry_run", "mode"), [(False, "Mode: RECLAIM"), (True, "Mode: REPORT ONLY")])
def test_notes_say_the_mode_and_how_to_check(helm: str, dry_run: bool, mode: str) -> None:
    out = run([helm, "install", "nodegc", str(CHART), "--dry-run=client", "--namespace", NAMESPACE,
               "--set", f"agent.dryRun={str(dry_run).lower()}"])
    notes = out[out.index("NOTES:"):]
    assert mode in notes
    assert f"kubectl -n {NAMESPACE} rollout status daemonset/nodegc-agent" in notes
    assert "nodegc scan" in notes and "kubectl describe node" in notes


def _agent_config(objs: list[Obj], tmp_path: Path) -> tuple[Path, Obj]:
    cm = one(objs, "ConfigMap", "nodegc-agent-config")
    path = tmp_path / "agent.yaml"
    path.write_text(cm["data"]["agent.yaml"])
    return path, cm


def test_the_config_map_is_the_agents_config(helm: str, tmp_path: Path) -> None:
    objs = helm_template(helm, "--set", "agent.config.interval=1m", "--set", "agent.config.consecutiveScans=5",
                         "--set", "agent.config.grace=10m", "--set", "agent.config.maxShare=0.25",
                         "--set-json", 'agent.config.markRules=["volume_mount=5,10m"]')
    validate(objs)
    path, _ = _agent_config(objs, tmp_path)
    ds = one(objs, "DaemonSet", "nodegc-agent")
    (c,) = pod_spec(ds)["containers"]
    argv = [a.replace("$(NODE_NAME)", "node-a") for a in c["args"]]
    argv = [f"--config={path}" if a.startswith("--config=") else a for a in argv]
    parser = build_parser()
    args = parser.parse_args(argv)
    applied = apply(parser, "agent", argv, args, path)
    s = agent_from_args(args)
    assert sorted(applied) == ["consecutiveScans", "grace", "interval", "markRules", "maxShare"]
    assert (s.interval, s.phases.consecutive_scans, s.phases.grace_seconds, s.safety.max_share) == (
        60.0, 5, 600.0, 0.25)
    # The config file is mounted where the flag says, and a change rolls the pods.
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["config"] == "/etc/nodegc" and "--config=/etc/nodegc/agent.yaml" in c["args"]
    before = ds["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    other = one(helm_template(helm), "DaemonSet", "nodegc-agent")
    assert other["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != before


def test_default_config_map_keeps_the_defaults(helm: str, tmp_path: Path) -> None:
    path, _ = _agent_config(helm_template(helm), tmp_path)
    parser = build_parser()
    argv = ["agent", f"--config={path}"]
    args = parser.parse_args(argv)
    assert apply(parser, "agent", argv, args, path) == []
    assert agent_from_args(args) == agent_from_args(parser.parse_args(["agent"]))


def test_agent_scheduling_values(helm: str) -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}}
    objs = helm_template(helm, "--set-json", f"agent.affinity={_json(affinity)}",
                         "--set", "agent.podAnnotations.team=platform")
    validate(objs)
    spec = pod_spec(one(objs, "DaemonSet", "nodegc-agent"))
    assert spec["affinity"] == affinity
    assert spec["tolerations"] == [{"operator": "Exists"}]  # every taint, by default
    assert spec["priorityClassName"] == "system-node-critical"
    meta = one(objs, "DaemonSet", "nodegc-agent")["spec"]["template"]["metadata"]
    assert meta["annotations"]["team"] == "platform"


def test_controller_service_probes_and_budget(helm: str) -> None:
    objs = helm_template(helm, "--set", "serviceMonitor.enabled=true", "--set", "controller.podAnnotations.a=b")
    validate(objs)
    d = one(objs, "Deployment", "nodegc-controller")
    labels = d["spec"]["template"]["metadata"]["labels"]
    assert d["spec"]["template"]["metadata"]["annotations"] == {"a": "b"}
    (c,) = pod_spec(d)["containers"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    svc = one(objs, "Service", "nodegc-controller-metrics")
    assert svc["spec"]["selector"].items() <= labels.items()
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9809, "targetPort": "metrics", "protocol": "TCP"}]
    check_service_monitor(one(objs, "ServiceMonitor", "nodegc-controller"), svc)
    pdb = one(objs, "PodDisruptionBudget", "nodegc-controller")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    off = helm_template(helm, "--set", "controller.podDisruptionBudget.enabled=false")
    assert "PodDisruptionBudget" not in {o["kind"] for o in off}


def test_image_repository_and_tag_are_values(helm: str) -> None:
    objs = helm_template(helm, "--set", "image.repository=registry.example.com/platform/nodegc",
                         "--set", "image.tag=0.1.0-rc1")
    for kind, name in (("DaemonSet", "nodegc-agent"), ("Deployment", "nodegc-controller")):
        (c,) = pod_spec(one(objs, kind, name))["containers"]
        assert c["image"] == "registry.example.com/platform/nodegc:0.1.0-rc1"


def _json(value: object) -> str:
    import json

    return json.dumps(value)


def test_values_file_is_documented_by_the_schema() -> None:
    """Every key of values.yaml is in values.schema.json (so the strict schema never rejects a default)."""
    import json

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(v: object, s: dict[str, object], where: str) -> None:
        if not isinstance(v, dict) or s.get("type") != "object" or "properties" not in s:
            return
        props = s["properties"]
        assert isinstance(props, dict)
        for k, sub in v.items():
            assert k in props, f"{where}.{k} is not in values.schema.json"
            walk(sub, props[k], f"{where}.{k}")

    walk(values, schema, "values")


def test_schema_knows_every_agent_config_key() -> None:
    """A new `nodegc agent` flag is a config key at once; the chart's schema must let it through."""
    import json

    from nodegc.config import keys, subcommand_parser

    schema = json.loads((CHART / "values.schema.json").read_text())
    allowed = set(schema["properties"]["agent"]["properties"]["config"]["properties"])
    agent_keys = set(keys(subcommand_parser(build_parser(), "agent")))
    assert agent_keys - allowed == set(), "add these to agent.config in values.schema.json"
    assert allowed - agent_keys == set(), "values.schema.json allows config keys the agent does not know"


# --- the container runtime -------------------------------------------------------------------------


def _runtime_view(objs: list[Obj]) -> tuple[Obj, dict[str, tuple[str, str | None]], dict[str, str]]:
    """The agent container, its hostPath mounts (mountPath -> (hostPath, propagation)), and its volumes' types."""
    spec = pod_spec(one(objs, "DaemonSet", "nodegc-agent"))
    (c,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: (volumes[m["name"]]["hostPath"]["path"], m.get("mountPropagation"))
              for m in c["volumeMounts"] if "hostPath" in volumes[m["name"]]}
    types = {v["hostPath"]["path"]: v["hostPath"]["type"] for v in volumes.values() if "hostPath" in v}
    return c, mounts, types


def _agent_settings(c: Obj) -> tuple[str | None, Path | None]:
    argv = [a.replace("$(NODE_NAME)", "node-a") for a in c["args"]]
    s = agent_from_args(build_parser().parse_args(argv))
    return s.safety.runtime_endpoint, s.safety.runtime_state_dir


def _covered(path: str, mounts: dict[str, tuple[str, str | None]]) -> bool:
    """`path` inside the container is the node's same path, through a hostPath mounted at its own path."""
    return any((path == m or path.startswith(m + "/")) and host == m for m, (host, _) in mounts.items())


def test_the_agent_reads_the_runtime_it_mounts(helm: str) -> None:
    """containerd by default: the socket and the state dir the agent is told are mounted, at the node's paths,
    in one hostPath, seeing the runtime's mounts (HostToContainer); /proc is the node's (hostPID)."""
    objs = helm_template(helm)
    validate(objs)
    c, mounts, types = _runtime_view(objs)
    endpoint, state = _agent_settings(c)
    assert endpoint == "unix:///run/containerd/containerd.sock"
    assert state == Path("/run/containerd")
    assert _covered("/run/containerd/containerd.sock", mounts) and _covered(str(state), mounts)
    assert mounts["/run/containerd"] == ("/run/containerd", "HostToContainer")
    assert types["/run/containerd"] == "Directory"
    assert [m for m in mounts if m.startswith("/run/containerd")] == ["/run/containerd"]
    assert pod_spec(one(objs, "DaemonSet", "nodegc-agent"))["hostPID"] is True


def test_cri_o_values_mount_its_socket_and_no_state_dir(helm: str) -> None:
    objs = helm_template(helm, "--set", "agent.runtime.endpoint=unix:///var/run/crio/crio.sock",
                         "--set", "agent.runtime.stateDir=")
    validate(objs)
    c, mounts, types = _runtime_view(objs)
    assert "--runtime-endpoint=unix:///var/run/crio/crio.sock" in c["args"]
    assert "--runtime-state-dir=none" in c["args"]
    endpoint, state = _agent_settings(c)
    assert endpoint == "unix:///var/run/crio/crio.sock" and state is None
    assert mounts["/var/run/crio"] == ("/var/run/crio", "HostToContainer")
    assert types["/var/run/crio"] == "Directory"
    assert _covered("/var/run/crio/crio.sock", mounts)
    assert not any(m.startswith("/run/containerd") for m in mounts)


def test_a_socket_outside_the_state_dir_gets_its_own_mount(helm: str) -> None:
    objs = helm_template(helm, "--set", "agent.runtime.endpoint=unix:///var/run/k0s/containerd.sock",
                         "--set", "agent.runtime.stateDir=/run/k0s/containerd")
    validate(objs)
    c, mounts, _ = _runtime_view(objs)
    endpoint, state = _agent_settings(c)
    assert endpoint == "unix:///var/run/k0s/containerd.sock" and state == Path("/run/k0s/containerd")
    assert mounts["/run/k0s/containerd"] == ("/run/k0s/containerd", "HostToContainer")
    assert mounts["/var/run/k0s"] == ("/var/run/k0s", "HostToContainer")
    assert _covered("/var/run/k0s/containerd.sock", mounts) and _covered(str(state), mounts)


def test_no_runtime_mounts_nothing_of_it(helm: str) -> None:
    objs = helm_template(helm, "--set", "agent.runtime.endpoint=", "--set", "agent.runtime.stateDir=")
    validate(objs)
    c, mounts, _ = _runtime_view(objs)
    assert _agent_settings(c) == (None, None)
    assert set(mounts) == {"/var/lib/kubelet", "/run/netns", "/var/lib/cni", "/etc/cni/net.d", "/opt/cni/bin",
                           "/etc/kubernetes/manifests", "/var/log/pods", "/run/xtables.lock", "/var/lib/nodegc"}


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "agent.runtime.endpoint=tcp://127.0.0.1:1234"], "endpoint"),
    (["--set", "agent.runtime.endpoint=/run/containerd/containerd.sock"], "endpoint"),
    (["--set", "agent.runtime.stateDir=run/containerd"], "stateDir"),
    (["--set", "agent.runtime.socket=/run/crio"], "socket"),
    # The config file cannot name another runtime than the one mounted: the flags would override it anyway.
    (["--set", "agent.config.runtimeEndpoint=unix:///var/run/crio/crio.sock"], "agent.runtime.endpoint"),
    (["--set", "agent.config.runtimeStateDir=none"], "agent.runtime.stateDir"),
])
def test_runtime_values_are_checked(helm: str, args: list[str], message: str) -> None:
    err = template_fails(helm, *args)
    assert message in err, err


def test_the_runc_root_is_inside_the_state_dir_it_mounts(helm: str) -> None:
    """--runc-root follows the state dir (containerd's `<state>/runc`, k3s's too), is `none` without one, and a
    runc root outside the mounted state dir, or one set in agent.config, is refused at template time."""
    c, _, _ = _runtime_view(helm_template(helm))
    assert "--runc-root=/run/containerd/runc" in c["args"]
    c, mounts, _ = _runtime_view(helm_template(helm, "--set", "agent.runtime.stateDir=/run/k3s/containerd",
                                               "--set", "agent.runtime.endpoint=unix:///run/k3s/containerd/containerd.sock"))
    assert "--runc-root=/run/k3s/containerd/runc" in c["args"]
    assert _covered("/run/k3s/containerd/runc", mounts)
    argv = [a.replace("$(NODE_NAME)", "node-a") for a in c["args"]]
    assert agent_from_args(build_parser().parse_args(argv)).safety.runc_root == Path("/run/k3s/containerd/runc")
    c, _, _ = _runtime_view(helm_template(helm, "--set", "agent.runtime.stateDir="))
    assert "--runc-root=none" in c["args"]
    assert "not inside" in template_fails(helm, "--set", "agent.runtime.runcRoot=/run/runc")
    assert "agent.config.runcRoot" in template_fails(helm, "--set", "agent.config.runcRoot=/run/containerd/runc")


def test_the_nodes_cgroup_tree_is_mounted_where_cgroup_root_points(helm: str) -> None:
    """agent.paths.cgroupDir is the node's cgroup tree, mounted read-write at /host<cgroupDir> and passed as
    --cgroup-root; without it, or without a state dir (no task bundle is reclaimed), cgroups are not touched."""
    c, mounts, types = _runtime_view(helm_template(helm, "--set", "agent.paths.cgroupDir=/run/cgroup2"))
    assert "--cgroup-root=/host/run/cgroup2" in c["args"]
    assert mounts["/host/run/cgroup2"] == ("/run/cgroup2", "HostToContainer") and types["/run/cgroup2"] == "Directory"
    for values in (("--set", "agent.paths.cgroupDir="), ("--set", "agent.runtime.stateDir=")):
        objs = helm_template(helm, *values)
        validate(objs)
        c, mounts, _ = _runtime_view(objs)
        assert "--cgroup-root=none" in c["args"], values
        assert not any(m.startswith("/host") for m in mounts), values
    err = template_fails(helm, "--set", "agent.config.cgroupRoot=/sys/fs/cgroup")
    assert "agent.paths.cgroupDir" in err, err
