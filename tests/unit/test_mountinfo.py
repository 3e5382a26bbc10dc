"""mountinfo parsing: escapes, optional fields, bad lines, and the mount index."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodegc.hostio.mountinfo import (
    MountIndex,
    decode_mountinfo_field,
    mounts_below,
    parse_mountinfo,
    read_mounts,
)
from nodegc.model.resources import Kind, Mount

LINE = "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue"


def _mount(mount_id: int, mount_point: str) -> Mount:
    return Mount(
        mount_id=mount_id,
        parent_id=1,
        device="0:1",
        root="/",
        mount_point=mount_point,
        options="rw",
        fs_type="tmpfs",
        source="tmpfs",
    )


@pytest.mark.parametrize(
    ("raw", "decoded"),
    [
        (r"/a\040b", "/a b"),
        (r"/tab\011here", "/tab\there"),
        (r"/new\012line", "/new\nline"),
        (r"/back\134slash", "/back\\slash"),
        (r"/plain", "/plain"),
        (r"/not\09escape", r"/not\09escape"),
        (r"/trailing\\", "/trailing\\\\"),
        (r"\134040", "\\040"),  # decoded once, never twice
    ],
)
def test_decode_escapes(raw: str, decoded: str) -> None:
    assert decode_mountinfo_field(raw) == decoded


def test_decode_non_utf8_byte_round_trips_through_fsdecode() -> None:
    assert decode_mountinfo_field(r"/x\377y") == os.fsdecode(b"/x\xffy")


def test_parse_the_kernel_documentation_line() -> None:
    mounts, reasons = parse_mountinfo(LINE + "\n")
    assert reasons == ()
    assert mounts == (
        Mount(
            mount_id=36,
            parent_id=35,
            device="98:0",
            root="/mnt1",
            mount_point="/mnt2",
            options="rw,noatime",
            fs_type="ext3",
            source="/dev/root",
        ),
    )


def test_zero_and_several_optional_fields() -> None:
    text = "\n".join(
        [
            "22 27 0:21 / /proc rw,relatime - proc proc rw",
            "23 27 0:22 / /sys rw shared:7 master:3 propagate_from:2 unbindable - sysfs sysfs rw",
        ]
    )
    mounts, reasons = parse_mountinfo(text)
    assert reasons == ()
    assert [(m.mount_point, m.fs_type, m.source) for m in mounts] == [
        ("/proc", "proc", "proc"),
        ("/sys", "sysfs", "sysfs"),
    ]


def test_escaped_mount_point_and_source() -> None:
    line = (
        r"100 1 0:50 / /var/lib/kubelet/pods/u/volumes/p/with\040space\011tab\012nl\134bs"
        r" rw - tmpfs my\040src rw"
    )
    (mount,), reasons = parse_mountinfo(line)
    assert reasons == ()
    assert mount.mount_point == "/var/lib/kubelet/pods/u/volumes/p/with space\ttab\nnl\\bs"
    assert mount.source == "my src"


def test_empty_source_keeps_its_place() -> None:
    (mount,), _ = parse_mountinfo("100 1 0:50 / /x rw - tmpfs  rw,size=1k")
    assert mount.source == ""
    assert mount.fs_type == "tmpfs"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 ext3 /dev/root rw", "separator"),
        ("x 35 98:0 /mnt1 /mnt2 rw - ext3 /dev/root rw", "mount id"),
        ("36 35 98-0 /mnt1 /mnt2 rw - ext3 /dev/root rw", "device"),
        ("36 35 98:0 /mnt1", "too few"),
        ("36 35 98:0 / /mnt2 rw a b - ext3", "after separator"),
    ],
)
def test_malformed_lines_are_skipped_with_a_reason(line: str, reason: str) -> None:
    mounts, reasons = parse_mountinfo("\n".join([LINE, line, LINE.replace("36 35", "37 35")]))
    assert [m.mount_id for m in mounts] == [36, 37]
    assert len(reasons) == 1
    assert reasons[0].startswith("line 2:")
    assert reason in reasons[0]


def test_read_mounts_from_a_fake_proc(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "mountinfo").write_text(LINE + "\nbroken line\n")
    mounts, problems = read_mounts(tmp_path, "42")
    assert [m.mount_id for m in mounts] == [36]
    assert len(problems) == 1
    assert problems[0].kind is Kind.VOLUME_MOUNT
    assert problems[0].path == str(tmp_path / "42" / "mountinfo")


def test_read_mounts_missing_file_is_a_problem(tmp_path: Path) -> None:
    mounts, problems = read_mounts(tmp_path, "nope")
    assert mounts == ()
    assert len(problems) == 1


def test_read_real_proc_self() -> None:
    mounts, _ = read_mounts()
    assert mounts


def test_mounts_below() -> None:
    mounts = [
        _mount(1, "/"),
        _mount(2, "/var/lib/kubelet/pods/a"),
        _mount(3, "/var/lib/kubelet/pods/a/volumes/x"),
        _mount(4, "/var/lib/kubelet/pods/ab"),
        _mount(5, "/var/lib/kubelet/pods/a-b"),
        _mount(6, "/var/lib/kubelet/pods/a/volumes/x"),
        _mount(7, "/var/lib/kubelet/pods/a/z/deep/er"),
        _mount(8, "/var/lib/kubelet/pods/a0"),
    ]
    assert sorted(m.mount_id for m in mounts_below(mounts, "/var/lib/kubelet/pods/a")) == [2, 3, 6, 7]
    assert sorted(m.mount_id for m in mounts_below(mounts, "/var/lib/kubelet/pods/a/")) == [2, 3, 6, 7]
    assert sorted(m.mount_id for m in mounts_below(mounts, "/")) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert mounts_below(mounts, "/nothing") == []
    index = MountIndex.build(mounts)
    top = index.top_at("/var/lib/kubelet/pods/a/volumes/x")
    assert top is not None
    assert top.mount_id == 6  # stacked: the later line is on top
    assert index.top_at("/var/lib/kubelet/pods/a/volumes") is None


def test_mounts_below_many_matches_a_linear_scan() -> None:
    mounts = [_mount(i, f"/k/pods/p{i % 97}/volumes/v{i}") for i in range(5000)]
    index = MountIndex.build(mounts)
    for p in (0, 5, 9, 96):
        path = f"/k/pods/p{p}"
        expected = sorted(
            m.mount_id for m in mounts if m.mount_point == path or m.mount_point.startswith(path + "/")
        )
        assert sorted(m.mount_id for m in mounts_below(index, path)) == expected


def _proc(tmp_path: Path, text: str) -> Path:
    (tmp_path / "self").mkdir(exist_ok=True)
    (tmp_path / "self" / "mountinfo").write_text(text)
    return tmp_path


def test_the_scan_reuses_a_parse_only_of_the_same_bytes(tmp_path: Path) -> None:
    from nodegc.hostio.mountinfo import forget_parses

    forget_parses()
    other = "37 35 98:0 / /mnt3 rw - tmpfs tmpfs rw"
    proc = _proc(tmp_path, f"{LINE}\nnot a mount line\n")
    first = read_mounts(proc, reuse=True)
    again = read_mounts(proc, reuse=True)
    assert again[0] is first[0] and [p.reason for p in again[1]] == [p.reason for p in first[1]]
    assert len(first[1]) == 1  # the bad line's reason survives the reuse
    # Same length, one byte different: parsed again, and the change is seen.
    _proc(tmp_path, f"{LINE.replace('/mnt2', '/mnt9')}\nnot a mount line\n")
    changed = read_mounts(proc, reuse=True)
    assert changed[0] is not first[0] and changed[0][0].mount_point == "/mnt9"
    _proc(tmp_path, f"{LINE}\n{other}\n")
    assert [m.mount_point for m in read_mounts(proc, reuse=True)[0]] == ["/mnt2", "/mnt3"]
    forget_parses()


def test_without_reuse_every_read_is_parsed_and_a_failed_read_is_a_problem(tmp_path: Path) -> None:
    from nodegc.hostio.mountinfo import forget_parses

    forget_parses()
    proc = _proc(tmp_path, f"{LINE}\n")
    kept = read_mounts(proc, reuse=True)
    fresh = read_mounts(proc)
    assert fresh[0] == kept[0] and fresh[0] is not kept[0]  # executors parse what they read
    (proc / "self" / "mountinfo").unlink()
    mounts, problems = read_mounts(proc, reuse=True)
    assert mounts == () and problems and "cannot read" in problems[0].reason
    _proc(tmp_path, "")
    assert read_mounts(proc, reuse=True) == ((), ())  # an empty table is not the remembered one
    forget_parses()


def test_a_table_keeps_one_string_per_type_source_and_options() -> None:
    """A node's thousands of tmpfs volumes spell "tmpfs" thousands of times: one object each in the parse."""
    lines = [f"{100 + i} 35 0:{60 + i} / /var/lib/kubelet/pods/u{i}/volumes/v rw,relatime shared:1 - tmpfs tmpfs"
             f" rw,size=4096k" for i in range(3)]
    mounts, reasons = parse_mountinfo("\n".join(lines))
    assert reasons == () and len(mounts) == 3
    for field in ("fs_type", "source", "options", "root"):
        assert len({id(getattr(m, field)) for m in mounts}) == 1, field
    assert [m.mount_point for m in mounts] == [f"/var/lib/kubelet/pods/u{i}/volumes/v" for i in range(3)]
