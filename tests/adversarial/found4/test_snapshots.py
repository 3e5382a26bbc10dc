"""A snapshot says nothing about what it does not show, and its time is never later than its capture."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodegc.desired import snapshot
from nodegc.desired.snapshot import SnapshotSource
from nodegc.desired.source import SourceError

HOUR_AGO = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def pod(name: str, *, rv: str | None = None, created: datetime = HOUR_AGO) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "d", "uid": f"u-{name}",
                            "creationTimestamp": created.isoformat().replace("+00:00", "Z")}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"metadata": meta, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}


def pod_list(*items: dict[str, Any], kind: str = "List", rv: str = "") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": rv}, "items": list(items)}


def write(path: Path, doc: object, *, mtime: float | None = None) -> Path:
    path.write_text(json.dumps(doc))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


# -- 1: what a file cannot show ---------------------------------------------------------------------


def test_a_single_pod_is_no_desired_state(tmp_path: Path) -> None:
    """`kubectl get pod web -o json` shows one pod: every other pod of the node would look absent."""
    f = write(tmp_path / "pod.json", {"apiVersion": "v1", "kind": "Pod", **pod("web")})
    with pytest.raises(SourceError, match="single Pod"):
        SnapshotSource(f, "n1").fetch()


def test_a_stream_of_documents_is_no_desired_state(tmp_path: Path) -> None:
    """Several documents are several reads (pods, or lists of different namespaces): any may leave pods out."""
    f = tmp_path / "pods.yaml"
    f.write_text(yaml.safe_dump_all([{"kind": "Pod", **pod("a")}, {"kind": "Pod", **pod("b")}]))
    with pytest.raises(SourceError, match="2 documents"):
        SnapshotSource(f, "n1").fetch()
    f.write_text(yaml.safe_dump_all([pod_list(pod("a")), pod_list(pod("b"))]))
    with pytest.raises(SourceError, match="2 documents"):
        SnapshotSource(f, "n1").fetch()


def test_a_server_list_holding_a_pod_newer_than_itself_is_refused(tmp_path: Path) -> None:
    """A PodList is one consistent read at its resourceVersion; a newer item was pasted in from another."""
    f = write(tmp_path / "pods.json", pod_list(pod("a", rv="90"), pod("b", rv="120"), kind="PodList", rv="100"))
    with pytest.raises(SourceError, match="resourceVersion 100 holding a pod at 120"):
        SnapshotSource(f, "n1").fetch()
    write(f, pod_list(pod("a", rv="90"), pod("b", rv="100"), kind="PodList", rv="100"))
    assert len(SnapshotSource(f, "n1").fetch().pods) == 2


# -- 2: the photo's time is never later than the capture ------------------------------------------


def _projected(tmp_path: Path, doc: object) -> Path:
    """The kubelet's atomic-writer layout of a ConfigMap volume: key -> ..data/key, ..data -> ..<timestamp>."""
    volume = tmp_path / "volume"
    stamp = volume / "..2026_12_01_10_00_00.123456789"
    stamp.mkdir(parents=True)
    (stamp / "pods.json").write_text(json.dumps(doc))
    (volume / "..data").symlink_to(stamp.name)
    (volume / "pods.json").symlink_to("..data/pods.json")
    return volume / "pods.json"


def test_a_configmap_mounted_snapshot_is_dated_by_its_content_not_the_kubelets_write(tmp_path: Path) -> None:
    """The kubelet writes a ConfigMap's files when it syncs the volume: their time is that write, after the
    capture. Dated by it, every pod born between the capture and the sync would look older than the photo."""
    f = _projected(tmp_path, pod_list(pod("a"), pod("b", created=HOUR_AGO - timedelta(hours=1))))
    state = SnapshotSource(f, "n1").fetch()
    assert state.fetched_at == HOUR_AGO, "dated by the kubelet's write: looks fresh"
    assert any("ConfigMap" in w for w in state.warnings)


def test_a_configmap_mounted_snapshot_without_any_time_is_refused(tmp_path: Path) -> None:
    doc = pod_list({"metadata": {"name": "a", "namespace": "d", "uid": "u-a"}, "spec": {"nodeName": "n1"},
                    "status": {"phase": "Running"}})
    with pytest.raises(SourceError, match="no pod in it carries a time"):
        SnapshotSource(_projected(tmp_path, doc), "n1").fetch()


def test_a_file_dated_before_its_own_pods_keeps_the_older_time_and_says_so(tmp_path: Path) -> None:
    day_ago = time.time() - 86400
    f = write(tmp_path / "pods.json", pod_list(pod("a")), mtime=day_ago)
    state = SnapshotSource(f, "n1").fetch()
    assert state.fetched_at.timestamp() == pytest.approx(day_ago, abs=1e-3)
    assert any("before the newest time its pods carry" in w for w in state.warnings)


def test_a_plain_snapshot_has_no_warning(tmp_path: Path) -> None:
    assert SnapshotSource(write(tmp_path / "pods.json", pod_list(pod("a"))), "n1").fetch().warnings == ()


# -- 3: terminate's re-read ---------------------------------------------------------------------------


def test_a_reread_older_than_the_photo_the_scan_used_is_refused(tmp_path: Path) -> None:
    """The file was replaced by an older copy between detect and terminate: that copy cannot re-verify."""
    now = time.time()
    f = write(tmp_path / "pods.json", pod_list(pod("a")), mtime=now - 5)
    source = SnapshotSource(f, "n1")
    source.fetch()
    write(f, pod_list(pod("a")), mtime=now - 60)
    with pytest.raises(SourceError, match="before the photo the scan used"):
        source.get_pod("d", "a")
    with pytest.raises(SourceError, match="before the one already read"):
        source.fetch()


def test_a_future_dated_reread_is_refused(tmp_path: Path) -> None:
    f = write(tmp_path / "pods.json", pod_list(pod("a")))
    source = SnapshotSource(f, "n1")
    source.fetch()
    write(f, pod_list(pod("a")), mtime=time.time() + 3600)
    with pytest.raises(SourceError, match="in the future"):
        source.get_pod("d", "a")


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The reads of the file from now on, one entry a read (a read whose bytes are those of the last parse
    is dated anew without a parse: tests/unit/test_snapshot_reuse.py)."""
    parses: list[Path] = []
    real = snapshot._read

    def counting(path: Path) -> Any:
        parses.append(path)
        return real(path)

    monkeypatch.setattr(snapshot, "_read", counting)
    return parses


def test_get_pod_parses_the_file_once_while_it_is_unchanged(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """One parse per change of the file, not one per terminate item (a 128 MiB file, a hundred items)."""
    parses = _count_parses(monkeypatch)
    monkeypatch.setattr(snapshot, "SETTLED_NS", 0)  # the file counts as left alone at once
    f = write(tmp_path / "pods.json", pod_list(pod("a"), pod("b")))
    source = SnapshotSource(f, "n1")
    source.fetch()
    for _ in range(50):
        assert source.get_pod("d", "a") is not None
        assert source.get_pod("d", "gone") is None
    assert len(parses) == 1
    write(f, pod_list(pod("b")), mtime=time.time() + 1)  # changed: parsed again, and seen
    assert source.get_pod("d", "a") is None
    assert len(parses) == 2


def test_a_file_changed_just_before_the_read_is_parsed_again(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """ctime comes from a coarse clock: a same-size rewrite within the tick of the read keeps every field of
    the stamp. So a parse is remembered only once the file's ctime is well before the read."""
    parses = _count_parses(monkeypatch)
    monkeypatch.setattr(snapshot, "SETTLED_NS", 3600 * 10**9)  # nothing written in the last hour has settled
    f = write(tmp_path / "pods.json", pod_list(pod("a"), pod("b")))
    source = SnapshotSource(f, "n1")
    source.fetch()
    source.get_pod("d", "a")
    source.get_pod("d", "a")
    assert len(parses) == 3


def test_a_configmap_update_whose_newest_pod_left_is_not_refused_as_older(tmp_path: Path) -> None:
    """Dated by its content, a projected file's photo goes back when its newest pod is deleted: that is no
    older file (the kubelet's write time moved on), so it is not refused."""
    f = _projected(tmp_path, pod_list(pod("a"), pod("new", created=HOUR_AGO + timedelta(minutes=30))))
    source = SnapshotSource(f, "n1")
    assert source.fetch().fetched_at == HOUR_AGO + timedelta(minutes=30)
    volume = f.parent
    stamp = volume / "..2026_12_01_10_01_00.123456789"
    stamp.mkdir()
    (stamp / "pods.json").write_text(json.dumps(pod_list(pod("a"))))
    (volume / "..data_tmp").symlink_to(stamp.name)
    os.replace(volume / "..data_tmp", volume / "..data")  # the kubelet's atomic swap
    assert source.fetch().fetched_at == HOUR_AGO
    assert source.get_pod("d", "new") is None


def test_a_configmap_written_by_a_clock_ahead_is_dated_in_the_future(tmp_path: Path) -> None:
    f = _projected(tmp_path, pod_list(pod("a")))
    future = time.time() + 3600
    os.utime(f, (future, future))
    state = SnapshotSource(f, "n1").fetch()
    assert state.fetched_at.timestamp() == pytest.approx(future, abs=1e-3)  # the engine refuses it
