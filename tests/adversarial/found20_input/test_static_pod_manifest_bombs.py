"""A static pod manifest whose metadata.namespace is an alias bomb (a few hundred bytes standing for
billions of strings) was turned into text with str(): the scan hung for minutes and took gigabytes (nine
levels took over 2 GB before a 30 s timeout). A namespace that is not a string is a manifest that cannot be
read, kept as one that may declare any pod; the others in the directory are read as usual."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodegc.inventory.static_pods import scan_static_pods
from tests.adversarial.found20_input.bombs import anchors

GOOD = "apiVersion: v1\nkind: Pod\nmetadata: {name: etcd, namespace: kube-system}\nspec: {containers: [{name: etcd}]}\n"


@pytest.mark.parametrize("field", ["namespace", "name", "uid"])
def test_a_bombed_metadata_field_is_an_unreadable_manifest(tmp_path: Path, field: str) -> None:
    defs, bomb = anchors(6)  # 9**6 leaves: quick on the old code too, yet 2.6 MB of text
    meta = {"name": "p", "namespace": "ns", "uid": "u"} | {field: bomb}
    (tmp_path / "a-bomb.yaml").write_text(
        f"apiVersion: v1\nkind: Pod\nx: {defs}\nmetadata:\n" + "".join(f"  {k}: {v}\n" for k, v in meta.items())
        + "spec:\n  containers: [{name: c}]\n")
    (tmp_path / "etcd.yaml").write_text(GOOD)
    manifests, problems = scan_static_pods(tmp_path)
    by_path = {m.path: m for m in manifests}
    bombed = by_path[str(tmp_path / "a-bomb.yaml")]
    assert (bombed.namespace, bombed.name) == (None, None), "a bombed manifest is one that may declare anything"
    assert [p.path for p in problems] == [str(tmp_path / "a-bomb.yaml")]
    assert len(problems[0].reason) < 200, problems[0].reason[:200]
    assert (by_path[str(tmp_path / "etcd.yaml")].namespace, by_path[str(tmp_path / "etcd.yaml")].name) == (
        "kube-system", "etcd")


def test_a_multi_document_manifest_may_declare_any_pod(tmp_path: Path) -> None:
    """The kubelet reads one document per file; a second one is not silently dropped here."""
    (tmp_path / "two.yaml").write_text(GOOD + "---\n" + GOOD.replace("etcd", "other"))
    manifests, problems = scan_static_pods(tmp_path)
    assert [(m.namespace, m.name) for m in manifests] == [(None, None)] and len(problems) == 1


def test_a_deeply_nested_manifest_may_declare_any_pod(tmp_path: Path) -> None:
    (tmp_path / "deep.yaml").write_text("apiVersion: v1\nkind: Pod\nspec: " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "deep.json").write_text('{"kind": "Pod", "spec": ' + "[" * 100000 + "]" * 100000 + "}")
    manifests, problems = scan_static_pods(tmp_path)
    assert [(m.namespace, m.name) for m in manifests] == [(None, None)] * 2 and len(problems) == 2
