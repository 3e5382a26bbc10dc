"""A snapshot file cut short: `kubectl get pods -o yaml > pods.yaml` read while it is written (the runbook has
the writer keep the file fresh in place), or left half written by a disk that filled. YAML has no closing
bracket: a prefix of the file cut at a line (or inside one) is itself a YAML mapping with `items`, the pods
before the cut and none of those after it. Before, a list without `kind` was taken as a list, so the pods
past the cut (and one cut inside its spec, whose node was lost with it) looked absent: their directories,
volumes and addresses residue. kubectl writes the list's keys in order, `kind: List` after the items, so a
list without `kind` is refused: its end is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nodegc.desired.snapshot import SnapshotSource
from nodegc.desired.source import SourceError

NODE = "n1"


def kubectl_pod(name: str) -> dict[str, Any]:
    """A pod as kubectl prints it (keys sorted, as `-o yaml` and `-o json` write them)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"creationTimestamp": "2026-12-06T07:00:00Z", "labels": {"app": name}, "name": name,
                     "namespace": "shop", "resourceVersion": "1000", "uid": f"uid-{name}-5f0c2a9e"},
        "spec": {"containers": [{"image": "registry.example/app:1", "name": "app"}], "dnsPolicy": "ClusterFirst",
                 "nodeName": NODE, "restartPolicy": "Always"},
        "status": {"phase": "Running", "podIP": "10.244.1.7", "startTime": "2026-12-06T07:00:01Z"},
    }


def kubectl_yaml(*names: str) -> str:
    doc = {"apiVersion": "v1", "items": [kubectl_pod(n) for n in names], "kind": "List",
           "metadata": {"resourceVersion": ""}}
    return yaml.safe_dump(doc)


def cuts(text: str) -> list[int]:
    """Every line end and a few places inside lines: where a reader may find a file being written."""
    ends = [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    inside = [i - 3 for i in ends if i > 3]
    return sorted(set(ends + inside) - {len(text)})


def test_the_whole_file_is_read(tmp_path: Path) -> None:
    """No false refusal: kubectl's whole list is the node."""
    path = tmp_path / "pods.yaml"
    path.write_text(kubectl_yaml("web", "db", "cache"))
    assert sorted(p.name for p in SnapshotSource(path, NODE).fetch().pods) == ["cache", "db", "web"]


def test_a_file_cut_after_a_whole_pod_is_refused(tmp_path: Path) -> None:
    text = kubectl_yaml("web", "db", "cache")
    path = tmp_path / "pods.yaml"
    path.write_text(text[:text.index("- apiVersion: v1", text.index("uid-db"))])  # web and db, cache cut off
    with pytest.raises(SourceError, match="cut short"):
        SnapshotSource(path, NODE).fetch()


def test_no_cut_of_the_file_leaves_a_pod_out(tmp_path: Path) -> None:
    """Wherever the file ends, it is refused or it shows every pod (a cut after `kind: List` loses only the
    list's metadata)."""
    names = ("web", "db", "cache")
    text = kubectl_yaml(*names)
    path = tmp_path / "pods.yaml"
    partial = []
    for cut in cuts(text):
        path.write_text(text[:cut])
        try:
            pods = SnapshotSource(path, NODE).fetch().pods
        except SourceError:
            continue
        if sorted(p.name for p in pods) != sorted(names):
            partial.append((cut, text[:cut].splitlines()[-1], sorted(p.name for p in pods)))
    assert partial == [], f"{len(partial)} cuts read as a list that leaves pods out, e.g. {partial[:3]}"
