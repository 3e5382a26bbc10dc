"""A snapshot that lists one pod UID twice is two photographs glued together (lists taken at different times,
merged by hand): which entry holds is an accident of order, and a Succeeded entry after a Running one made a
live pod's directory, volumes and network look like a finished pod's residue. Two different entries under one
UID are refused; the same entry twice says nothing new and is read once."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nodegc.desired.snapshot import SnapshotSource
from nodegc.desired.source import SourceError

HOUR_AGO = (datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)).isoformat().replace("+00:00", "Z")


def pod(name: str, uid: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "d", "uid": uid, "creationTimestamp": HOUR_AGO},
            "spec": {"nodeName": "n1"}, "status": {"phase": phase, "podIPs": [{"ip": "10.1.0.5"}]}}


def write(tmp_path: Path, *items: dict[str, Any]) -> Path:
    f = tmp_path / "pods.json"
    f.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
                             "items": list(items)}))
    return f


@pytest.mark.parametrize("order", ["running_first", "succeeded_first"])
def test_one_uid_listed_as_two_different_pods_is_refused(tmp_path: Path, order: str) -> None:
    running, done = pod("web", "u-1", "Running"), pod("web", "u-1", "Succeeded")
    items = (running, done) if order == "running_first" else (done, running)
    with pytest.raises(SourceError, match=r"u-1.*twice"):
        SnapshotSource(write(tmp_path, *items, pod("db", "u-2", "Running")), "n1").fetch()


def test_one_uid_under_two_names_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"u-1.*twice"):
        SnapshotSource(write(tmp_path, pod("web", "u-1", "Running"), pod("web-old", "u-1", "Running")), "n1").fetch()


def test_the_same_entry_twice_is_read_once(tmp_path: Path) -> None:
    same = pod("web", "u-1", "Running")
    state = SnapshotSource(write(tmp_path, same, dict(same), pod("db", "u-2", "Running")), "n1").fetch()
    assert sorted(p.name for p in state.pods) == ["db", "web"]
