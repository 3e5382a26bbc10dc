"""Parses remembered by file stamp: taken again only while the file is provably unchanged."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from nodegc.hostio import files
from nodegc.hostio.files import FileMemo, read_small_file
from nodegc.inventory import cni_cache


def test_a_settled_file_is_taken_again_and_every_change_is_noticed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "SETTLED_NS", 0)
    path = tmp_path / "f"
    path.write_bytes(b"aaaa")
    memo: FileMemo[str] = FileMemo()
    memo.put(str(path), read_small_file(str(path), limit=100), "parsed a")
    memo.end_scan()
    assert memo.get(str(path), os.lstat(path)) == "parsed a"
    memo.end_scan()
    time.sleep(0.05)  # a few clock ticks
    path.write_bytes(b"bbbb")  # same inode, same size
    assert memo.get(str(path), os.lstat(path)) is None
    os.chmod(path, 0o600)
    assert memo.get(str(path), os.lstat(path)) is None


def test_a_file_changed_just_before_its_read_is_not_remembered(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"aaaa")
    memo: FileMemo[str] = FileMemo()
    memo.put(str(path), read_small_file(str(path), limit=100), "parsed a")
    memo.end_scan()
    assert memo.get(str(path), os.lstat(path)) is None


def test_paths_a_scan_did_not_see_are_forgotten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "SETTLED_NS", 0)
    path = tmp_path / "f"
    path.write_bytes(b"a")
    memo: FileMemo[str] = FileMemo()
    memo.put(str(path), read_small_file(str(path), limit=100), "parsed")
    memo.end_scan()
    memo.end_scan()  # a scan that did not look at it
    assert memo.get(str(path), os.lstat(path)) is None


def cache_doc(*, uid: str) -> str:
    return json.dumps({"kind": "cniCacheV1", "containerId": "c1", "ifName": "eth0", "networkName": "net",
                       "cniArgs": [["K8S_POD_UID", uid]]})


def test_cache_reader_rereads_a_rewritten_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "SETTLED_NS", 0)
    results = tmp_path / "results"
    results.mkdir()
    entry = results / "net-c1-eth0"
    entry.write_text(cache_doc(uid="uid-one"))
    first, _ = cni_cache.scan_cni_cache(tmp_path)
    again, _ = cni_cache.scan_cni_cache(tmp_path)
    assert again[0] is first[0]
    time.sleep(0.05)
    entry.write_text(cache_doc(uid="uid-two"))
    changed, _ = cni_cache.scan_cni_cache(tmp_path)
    assert [e.pod_uid for e in changed] == ["uid-two"]
