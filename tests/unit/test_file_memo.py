"""Parses remembered by file stamp: taken again only while the file is provably unchanged."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import pytest

from nodegc.hostio import files
from nodegc.hostio.files import FileMemo, read_small_file
from nodegc.inventory import cni_cache, cni_ipam


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


def _reservations(data: Path) -> dict[str, str | None]:
    found, _ = cni_ipam.scan_ip_reservations(data)
    return {r.ip: r.container_id for r in found}


def test_reservation_reader_takes_a_settled_file_again_and_sees_every_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "SETTLED_NS", 0)
    cni_ipam.forget_parsed_reservations()
    net = tmp_path / "networks" / "net"
    net.mkdir(parents=True)
    held = net / "10.0.0.5"
    held.write_bytes(b"a" * 64 + b"\r\neth0")
    first, _ = cni_ipam.scan_ip_reservations(tmp_path)
    again, _ = cni_ipam.scan_ip_reservations(tmp_path)
    assert again[0] is first[0]  # taken again, not read
    time.sleep(0.05)
    held.write_bytes(b"b" * 64 + b"\r\neth0")  # rewritten in place: same inode, same size
    assert _reservations(tmp_path) == {"10.0.0.5": "b" * 64}
    # Released and taken by a new pod between two scans (the inode may well be reused).
    time.sleep(0.05)
    held.unlink()
    held.write_bytes(b"c" * 64 + b"\r\neth0")
    assert _reservations(tmp_path) == {"10.0.0.5": "c" * 64}
    # Replaced by a symlink: refused, never the remembered parse.
    time.sleep(0.05)
    (net / "target").write_bytes(b"d" * 64 + b"\r\neth0")
    held.unlink()
    held.symlink_to(net / "target")
    found, problems = cni_ipam.scan_ip_reservations(tmp_path)
    assert found == ()
    assert any("10.0.0.5" in p.path and "symlink" in p.reason for p in problems)
    cni_ipam.forget_parsed_reservations()


def test_reservation_written_just_before_a_scan_is_read_again_by_the_next(tmp_path: Path) -> None:
    cni_ipam.forget_parsed_reservations()
    net = tmp_path / "networks" / "net"
    net.mkdir(parents=True)
    held = net / "10.0.0.6"
    held.write_bytes(b"a" * 64 + b"\r\neth0")
    first, _ = cni_ipam.scan_ip_reservations(tmp_path)
    again, _ = cni_ipam.scan_ip_reservations(tmp_path)
    assert again[0] == first[0] and again[0] is not first[0]  # too fresh to be remembered


def test_reservations_remembered_scan_after_scan_equal_a_fresh_read(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Differential: after each round of changes, the scan that may take parses again finds exactly what a
    reader that remembers nothing finds."""
    import random

    monkeypatch.setattr(files, "SETTLED_NS", 0)
    cni_ipam.forget_parsed_reservations()
    rng = random.Random(12)  # noqa: S311 - test data, not secrets
    net = tmp_path / "networks" / "net"
    net.mkdir(parents=True)
    for i in range(20):
        (net / f"10.0.1.{i}").write_bytes(f"{i:064x}\r\neth0".encode())
    for _ in range(8):
        cni_ipam.scan_ip_reservations(tmp_path)
        time.sleep(0.02)
        for path in rng.sample(sorted(net.iterdir()), 5):
            choice = rng.randrange(4)
            if choice == 0:
                path.write_bytes(f"{rng.getrandbits(256):064x}\r\neth0".encode())
            elif choice == 1:
                path.unlink()
                path.write_bytes(f"{rng.getrandbits(256):064x}\r\neth1".encode())
            elif choice == 2:
                path.write_bytes(b"not a reservation\r\nof three\r\nlines")
            else:
                path.unlink()
        remembered = cni_ipam.scan_ip_reservations(tmp_path)
        cni_ipam.forget_parsed_reservations()
        fresh = cni_ipam.scan_ip_reservations(tmp_path)
        assert remembered == fresh
    cni_ipam.forget_parsed_reservations()


def test_cache_entries_share_their_network_configuration_across_scans(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Every entry of a network carries the same configuration: one string for all of them, also for an
    entry written after the scan that parsed (and remembered) the others; the entries parsed in one scan
    share their network's name and their common CNI args too."""
    monkeypatch.setattr(files, "SETTLED_NS", 0)
    results = tmp_path / "results"
    results.mkdir()
    config = base64.b64encode(b'{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"bridge"}]}').decode()

    def write(cid: str) -> None:
        doc = {"kind": "cniCacheV1", "containerId": cid, "ifName": "eth0", "networkName": "net", "config": config,
               "cniArgs": [["IgnoreUnknown", "1"], ["K8S_POD_NAMESPACE", "default"], ["K8S_POD_UID", f"u-{cid}"]]}
        (results / f"net-{cid}-eth0").write_text(json.dumps(doc))

    write("c1")
    write("c2")
    first, _ = cni_cache.scan_cni_cache(tmp_path)
    write("c3")
    again, _ = cni_cache.scan_cni_cache(tmp_path)
    assert again[:2] == first  # remembered
    assert len({id(e.config_json) for e in again}) == 1
    assert len({id(e.network) for e in first}) == len({id(e.cni_args[1]) for e in first}) == 1  # in one scan
    assert [e.pod_uid for e in again] == ["u-c1", "u-c2", "u-c3"]
    assert again[2] == cni_cache.parse_cache_entry(again[2].path, (results / "net-c3-eth0").read_bytes(),
                                                   inode=again[2].inode, mtime=again[2].mtime)


def test_stamps_pack_one_for_one_and_an_unpackable_one_stays_a_tuple() -> None:
    from nodegc.hostio.files import packed_stamp

    stamps = [(1, 2, 3, 4), (1, 2, 4, 3), (2, 1, 3, 4), (1, 2, -3, 4), (0, 0, 0, 0),
              (2**64 - 1, 0, -(2**63), 2**63 - 1)]
    packed = [packed_stamp(s) for s in stamps]
    assert all(isinstance(p, bytes) and len(p) == 32 for p in packed)
    assert len(set(packed)) == len(stamps)
    huge = (1, 2, 2**63, 4)  # a time past 2262 in ns
    assert packed_stamp(huge) == huge and packed_stamp(huge) not in packed


def test_the_memo_holds_each_path_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each scan's listing spells the path anew: the memo keeps the key it was first put under (the
    record's own path), not the new spelling beside it."""
    monkeypatch.setattr(files, "SETTLED_NS", 0)
    path = tmp_path / "f"
    path.write_bytes(b"a")
    first = str(path)
    memo: FileMemo[str] = FileMemo()
    memo.put(first, read_small_file(first, limit=100), "parsed")
    memo.end_scan()
    for _ in range(3):
        again = "".join([str(tmp_path), "/f"])
        assert again == first and again is not first
        assert memo.get(again, os.lstat(again)) == "parsed"
        memo.end_scan()
    (key,) = memo._known
    assert key is first
