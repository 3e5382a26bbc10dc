"""Readers on odd input: a deeply nested cache file, a UID with a newline, a Unicode line separator in a
comment, and a mount tucked under a stack by propagation."""

from __future__ import annotations

from pathlib import Path

from nodegc.hostio.iptables import parse_iptables_save
from nodegc.inventory.cni_cache import scan_cni_cache
from nodegc.inventory.pod_dirs import scan_pod_dirs


def test_deeply_nested_cache_json_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "net-abc-eth0").write_bytes(b"[" * 100_000)
    entries, problems = scan_cni_cache(tmp_path)
    assert entries == ()
    assert len(problems) == 1


def test_pod_uid_with_trailing_newline_is_not_plausible(tmp_path: Path) -> None:
    (tmp_path / "pods" / "0123abcd\n").mkdir(parents=True)
    pods, problems = scan_pod_dirs(tmp_path, [])
    assert pods == ()
    assert len(problems) == 1


def test_iptables_comment_with_unicode_line_separator_keeps_rule() -> None:
    dump = (
        "*nat\n:POSTROUTING ACCEPT [0:0]\n:CNI-0123456789abcdef01234567 - [0:0]\n"
        '-A CNI-0123456789abcdef01234567 -d 10.0.0.0/24 -m comment --comment '
        '"name: \\"net\\" id: \\"cid1\\" \u2028x" -j ACCEPT\n'
        "COMMIT\n"
    )
    chains, _, skipped = parse_iptables_save(dump)
    assert skipped == ()
    assert chains[0].container_id == "cid1"


def test_top_at_agrees_with_reclaim_on_a_tucked_mount() -> None:
    from nodegc.hostio.mountinfo import MountIndex
    from nodegc.model.resources import Mount

    def m(mid: int, parent: int) -> Mount:
        return Mount(mid, parent, "0:1", "/", "/v", "rw", "tmpfs", "tmpfs")

    # A (10) then B (20) on top of it; a later propagated mount C (30) is tucked under A (A re-parented).
    stack = [m(10, 30), m(20, 10), m(30, 1)]
    top = MountIndex.build(stack).top_at("/v")
    assert top is not None and top.mount_id == 20
