"""host-local IPAM files and libcni cache entries read from a temporary CNI data dir."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from nodegc.hostio.cni_files import parse_reservation
from nodegc.inventory.cni_cache import parse_cache_entry, scan_cni_cache
from nodegc.inventory.cni_ipam import scan_ip_reservations
from nodegc.model.resources import Kind

CID = "3f1e2d" * 10 + "abcd"
CID2 = "9a8b7c" * 10 + "0123"
NET_CONFIG = b'{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"bridge"}]}'


# --- host-local reservations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (f"{CID}\r\neth0".encode(), (CID, "eth0", False)),
        (f"{CID}\neth0\n".encode(), (CID, "eth0", False)),
        (CID.encode(), (CID, None, True)),
        (f"{CID}\n".encode(), (CID, None, True)),
        (f"{CID}\r\n".encode(), (CID, None, True)),
    ],
)
def test_parse_reservation_formats(content: bytes, expected: tuple[str, str | None, bool]) -> None:
    assert parse_reservation(content) == expected


@pytest.mark.parametrize(
    "content",
    [b"", b"\r\n", b"  \n", b"\xff\xfe\r\neth0", b"\r\neth0", b"a\r\nb\r\nc", b"a b\r\neth0"],
)
def test_parse_reservation_rejects(content: bytes) -> None:
    with pytest.raises(ValueError):
        parse_reservation(content)


def _net(data: Path, name: str = "cbr0") -> Path:
    net = data / "networks" / name
    net.mkdir(parents=True, exist_ok=True)
    return net


def test_scan_reservations_both_formats_and_ipv6(tmp_path: Path) -> None:
    net = _net(tmp_path)
    (net / "10.244.0.5").write_bytes(f"{CID}\r\neth0".encode())
    (net / "10.244.0.6").write_bytes(CID2.encode())
    (net / "fd00::5").write_bytes(f"{CID}\r\neth0".encode())
    (net / "fd00:0:0:0:0:0:0:6").write_bytes(f"{CID2}\r\neth0".encode())
    (net / "lock").write_bytes(b"")
    (net / "last_reserved_ip.0").write_bytes(b"10.244.0.6")
    (net / "last_reserved_ip.1").write_bytes(b"fd00::6")

    found, problems = scan_ip_reservations(tmp_path)

    assert problems == ()
    by_ip = {r.ip: r for r in found}
    assert set(by_ip) == {"10.244.0.5", "10.244.0.6", "fd00::5", "fd00::6"}
    modern = by_ip["10.244.0.5"]
    assert (modern.network, modern.container_id, modern.ifname, modern.legacy_format) == (
        "cbr0",
        CID,
        "eth0",
        False,
    )
    st = os.lstat(net / "10.244.0.5")
    assert (modern.path, modern.inode, modern.mtime) == (str(net / "10.244.0.5"), st.st_ino, st.st_mtime)
    legacy = by_ip["10.244.0.6"]
    assert (legacy.container_id, legacy.ifname, legacy.legacy_format) == (CID2, None, True)
    assert by_ip["fd00::6"].path == str(net / "fd00:0:0:0:0:0:0:6")


def test_missing_networks_dir_is_empty(tmp_path: Path) -> None:
    assert scan_ip_reservations(tmp_path) == ((), ())


def test_bad_names_empty_files_and_oversized_files_are_problems(tmp_path: Path) -> None:
    net = _net(tmp_path)
    (net / "10.244.0.5").write_bytes(f"{CID}\r\neth0".encode())
    (net / "not-an-ip").write_bytes(f"{CID}\r\neth0".encode())
    (net / "10.244.0.300").write_bytes(f"{CID}\r\neth0".encode())
    (net / "10.244.0.7").write_bytes(b"")
    (net / "10.244.0.8").write_bytes(b"x" * 5000)
    (net / "10.244.0.9").mkdir()
    (tmp_path / "networks" / "stray-file").write_bytes(b"")

    found, problems = scan_ip_reservations(tmp_path)

    assert [r.ip for r in found] == ["10.244.0.5"]
    reasons = {Path(p.path).name: p.reason for p in problems}
    assert set(reasons) == {"not-an-ip", "10.244.0.300", "10.244.0.7", "10.244.0.8", "10.244.0.9", "stray-file"}
    assert "not an IP address" in reasons["not-an-ip"]
    assert "empty" in reasons["10.244.0.7"]
    assert "limit" in reasons["10.244.0.8"]
    assert "not a regular file" in reasons["10.244.0.9"]
    assert all(p.kind is Kind.IP_RESERVATION for p in problems)


def test_symlinked_ip_file_and_network_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret"
    secret.write_bytes(f"{CID}\r\neth0".encode())
    (outside / "10.9.9.9").write_bytes(f"{CID}\r\neth0".encode())
    data = tmp_path / "cni"
    net = _net(data)
    (net / "10.244.0.5").symlink_to(secret)
    (data / "networks" / "evil").symlink_to(outside)

    found, problems = scan_ip_reservations(data)

    assert found == ()
    assert {p.path: p.reason for p in problems} == {
        str(net / "10.244.0.5"): f"symlink to {secret}, not followed",
        str(data / "networks" / "evil"): f"symlink to {outside}, not followed",
    }


def test_fifo_named_like_an_ip_does_not_block(tmp_path: Path) -> None:
    net = _net(tmp_path)
    os.mkfifo(net / "10.244.0.5")
    found, problems = scan_ip_reservations(tmp_path)
    assert found == ()
    assert "not a regular file" in problems[0].reason


# --- libcni cache ---------------------------------------------------------------------------------------


def _cache_doc(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": "cniCacheV1",
        "containerId": CID,
        "config": base64.b64encode(NET_CONFIG).decode(),
        "ifName": "eth0",
        "networkName": "cbr0",
        "netns": "/var/run/netns/cni-1234",
        "cniArgs": [
            ["IgnoreUnknown", "1"],
            ["K8S_POD_NAMESPACE", "default"],
            ["K8S_POD_NAME", "web-0"],
            ["K8S_POD_INFRA_CONTAINER_ID", CID],
            ["K8S_POD_UID", "old-uid"],
            ["K8S_POD_UID", "0b3c2f5e-6d8a-4a1e-9c55-2f1f3b1d9e01"],
        ],
        "capabilityArgs": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
        "result": {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "cni0"}, {"name": "vethabc"}, {"name": "eth0", "sandbox": "/x"}],
            "ips": [
                {"address": "10.244.0.5/24", "gateway": "10.244.0.1", "interface": 2},
                {"address": "fd00:0::5/64", "interface": 2},
            ],
        },
    }
    doc.update(overrides)
    return doc


def _parse(doc: dict[str, Any] | bytes) -> Any:
    content = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return parse_cache_entry("/x/results/cbr0-c-eth0", content, inode=7, mtime=1.5)


def test_parse_full_cache_entry() -> None:
    entry = _parse(_cache_doc())
    assert (entry.path, entry.inode, entry.mtime) == ("/x/results/cbr0-c-eth0", 7, 1.5)
    assert (entry.network, entry.container_id, entry.ifname) == ("cbr0", CID, "eth0")
    assert entry.netns == "/var/run/netns/cni-1234"
    assert (entry.pod_namespace, entry.pod_name) == ("default", "web-0")
    assert entry.pod_uid == "0b3c2f5e-6d8a-4a1e-9c55-2f1f3b1d9e01"  # the later key wins
    assert entry.infra_container_id == CID
    assert entry.ips == ("10.244.0.5", "fd00::5")
    assert entry.cni_args[0] == ("IgnoreUnknown", "1")
    assert len(entry.cni_args) == 6
    assert entry.config_json == NET_CONFIG.decode()
    assert json.loads(entry.capability_args_json) == _cache_doc()["capabilityArgs"]


def test_parse_minimal_cache_entry() -> None:
    doc = {"kind": "cniCacheV1", "containerId": CID, "ifName": "eth0", "networkName": "cbr0"}
    entry = _parse(doc)
    assert entry.netns is None
    assert entry.pod_uid is None
    assert entry.ips == ()
    assert entry.cni_args == ()
    assert entry.config_json is None
    assert entry.capability_args_json is None


def test_parse_pre_030_result() -> None:
    entry = _parse(_cache_doc(result={"cniVersion": "0.2.0", "ip4": {"ip": "10.1.0.9/16"}}))
    assert entry.ips == ("10.1.0.9",)


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (_cache_doc(kind="cniCacheV2"), "kind"),
        (_cache_doc(containerId=""), "containerId"),
        ({k: v for k, v in _cache_doc().items() if k != "networkName"}, "networkName"),
        ({k: v for k, v in _cache_doc().items() if k != "ifName"}, "ifName"),
        (_cache_doc(config="not base64!!"), "bad base64"),
        (_cache_doc(config=base64.b64encode(b"\xff\xfe").decode()), "bad base64"),
        (_cache_doc(cniArgs=[["K8S_POD_UID"]]), "cniArgs"),
        (_cache_doc(cniArgs={"K8S_POD_UID": "x"}), "cniArgs"),
        (_cache_doc(result={"ips": [{"address": "nonsense"}]}), "not an IP"),
        (_cache_doc(netns=5), "netns"),
    ],
)
def test_parse_rejects(doc: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        _parse(doc)


def test_truncated_and_malformed_json() -> None:
    full = json.dumps(_cache_doc()).encode()
    with pytest.raises(ValueError, match=r"truncated JSON at char 120"):
        _parse(full[:120])
    with pytest.raises(ValueError, match=r"malformed JSON at char 1"):
        _parse(b"{]")
    with pytest.raises(ValueError, match="empty"):
        _parse(b"")
    with pytest.raises(ValueError, match="not an object"):
        _parse(b"[1, 2]")
    with pytest.raises(ValueError, match="UTF-8"):
        _parse(b'{"kind": "\xff"}')


def test_scan_cni_cache(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    good = results / f"cbr0-{CID}-eth0"
    good.write_text(json.dumps(_cache_doc()))
    (results / f"cbr0-{CID2}-eth0").write_bytes(json.dumps(_cache_doc(containerId=CID2)).encode()[:120])
    (results / "wrong-kind").write_text(json.dumps(_cache_doc(kind="other")))
    (results / "huge").write_bytes(b" " * (1024 * 1024 + 1))
    (results / "subdir").mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(_cache_doc(containerId=CID2)))
    (results / "linked").symlink_to(outside)

    found, problems = scan_cni_cache(tmp_path)

    assert [e.container_id for e in found] == [CID]
    st = os.lstat(good)
    assert (found[0].path, found[0].inode, found[0].mtime) == (str(good), st.st_ino, st.st_mtime)
    reasons = {Path(p.path).name: p.reason for p in problems}
    assert reasons == {
        f"cbr0-{CID2}-eth0": "truncated JSON at char 120",
        "wrong-kind": "kind is 'other', not 'cniCacheV1'",
        "huge": "file is 1048577 bytes, larger than the 1048576 byte limit; not read",
        "linked": f"symlink to {outside}, not followed",
    }
    assert all(p.kind is Kind.CNI_CACHE for p in problems)


def test_missing_results_dir_is_empty(tmp_path: Path) -> None:
    assert scan_cni_cache(tmp_path) == ((), ())


def test_symlinked_results_dir_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir()
    (real / "cbr0-x-eth0").write_text(json.dumps(_cache_doc()))
    data = tmp_path / "cni"
    data.mkdir()
    (data / "results").symlink_to(real)
    found, problems = scan_cni_cache(data)
    assert found == ()
    assert [p.reason for p in problems] == [f"symlink to {real}, not followed"]


def test_every_prefix_of_a_cache_file_reads_as_truncated() -> None:
    full = json.dumps(_cache_doc(result={"ips": [], "x": [1.5e3, -2, True, False, None]})).encode()
    for cut in range(1, len(full)):
        with pytest.raises(ValueError, match=f"truncated JSON at char {cut}$"):
            _parse(full[:cut])
