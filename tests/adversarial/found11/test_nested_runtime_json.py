"""JSON the runtime's side of the node holds, nested thousands deep: a task bundle's config.json (read by the
runtime leftovers scan) and a sandbox status's verbose info (read with every PodSandboxStatus). Python's
decoder raises RecursionError there, not ValueError: it escaped both readers and took the scan down. A
file or a reply nodegc cannot parse is unreadable (the bundle stays a leftover with no sandbox id, the
info is empty), never a crash."""

from __future__ import annotations

from pathlib import Path

from nodegc.inventory.cri.leftovers import CRI_NAMESPACE, TASKS_DIR, read_leftovers
from nodegc.inventory.cri.reading import _verbose_info

_NESTED = "[" * 200_000


def test_a_task_bundle_config_nested_too_deeply_is_unreadable_not_a_crash(tmp_path: Path) -> None:
    cid = "a" * 64
    bundle = tmp_path / TASKS_DIR / CRI_NAMESPACE / cid
    bundle.mkdir(parents=True)
    (bundle / "config.json").write_text(_NESTED)
    leftovers, _ = read_leftovers(tmp_path, mounts=[], proc_root=tmp_path / "noproc")
    task = [left for left in leftovers if left.what == "task_dir"]
    assert [left.id for left in task] == [cid]
    assert task[0].sandbox_id is None


def test_a_verbose_info_nested_too_deeply_is_empty_not_a_crash() -> None:
    assert _verbose_info({"info": _NESTED, "other": '{"a": 1}'}) == {"other": {"a": 1}}
