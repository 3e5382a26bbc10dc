"""The kubelet's static pod manifests (`staticPodPath`, default /etc/kubernetes/manifests).

A static pod runs from its file whether or not the API shows its mirror pod; while a manifest declares a
pod, nothing that may be that pod's is residue. The kubelet names such a pod's directory and CNI args by
a config hash that cannot be recomputed outside the kubelet, so the planner ties a directory to a
manifest by the manifest's explicit uid or by its container names. A file that cannot be read or parsed
is kept as a manifest that may declare anything: uncertainty protects.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodegc.hostio.files import FileReadError, read_small_file
from nodegc.model.resources import Kind, ReadProblem, StaticPodManifest

MAX_MANIFEST_BYTES = 1 << 20


def scan_static_pods(static_pod_dir: Path) -> tuple[tuple[StaticPodManifest, ...], tuple[ReadProblem, ...]]:
    """Every file the kubelet would read there (it skips names starting with a dot; so do we)."""
    base = os.fsdecode(static_pod_dir)
    try:
        with os.scandir(static_pod_dir) as it:
            names = sorted(e.name for e in it if not e.name.startswith(".") and not e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return (), ()
    except OSError as e:
        problem = ReadProblem(Kind.STATIC_POD, base, f"cannot list the static pod directory: {e.strerror or e}")
        return (StaticPodManifest(path=base, namespace=None, name=None),), (problem,)
    manifests: list[StaticPodManifest] = []
    problems: list[ReadProblem] = []
    for name in names:
        path = os.path.join(base, name)
        try:
            manifests.append(_manifest(path, read_small_file(path, limit=MAX_MANIFEST_BYTES).content))
        except (FileReadError, ValueError) as e:
            if not os.path.lexists(path):
                continue  # removed since the listing
            problems.append(ReadProblem(Kind.STATIC_POD, path, f"{e}; it may declare any pod"))
            manifests.append(StaticPodManifest(path=path, namespace=None, name=None))
    return tuple(manifests), tuple(problems)


def _manifest(path: str, content: bytes) -> StaticPodManifest:
    doc = _load(content)
    if not isinstance(doc, Mapping) or doc.get("kind", "Pod") != "Pod":
        raise ValueError("not a Pod manifest")
    meta, spec = _section(doc, "metadata"), _section(doc, "spec")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("the manifest has no metadata.name")
    namespace = meta.get("namespace") or "default"
    uid = meta.get("uid")
    # Never str() of what is not a string: an alias bomb of a few hundred bytes is billions of strings.
    for key, value in (("namespace", namespace), ("uid", uid)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"metadata.{key} is not a string")
    containers: list[str] = []
    for key in ("initContainers", "containers"):
        listed = spec.get(key) or []
        if not isinstance(listed, list):
            raise ValueError(f"spec.{key} is not a list")
        for c in listed:
            if isinstance(c, Mapping) and isinstance(c.get("name"), str):
                containers.append(c["name"])
    return StaticPodManifest(path=path, namespace=namespace, name=name, uid=uid or None, containers=tuple(containers),
                             host_network=spec.get("hostNetwork") is True)


def _section(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = doc.get(key)
    return value if isinstance(value, Mapping) else {}


def _load(content: bytes) -> Any:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError("the manifest is not UTF-8") from e
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"the manifest cannot be parsed: {type(e).__name__}") from e
    import yaml  # at the first YAML manifest: a worker node has none, and the agent needs no YAML otherwise

    try:
        return yaml.safe_load(text)
    except (ValueError, yaml.YAMLError, RecursionError) as e:
        raise ValueError(f"the manifest cannot be parsed: {type(e).__name__}") from e
