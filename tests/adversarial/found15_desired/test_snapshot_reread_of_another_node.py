"""Terminate's re-read of a snapshot (its "live GET") when the file now lists another node's pods. Without
--node (nor $NODE_NAME) the node is inferred from each read: the file rewritten with another node's list
between the scan and the re-read (a writer pointed at the wrong node, files of two nodes swapped) made the
re-read look for the owner among that node's pods, find nothing and answer "gone": every marked item of this
node went on to be reclaimed. A re-read about another node than the photo the scan used cannot re-verify it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from nodegc.desired.snapshot import SnapshotSource
from nodegc.desired.source import SourceError


def pod(name: str, node: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}-{node}",
                         "creationTimestamp": "2026-12-06T07:00:00Z"},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def write(path: Path, *pods: dict[str, Any], mtime: float) -> None:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(pods)}))
    os.utime(path, (mtime, mtime))


def test_a_reread_about_another_node_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    now = time.time()
    write(path, pod("web", "n1"), pod("db", "n1"), mtime=now - 10)
    source = SnapshotSource(path, None)
    assert source.fetch().node == "n1"
    write(path, pod("web", "n2"), pod("api", "n2"), mtime=now - 1)  # newer, and about n2
    with pytest.raises(SourceError, match="n2"):
        source.get_pod("default", "db")


def test_a_reread_of_the_same_node_still_answers(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    now = time.time()
    write(path, pod("web", "n1"), pod("db", "n1"), mtime=now - 10)
    source = SnapshotSource(path, None)
    source.fetch()
    write(path, pod("web", "n1"), mtime=now - 1)
    assert source.get_pod("default", "db") is None
    assert source.get_pod("default", "web") is not None
